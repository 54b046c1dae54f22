/**
 * The SQLite backend's prepared statements (text in queries/*.sql), with their parameter and row
 * types. Every statement is prepared once per backend, in its constructor; list.ts prepares the
 * few list and finishedWindow shapes on first use. IN-lists are passed as one JSON array
 * parameter and expanded with `json_each(?)`, so one prepared statement serves any list length.
 */
import type Database from "better-sqlite3";
import type { JobState } from "../../core/job.js";
import type { ClaimKey } from "../job-rows.js";
import { sqliteQuery, type SqliteQueryName } from "./queries.js";
import type { JobRow } from "./rows.js";

/** A rescued job's columns; `excused` is 1 when this lease's expiry must not count as a stall (the stall_blame migration). */
export type ExpiredRow = Pick<JobRow, "seq" | "id" | "queue" | "name" | "attempt" | "max_attempts" | "stalls" | "worker_id" | "retain_dead_ms"> & {
  excused: number;
};

/** The parameters of a statement fenced by a lease (id, token, state 'active'). */
export interface FenceParams {
  id: string;
  token: number;
  now: number;
}

export interface PendingCounts {
  queue: string;
  due: number | null;
  total: number;
  oldest: number | null;
}

export interface StateCount {
  queue: string;
  state: JobState;
  n: number;
}

type QueueRow = { name: string; paused: number };

/** enqueue.sql's parameters, in order (job-inserts.ts batches them). */
export type InsertJob = [
  string,
  string,
  string,
  string,
  string | null,
  JobState,
  number,
  number,
  number,
  number,
  string,
  number | null,
  number | null,
  number | null,
];

/** The named range a claim's loose scan walks (queries/pending-queues.sql, pending-queues.ts). */
export interface PendingRange {
  first: string;
  last: string;
  most: number;
}

/** Every fixed statement, by its use (the text of each in queries/<file>.sql). */
export interface Statements {
  dataVersion: Database.Statement<[], number>;
  insertJob: Database.Statement<InsertJob>;
  upsertQueue: Database.Statement<[string]>;
  signalQueue: Database.Statement<[string], number>;
  wakeCounters: Database.Statement<[], { name: string; wake: number }>;
  setPaused: Database.Statement<[string, number]>;
  pausedAmong: Database.Statement<[string], string>;
  claimCandidates: Database.Statement<[string, number, string, number], ClaimKey>;
  /** claim-candidates.sql for one job name, given as is instead of as a JSON array (claimOneName). */
  claimCandidatesOfName: Database.Statement<[string, number, string, number], ClaimKey>;
  pendingQueues: Database.Statement<[PendingRange], string>;
  claimJobs: Database.Statement<[number, string, string, number, number, string], JobRow>;
  extendLease: Database.Statement<[number, string, number]>;
  leaseState: Database.Statement<[string], Pick<JobRow, "state" | "lease_token">>;
  deleteCompletedUnretained: Database.Statement<[FenceParams]>;
  logCompletedUnretained: Database.Statement<[FenceParams & { result: string }]>;
  completeJob: Database.Statement<[FenceParams & { result: string }]>;
  retryJob: Database.Statement<[FenceParams & { runAt: number; error: string }], string>;
  deleteDeadUnretained: Database.Statement<[FenceParams]>;
  logDeadUnretained: Database.Statement<[FenceParams & { error: string }]>;
  buryJob: Database.Statement<[FenceParams & { error: string }]>;
  releaseJob: Database.Statement<[FenceParams], string>;
  setProgress: Database.Statement<[string, string, number]>;
  expiredLeases: Database.Statement<[number, number], ExpiredRow>;
  busyWorkers: Database.Statement<[], string>;
  excuseWorkerJobs: Database.Statement<[string]>;
  markBuffered: Database.Statement<[number, string, number]>;
  rescueToWaiting: Database.Statement<[{ seq: number; now: number; error: string; stall: number }]>;
  rescueToDead: Database.Statement<[{ seq: number; now: number; error: string; attemptError: string; stall: number }]>;
  deleteBySeq: Database.Statement<[number]>;
  logDeadBySeq: Database.Statement<[{ seq: number; now: number; error: string }]>;
  promoteDue: Database.Statement<[number]>;
  deleteExpired: Database.Statement<[number, number]>;
  /** Completed and cancelled jobs of `queue` beyond the newest `keep` together, at most `limit`. */
  deleteCompletedBeyondCount: Database.Statement<[{ queue: string; limit: number; keep: number }]>;
  /** Dead jobs of `queue` beyond the newest `keep`, at most `limit`. */
  deleteDeadBeyondCount: Database.Statement<[{ queue: string; limit: number; keep: number }]>;
  queueNames: Database.Statement<[], string>;
  deleteExpiredKeys: Database.Statement<[number, number]>;
  getJob: Database.Statement<[string], JobRow>;
  queueRows: Database.Statement<[], QueueRow>;
  queueRow: Database.Statement<[string], QueueRow>;
  pendingCounts: Database.Statement<[number, number], PendingCounts>;
  pendingCountsOf: Database.Statement<[number, number, string], PendingCounts>;
  settledCounts: Database.Statement<[], StateCount>;
  settledCountsOf: Database.Statement<[string, string], StateCount>;
  cancelLookup: Database.Statement<[string], Pick<JobRow, "state" | "retain_completed_ms">>;
  cancelPending: Database.Statement<[{ id: string; now: number }]>;
  cancelActive: Database.Statement<[{ id: string; now: number }]>;
  deleteById: Database.Statement<[string]>;
  replayJob: Database.Statement<[number, string], string>;
  removeFinished: Database.Statement<[string]>;
  jobState: Database.Statement<[string], JobState>;
  jobQueue: Database.Statement<[string], string>;
  deleteKeyIfExpired: Database.Statement<[string, number]>;
  insertKey: Database.Statement<[string, number]>;
}

/** claim-candidates.sql's test of the job names against its JSON array of names. */
const NAMES_IN_ARRAY = "name IN (SELECT value FROM json_each(?))";

/**
 * claim-candidates.sql for a claim naming one job name (a Worker with one handler): `name = ?`
 * instead of the JSON array, whose `json_each` and Bloom filter were built on every claim, about
 * a fifth of the statement's CPU (docs/performance-sqlite.md, Session 11). Derived from the file,
 * so the two cannot drift apart; fails at prepare time if the file no longer has the test.
 */
function claimOneName(candidates: string): string {
  if (!candidates.includes(NAMES_IN_ARRAY)) throw new Error(`claim-candidates.sql no longer tests names with "${NAMES_IN_ARRAY}"`);
  return candidates.replace(NAMES_IN_ARRAY, "name = ?");
}

/** Prepares every fixed statement of queries/ on `db` for tables named with `prefix`. */
export function prepareStatements(db: Database.Database, prefix: string): Statements {
  // The parameter and row types come from the Statements interface (inferred from the property each fills).
  const prepared = <P extends unknown[], R>(name: SqliteQueryName): Database.Statement<P, R> => db.prepare<P, R>(sqliteQuery(name, prefix));
  const plucked = <P extends unknown[], R>(name: SqliteQueryName): Database.Statement<P, R> => prepared<P, R>(name).pluck();
  return {
    dataVersion: plucked("data-version"),
    insertJob: prepared("enqueue"),
    upsertQueue: prepared("queue-upsert"),
    signalQueue: plucked("queue-signal"),
    wakeCounters: prepared("wake-counters"),
    setPaused: prepared("pause"),
    pausedAmong: plucked("paused-among"),
    claimCandidates: prepared("claim-candidates"),
    claimCandidatesOfName: db.prepare(claimOneName(sqliteQuery("claim-candidates", prefix))),
    pendingQueues: plucked("pending-queues"),
    claimJobs: prepared("claim"),
    extendLease: prepared("heartbeat"),
    leaseState: prepared("lease-state"),
    deleteCompletedUnretained: prepared("complete-unretained"),
    logCompletedUnretained: prepared("log-completed-unretained"),
    completeJob: prepared("complete"),
    retryJob: plucked("retry"),
    deleteDeadUnretained: prepared("bury-unretained"),
    logDeadUnretained: prepared("log-dead-unretained"),
    buryJob: prepared("bury"),
    releaseJob: plucked("release"),
    setProgress: prepared("progress"),
    expiredLeases: prepared("rescue-expired"),
    busyWorkers: plucked("rescue-busy-workers"),
    excuseWorkerJobs: prepared("rescue-excuse-worker"),
    markBuffered: prepared("mark-buffered"),
    rescueToWaiting: prepared("rescue-to-waiting"),
    rescueToDead: prepared("rescue-to-dead"),
    deleteBySeq: prepared("delete-by-seq"),
    logDeadBySeq: prepared("log-dead-by-seq"),
    promoteDue: prepared("promote"),
    deleteExpired: prepared("prune-expired"),
    deleteCompletedBeyondCount: prepared("prune-beyond-count-completed"),
    deleteDeadBeyondCount: prepared("prune-beyond-count-dead"),
    queueNames: plucked("queue-names"),
    deleteExpiredKeys: prepared("prune-keys"),
    getJob: prepared("get"),
    queueRows: prepared("stats-queues"),
    queueRow: prepared("stats-queue"),
    pendingCounts: prepared("stats-pending"),
    pendingCountsOf: prepared("stats-pending-of"),
    settledCounts: prepared("stats-settled"),
    settledCountsOf: prepared("stats-settled-of"),
    cancelLookup: prepared("cancel-lookup"),
    cancelPending: prepared("cancel-pending"),
    cancelActive: prepared("cancel-active"),
    deleteById: prepared("delete-by-id"),
    replayJob: plucked("replay"),
    removeFinished: prepared("remove"),
    jobState: plucked("job-state"),
    jobQueue: plucked("job-queue"),
    deleteKeyIfExpired: prepared("once-expire"),
    insertKey: prepared("once"),
  };
}
