/**
 * The SQLite backend's statements: one file each in queries/, with the PostgreSQL backend's
 * header convention (what it does, its parameters, what it returns, why it is written so).
 * Positional parameters are written `?` and listed in the header as ?1, ?2, … in the order they
 * bind; named ones are written `@name`. Placeholders filled when a statement is prepared:
 * - `{{prefix}}`: the table prefix (SqliteBackendOptions.tablePrefix);
 * - `{{append_history('outcome', error)}}`: the SET term appending the ending attempt to
 *   `history` (see {@link appendHistory});
 * - list.sql's `{{where}}` and `{{direction}}`, finished-*.sql's `{{state}}`: filled by list.ts.
 */
import { readQueryFiles } from "../query-files.js";

/** The statements in queries/, by file name. */
const QUERY_FILES = [
  "data-version",
  "enqueue",
  "enqueue-many",
  "queue-upsert",
  "queue-signal",
  "wake-counters",
  "pause",
  "paused-among",
  "claim-candidates",
  "claim",
  "heartbeat",
  "lease-state",
  "complete-unretained",
  "log-completed-unretained",
  "complete",
  "retry",
  "bury-unretained",
  "log-dead-unretained",
  "bury",
  "release",
  "progress",
  "rescue-expired",
  "rescue-busy-workers",
  "rescue-excuse-worker",
  "mark-buffered",
  "rescue-to-waiting",
  "rescue-to-dead",
  "delete-by-seq",
  "log-dead-by-seq",
  "promote",
  "prune-expired",
  "prune-beyond-count-completed",
  "prune-beyond-count-dead",
  "queue-names",
  "prune-keys",
  "get",
  "stats-queues",
  "stats-queue",
  "stats-pending",
  "stats-pending-of",
  "stats-settled",
  "stats-settled-of",
  "cancel-lookup",
  "cancel-pending",
  "cancel-active",
  "delete-by-id",
  "replay",
  "remove",
  "job-state",
  "job-queue",
  "once-expire",
  "once",
  "list",
  "finished-count",
  "finished-sample",
  "pending-queues",
] as const;

export type SqliteQueryName = (typeof QUERY_FILES)[number];

let cachedQueryFiles: Record<SqliteQueryName, string> | null = null;

/** Reads queries/*.sql once per process (the build copies the folder next to queries.js). */
function queryFiles(): Record<SqliteQueryName, string> {
  cachedQueryFiles ??= readQueryFiles(new URL("./queries/", import.meta.url), QUERY_FILES, "SQLite", "src/backend/sqlite/queries");
  return cachedQueryFiles;
}

const APPEND_HISTORY = /\{\{append_history\('([a-z-]+)', (NULL|json\(@[A-Za-z]+\))\)\}\}/g;

/**
 * The SET term appending the attempt that is ending to `history`; SET expressions see the row as
 * it was, so `attempt` and the worker columns are the ending attempt's. better-sqlite3 binds every
 * JS number as REAL, which JSON would render as "1893456000000.0": hence the CAST.
 */
function appendHistory(outcome: string, error: string): string {
  return `history = json_insert(history, '$[#]', json_object(
         'attempt', attempt, 'workerId', worker_id, 'host', worker_host, 'pid', worker_pid,
         'startedAt', started_at, 'finishedAt', CAST(@now AS INTEGER), 'outcome', '${outcome}', 'error', ${error}))`;
}

/** The text of statement `name` for tables named with `prefix`, its shared placeholders filled. */
export function sqliteQuery(name: SqliteQueryName, prefix: string): string {
  return queryFiles()
    [name].replaceAll("{{prefix}}", prefix)
    .replace(APPEND_HISTORY, (_whole, outcome: string, error: string) => appendHistory(outcome, error));
}
