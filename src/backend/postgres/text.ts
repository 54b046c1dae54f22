import type { ErrorInfo } from "../../core/job.js";
import { UNKEEPABLE_CHARACTER } from "../../core/key-text.js";
import { serializeError } from "../error-json.js";

/** UNKEEPABLE_CHARACTER, every one: PostgreSQL stores none of them. */
const UNSTORABLE = new RegExp(UNKEEPABLE_CHARACTER.source, "g");

/**
 * Text PostgreSQL can store: each character it refuses (UNSTORABLE) becomes U+FFFD, the
 * replacement character, which is what node-postgres already makes of a lone surrogate in a
 * `text` parameter. For text Conveyor cannot refuse because nobody could correct it: a handler's
 * error, a log line, a broker's reason for refusing an event. Refused, the statement failed, and
 * the worker tried again to settle the job for as long as it held it, in vain (the job stayed
 * active); a log line was dropped. Payloads, results and progress are `json` columns, which keep
 * the text as given: they are stored exactly, as on SQLite and Redis.
 */
export function storableText(text: string): string {
  return text.replace(UNSTORABLE, "\ufffd");
}

/** An attempt's error as the `error` and `history` columns (jsonb) can hold it (storableText). */
export function storableError(error: ErrorInfo): string {
  return serializeError({
    name: storableText(error.name),
    message: storableText(error.message),
    stack: error.stack == null ? null : storableText(error.stack),
  });
}
