/**
 * A completed job's history with its completed attempt. PostgreSQL (complete.sql) and Redis
 * (lua/complete-4.lua) do not append that record when a job completes: every field of it is kept
 * on the job already (the attempt, the worker, when it started and finished), and building it on
 * the hottest write cost a third of PostgreSQL's statement and a fifth of Redis' script per job
 * (docs/performance-postgres.md, docs/performance-redis.md). The store adds it here when it reads
 * the job. A job completed by an earlier version carries the record
 * already (its last entry is this attempt's 'completed' one) and is returned as stored.
 */
import type { AttemptRecord } from "../core/job.js";

export function withCompletedAttempt(history: AttemptRecord[], attempt: Omit<AttemptRecord, "outcome" | "error">): AttemptRecord[] {
  const last = history.at(-1);
  if (last !== undefined && last.outcome === "completed" && last.attempt === attempt.attempt) return history;
  return [...history, { ...attempt, outcome: "completed", error: null }];
}
