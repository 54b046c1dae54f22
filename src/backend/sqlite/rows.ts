/** The SQLite jobs row as better-sqlite3 returns it, and its mapping to a JobRecord (../job-rows.ts). */
import { jobRecordFromRow, type SqlJobRow } from "../job-rows.js";
import type { AttemptRecord, BackoffSpec, ErrorInfo, JobRecord } from "../../core/job.js";
import type { Json } from "../../core/json.js";

/** The columns SQLite stores as JSON text. */
type JsonColumns = "payload" | "meta" | "backoff" | "progress" | "result" | "error" | "history";

/** One row of the jobs table, as better-sqlite3 returns it: JSON columns as text, plus SQLite-only columns. */
export interface JobRow extends Omit<SqlJobRow, JsonColumns> {
  payload: string;
  meta: string | null;
  backoff: string;
  progress: string | null;
  result: string | null;
  error: string | null;
  history: string;
  retain_completed_ms: number | null;
  retain_dead_ms: number | null;
  expires_at: number | null;
}

/** The job a row holds, as seen at `now`. */
export function toRecord(row: JobRow, now: number): JobRecord {
  return jobRecordFromRow(
    {
      ...row,
      payload: JSON.parse(row.payload) as Json,
      meta: row.meta === null ? null : (JSON.parse(row.meta) as { [key: string]: Json }),
      backoff: JSON.parse(row.backoff) as BackoffSpec,
      progress: row.progress === null ? null : (JSON.parse(row.progress) as Json),
      result: row.result === null ? null : (JSON.parse(row.result) as Json),
      error: row.error === null ? null : (JSON.parse(row.error) as ErrorInfo),
      history: JSON.parse(row.history) as AttemptRecord[],
    },
    now,
  );
}
