import type { ErrorInfo } from "../core/job.js";

/**
 * An attempt's error as the SQL backends store it (a JSON column): exactly the ErrorInfo fields,
 * whatever else the caller's object carries, so a stored error never holds more than it shows.
 */
export function serializeError(error: ErrorInfo): string {
  return JSON.stringify({ name: error.name, message: error.message, stack: error.stack ?? null });
}
