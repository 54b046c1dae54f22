import type { ErrorInfo, JobRecord } from "../core/job.js";
import type { Json } from "../core/json.js";

/** Messages between a Worker and its sandbox processes (one job at a time per process). */
export type ToSandbox =
  | { type: "run"; job: JobRecord }
  | { type: "abort"; reason: ErrorInfo }
  | { type: "once-result"; requestId: number; value: boolean }
  | { type: "call-error"; requestId: number; message: string };

export type FromSandbox =
  /** Sent once after the handlers module loaded. */
  | { type: "ready"; names: string[] }
  /** The module could not be loaded: the sandbox cannot run anything. */
  | { type: "load-error"; error: ErrorInfo }
  | { type: "progress"; value: Json }
  | { type: "log"; line: string }
  | { type: "once"; requestId: number; key: string; ttlMs: number }
  | { type: "done"; result: Json }
  | { type: "failed"; error: ErrorInfo; unrecoverable: boolean; retryDelayMs: number | null };
