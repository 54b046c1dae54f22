/**
 * A jobs-table row as both SQL stores keep it (SQLite and PostgreSQL share the column set), and
 * its mapping to the contract's JobRecord: one place, so the two cannot drift. Each store decodes
 * its own column types first (SQLite's JSON columns are text; pg parses jsonb itself).
 */
import { withCompletedAttempt } from "./history.js";
import { effectiveState, type AttemptRecord, type BackoffSpec, type ErrorInfo, type JobRecord, type JobState } from "../core/job.js";
import type { Json } from "../core/json.js";

/** One row of the jobs table with its JSON columns parsed. */
export interface SqlJobRow {
  seq: number;
  id: string;
  queue: string;
  name: string;
  payload: Json;
  meta: { [key: string]: Json } | null;
  state: JobState;
  priority: number;
  run_at: number;
  created_at: number;
  attempt: number;
  max_attempts: number;
  backoff: BackoffSpec;
  timeout_ms: number | null;
  lease_token: number;
  lease_expires_at: number | null;
  worker_id: string | null;
  worker_host: string | null;
  worker_pid: number | null;
  started_at: number | null;
  finished_at: number | null;
  stalls: number;
  replays: number;
  progress: Json | null;
  result: Json | null;
  error: ErrorInfo | null;
  history: AttemptRecord[];
  parent_id: string | null;
  parent_queue: string | null;
}

/**
 * The job a row holds, as seen at `now` (a due `scheduled` job is reported `waiting`). A completed
 * row's history gets its completed attempt from the row's own columns: neither store's complete.sql
 * appends it (history.ts).
 */
export function jobRecordFromRow(row: SqlJobRow, now: number): JobRecord {
  const history =
    row.state !== "completed"
      ? row.history
      : withCompletedAttempt(row.history, {
          attempt: row.attempt,
          workerId: row.worker_id!,
          host: row.worker_host!,
          pid: row.worker_pid!,
          startedAt: row.started_at!,
          finishedAt: row.finished_at!,
        });
  return {
    id: row.id,
    queue: row.queue,
    name: row.name,
    data: row.payload,
    state: effectiveState(row.state, row.run_at, now),
    priority: row.priority,
    attempt: row.attempt,
    maxAttempts: row.max_attempts,
    backoff: row.backoff,
    timeoutMs: row.timeout_ms,
    runAt: row.run_at,
    createdAt: row.created_at,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
    // An active row always has its lease columns set: claim writes them all in one statement.
    lease:
      row.state === "active"
        ? {
            jobId: row.id,
            token: row.lease_token,
            expiresAt: row.lease_expires_at!,
            worker: { id: row.worker_id!, host: row.worker_host!, pid: row.worker_pid! },
          }
        : null,
    progress: row.progress,
    result: row.result,
    error: row.error,
    history,
    stalls: row.stalls,
    replays: row.replays,
    meta: row.meta,
    ...(row.parent_id === null ? {} : { parent: { id: row.parent_id, queue: row.parent_queue! } }),
  };
}

/** The columns of the claim order. */
export type ClaimKey = Pick<SqlJobRow, "seq" | "priority" | "run_at">;

/** Claim order across queues: priority, then due time, then enqueue order. */
export function byClaimOrder(a: ClaimKey, b: ClaimKey): number {
  return a.priority - b.priority || a.run_at - b.run_at || a.seq - b.seq;
}
