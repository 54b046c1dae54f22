/**
 * An attempt's error as stores keep it, bounded: the worker records it, and a sandboxed handler's
 * process (runtime/sandbox-child.ts) cuts it before sending it over IPC, so a handler quoting its
 * whole input in a message cannot make a message too large to send.
 */
import { cutText } from "./checks.js";
import type { ErrorInfo } from "./job.js";
import { JOB_LOG_TRUNCATION_MARK } from "./job-log.js";

/**
 * What an attempt's error keeps, in UTF-16 code units; a longer part is cut and ends with
 * JOB_LOG_TRUNCATION_MARK. A message was kept whole: one of hundreds of megabytes (a handler
 * quoting its whole input) made the failure's batch too large to send, and every job of the
 * batch stayed active while the worker tried again (on PostgreSQL: "Invalid string length").
 */
export const ERROR_BOUNDS = { nameChars: 256, messageChars: 65_536, stackChars: 16_384 } as const;

export function errorInfo(error: Error): ErrorInfo {
  const cut = (text: string, max: number) => cutText(text, max, JOB_LOG_TRUNCATION_MARK);
  return {
    name: cut(String(error.name || "Error"), ERROR_BOUNDS.nameChars),
    message: cut(String(error.message ?? ""), ERROR_BOUNDS.messageChars),
    stack: typeof error.stack === "string" ? cut(error.stack, ERROR_BOUNDS.stackChars) : null,
  };
}
