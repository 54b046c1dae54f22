/**
 * A job's log: the lines a handler writes with `ctx.log(line)`, kept with the job in the store
 * (shown by `conveyor jobs show` and the HTTP job view) and deleted with it.
 *
 * The bounds are the same on every backend, so they live here once:
 * - at most `JOB_LOG_MAX_LINES` lines per job, over all its attempts: a line beyond that drops
 *   the oldest one (the end of a log says why a job failed; its start rarely does);
 * - at most `JOB_LOG_MAX_LINE_LENGTH` characters per line: a longer line is cut and ends with
 *   `JOB_LOG_TRUNCATION_MARK`.
 * So one job's log holds at most 1000 × 1000 characters (about 1 MB of ASCII, 3 MB at worst).
 */
import { cutText } from "./checks.js";

/** Lines kept per job, over all its attempts; the oldest are dropped beyond it. */
export const JOB_LOG_MAX_LINES = 1_000;
/** Characters (UTF-16 code units) kept of one line; a longer line is cut. */
export const JOB_LOG_MAX_LINE_LENGTH = 1_000;
/** Appended to a line that was cut. */
export const JOB_LOG_TRUNCATION_MARK = "… [truncated]";

/** One stored log line. */
export interface JobLogLine {
  /** When the store received it, ms since epoch (store clock). */
  at: number;
  /** The attempt that wrote it (1 for the first). */
  attempt: number;
  line: string;
}

/**
 * The lines one append stores: each cut to the length bound (never splitting a surrogate pair),
 * and of a batch longer than the line bound only its newest lines, since older ones would be
 * dropped at once anyway. Every backend's `appendLogs` applies this before writing.
 */
export function boundLogLines(lines: readonly string[]): string[] {
  const newest = lines.length > JOB_LOG_MAX_LINES ? lines.slice(lines.length - JOB_LOG_MAX_LINES) : lines;
  return newest.map((line) => cutText(String(line), JOB_LOG_MAX_LINE_LENGTH, JOB_LOG_TRUNCATION_MARK));
}
