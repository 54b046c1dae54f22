/**
 * The backend contract: everything the runtime, the CLI and the HTTP service need from a store.
 *
 * Rules every implementation follows (the conformance suite in test/conformance checks them):
 * - Every state change of a job is ONE atomic step in the store (a transaction, a statement, a Lua
 *   script). No read-modify-write across round trips.
 * - Time comes from the backend's clock (`now()`): the database's, Redis's, or the injected test
 *   clock — never the worker's wall clock.
 * - `complete`, `fail`, `release` and `progress` apply only while the job is `active` under the
 *   exact lease token presented. A stale token is refused (reported, never applied).
 * - Maintenance calls (`rescueExpired`, `promoteDue`, `prune`) are safe to run from many processes
 *   at once.
 * - Batch calls return one result per input, in input order.
 * - Arguments are checked, and defaults applied, once for every store by the checking facade
 *   (./checked.ts) that each backend constructor returns: a store trusts what reaches it, and a
 *   call its `StoreFeatures` rule out is refused there with `UnsupportedByStoreError`.
 */
import type { Json } from "../core/json.js";
import type { ErrorInfo, FlowInfo, FlowNodeSpec, JobRecord, JobSpec, JobState, Lease, WorkerIdentity } from "../core/job.js";
import { InvalidInputError, type LeaseLossReason } from "../core/errors.js";
import type { ScheduleFiring, ScheduleWrite, StoredSchedule } from "../core/schedule.js";
import type { JobLogLine } from "../core/job-log.js";
import type { EventLogPage, EventPrunePolicy } from "../core/queue-events.js";
import type { QueueFlow, StoredQueueLimits } from "../core/flow.js";

/**
 * The defaults the contract documents below, in one place for every backend (and the maintenance
 * timers) to share, so they cannot drift apart.
 */
/** `RescueOptions.maxStalls`. */
export const DEFAULT_MAX_STALLS = 3;
/** `RescueOptions.limit`. */
export const DEFAULT_RESCUE_LIMIT = 1_000;
/** `PrunePolicy.maxCompletedPerQueue`. */
export const DEFAULT_MAX_COMPLETED_PER_QUEUE = 1_000;
/** `PrunePolicy.maxDeadPerQueue`. */
export const DEFAULT_MAX_DEAD_PER_QUEUE = 10_000;
/** `PrunePolicy.limit`: rows one prune call deletes at most. */
export const DEFAULT_PRUNE_LIMIT = 5_000;
/** `Page.limit`, and its ceiling. */
export const DEFAULT_PAGE_LIMIT = 50;
export const MAX_PAGE_LIMIT = 1_000;

/**
 * The queue rule of the by-id calls (`get`, `cancel`, `replay`, `remove`): a job found under an id
 * counts only when no queue was named, or it is that queue's job.
 */
export function inQueue(jobQueue: string | undefined, queue: string | undefined): boolean {
  return jobQueue !== undefined && (queue === undefined || jobQueue === queue);
}

/**
 * What a store of job records can do that a message broker cannot (RabbitMQ: `conveyor-jobs/amqp`).
 * SQLite, PostgreSQL and Redis have them all ({@link FULL_STORE_FEATURES}); the conformance suite
 * skips the tests of a missing one by its name.
 */
export interface StoreFeatures {
  /**
   * `get`, `list` and `stats` see every job in every state, so a job's status can be polled.
   * Without it only dead letters can be read (`get`, `list` with state "dead"), replayed and
   * removed; anything else throws `UnsupportedByStoreError` (HTTP 501).
   */
  jobRecords: boolean;
  /** `cancel` stops a waiting, scheduled or active job. Without it, `cancel` throws `UnsupportedByStoreError`. */
  cancel: boolean;
  /** Any `priority` is honoured (lower runs first). Without it, enqueue refuses a priority other than 0. */
  priorities: boolean;
  /**
   * A job id names at most one job: enqueueing an id that exists is reported as a duplicate. In
   * the whole store, or, where `Capabilities.jobIdsPerQueue` is set, within its queue.
   */
  uniqueIds: boolean;
  /** `pause`/`resume` stop and restart claiming from a queue for every worker. Without it they throw `UnsupportedByStoreError`. */
  pause: boolean;
  /**
   * Delays, leases, rescue and retention follow `now()`, so an injected clock drives them. Without
   * it the broker's own wall clock does (delays are message TTLs, a lease lasts while its
   * connection does) and `rescueExpired`, `promoteDue` and `prune` have nothing to do.
   */
  clockDriven: boolean;
  /** `idempotency.once` records keys. Without it, it throws `UnsupportedByStoreError`. */
  idempotencyKeys: boolean;
  /**
   * `JobOptions.dedup` windows (drop, extend, replace) are enforced by the store. Without it, enqueue
   * refuses a spec with `dedup` (`UnsupportedByStoreError`).
   */
  dedupWindows: boolean;
  /**
   * Queue flow limits and holds (`setQueueLimits`, `getQueueFlow`, `holdQueue`; docs/flow-control.md)
   * are enforced by the store on every claim. Without it those calls throw `UnsupportedByStoreError`.
   */
  queueLimits: boolean;
  /**
   * Cron schedules are stored and fired (`scheduleUpsert`, `scheduleList`, `scheduleRemove`,
   * `scheduleFire`). Without it they throw `UnsupportedByStoreError`, and workers run no scheduler.
   */
  schedules: boolean;
  /**
   * `finishedWindow` counts and samples the jobs that finished in a time window, from an index on
   * their finish time (the dashboard's fleet-wide charts). Without it, it throws
   * `UnsupportedByStoreError`.
   */
  finishedWindows: boolean;
}

/** Every {@link StoreFeatures} present: SQLite, PostgreSQL and Redis. */
export const FULL_STORE_FEATURES: Readonly<StoreFeatures> = Object.freeze({
  jobRecords: true,
  cancel: true,
  priorities: true,
  uniqueIds: true,
  pause: true,
  clockDriven: true,
  idempotencyKeys: true,
  dedupWindows: true,
  queueLimits: true,
  schedules: true,
  finishedWindows: true,
});

/** What a backend can do; callers branch on these, never on a backend's name. */
export interface Capabilities extends StoreFeatures {
  /** `enqueue(specs, { tx })` joins the caller's own database transaction. */
  transactionalEnqueue: boolean;
  /** `subscribe` wakes workers in other processes, not only in this one. */
  crossProcessWakeups: boolean;
  /** Several OS processes may share the store. (False for an in-memory SQLite database.) */
  multiProcess: boolean;
  /** `beginCompletion` exists: a handler's own writes commit atomically with the job's completion. */
  transactionalCompletion: boolean;
  /**
   * How one claim over several queues orders them (within each queue the claim order always
   * holds). "merged": the queues' jobs are merged by that same order (priority, run_at,
   * insertion), as if they were one queue, so a queue of urgent jobs is served before the others.
   * "turns": the queues are taken in turn, starting one further at every claim, so each queue
   * with claimable jobs is served within as many claims as there are queues, whatever the others
   * hold (Redis: each queue lives in its own slot and no script may read two).
   */
  claimAcrossQueues: "merged" | "turns";
  /**
   * Flows (`enqueueFlow`, `flow`): "across-queues" when a flow's jobs may live in different queues,
   * "within-queue" when every job of a flow must be in one queue (Redis Cluster: a child's settle
   * and its parent's release are one script, which cannot reach another queue's slot). "none" when
   * the store keeps no records to hold a parent back (RabbitMQ): `enqueueFlow` and `flow` throw
   * `UnsupportedByStoreError`.
   */
  flows: "across-queues" | "within-queue" | "none";
  /**
   * The store keeps a durable log of job events, written with each change (`readEvents`,
   * `latestEventCursor`, `pruneEvents` exist): `queue.events()` and `GET /v1/events` need it.
   * Absent means false.
   */
  eventLog?: boolean;
  /**
   * Jobs may carry a `group` (fleet-wide concurrency per group, claims in turns across groups)
   * and a `limiter` key (a rate per key); see docs/flow-control.md. Without it, enqueueing such a
   * job is refused with InvalidInputError rather than run unlimited.
   */
  jobFlowKeys: boolean;
  /**
   * Job ids are unique per queue rather than in the whole store (Redis: each queue lives in its own
   * slot, and no script may check another's): the same id enqueued in two queues is two jobs, so
   * `get`, `cancel`, `replay` and `remove` without a queue throw `AmbiguousJobIdError` for an id
   * several queues hold, and callers that act for someone (the HTTP service) always name the
   * queue. Absent means false: the second enqueue is a duplicate of the first queue's job, and a
   * by-id call naming the other queue finds nothing.
   */
  jobIdsPerQueue?: boolean;
  /**
   * `completeAndClaim` exists: a batch of completions and the next claim go to the store as one
   * call (one round trip, one commit). Absent means false.
   */
  completeAndClaim?: boolean;
  /**
   * A claim records the jobs beyond `ClaimRequest.startsAtOnce` as held unstarted in the prefetch
   * buffer (what `markBuffered(…, true)` records) in its own write, and says so in
   * `ClaimedJob.markedBuffered`: the worker sends no separate mark for them. Absent means false.
   */
  claimMarksBuffered?: boolean;
}

/** Any client with a `query(text, params)` method: pg's Client/PoolClient, and adapters for others. */
export interface SqlClient {
  query(text: string, params?: unknown[]): Promise<unknown>;
}

/**
 * A database transaction opened for a running job. The handler writes through `client`; `commit`
 * then completes the job in the same transaction, fenced by the lease: if the lease is stale the
 * whole transaction rolls back, so the handler's writes are never applied twice.
 */
export interface CompletionTransaction {
  readonly client: SqlClient;
  /** Completes the job (fenced) and commits everything; "stale" means it all rolled back. */
  commit(result: Json): Promise<SettleResult>;
  /** Rolls the handler's writes back (the job is then failed or released the usual way). */
  rollback(): Promise<void>;
}

export interface EnqueueOptions {
  /** The caller's transaction handle, for backends with `transactionalEnqueue`. */
  tx?: unknown;
  /**
   * When any spec would be a duplicate (its id exists, or repeats an earlier spec of the batch),
   * store none of the batch. The results still flag the duplicates; the others are `duplicate:
   * false` but were not stored either. Every spec must be of one queue (Redis keeps each queue in
   * its own slot). Default false: the new jobs are stored and the duplicates skipped.
   */
  allOrNothing?: boolean;
}

/** `options.allOrNothing`, checked: such a batch holds jobs of one queue only. */
export function allOrNothingOf(specs: readonly JobSpec[], options: EnqueueOptions | undefined): boolean {
  if (options?.allOrNothing !== true) return false;
  const queue = specs[0]?.queue;
  if (specs.some((s) => s.queue !== queue)) {
    throw new InvalidInputError("an all-or-nothing enqueue must hold jobs of one queue only; split the batch by queue");
  }
  return true;
}

/** True when an all-or-nothing batch stored nothing (one of its specs was a duplicate). */
export function refusedBatch(results: readonly EnqueueResult[]): boolean {
  return results.some((r) => r.duplicate);
}

export interface EnqueueResult {
  /** The stored job's id; for a job a dedup window took in, the id of the window's job. */
  id: string;
  /**
   * True when no new job was stored for this spec: a job with this id already existed, or a dedup
   * window took it in (then `dedup` says how).
   */
  duplicate: boolean;
  /**
   * Only for a spec with `dedup` that met an open window: "dropped" (nothing changed), "extended"
   * (the window restarts) or "replaced" (the window's job took this spec's data and run time).
   */
  dedup?: "dropped" | "extended" | "replaced";
}

export interface ClaimRequest {
  /** Queues to take from. */
  queues: readonly string[];
  /** Only jobs with one of these names are claimed (the names this worker has handlers for). */
  names: readonly string[];
  worker: WorkerIdentity;
  /** Maximum jobs to claim: an integer from 1 to 100 000 (`MAX_CLAIM_LIMIT`). */
  limit: number;
  /** Lease length in milliseconds from the store's now. */
  leaseMs: number;
  /**
   * Called, before the claim resolves, for each requested queue whose flow control (limits or a
   * hold, see `setQueueLimits`) let none of its jobs start in this claim: `retryInMs` is when a
   * rate slot opens or the hold ends, or null when the queue waits on running jobs to finish.
   * Also for a queue whose rate this claim filled (it took the window's last open slot):
   * `retryInMs` is then when the next slot opens, so no claim has to find the queue full first.
   * Default: none.
   */
  onThrottle?: (throttle: ClaimThrottle) => void;
  /**
   * How many of the claimed jobs, the first in claim order, the worker starts at once; the others
   * wait unstarted in its prefetch buffer. Stores with `capabilities.claimMarksBuffered` record
   * those others as buffered with the claim (see `markBuffered`) and set
   * `ClaimedJob.markedBuffered`; other stores ignore it. An integer from 0 to `limit`. Default:
   * none recorded (every claimed job counts as started, as after `markBuffered(…, false)`).
   */
  startsAtOnce?: number;
}

/** See `Backend.holdQueue`. */
export interface HoldOptions {
  /** Hold only the limiter key of this job (its id) instead of the whole queue. Default: the queue. */
  keyOfJob?: string;
}

/** See `ClaimRequest.onThrottle`. */
export interface ClaimThrottle {
  queue: string;
  /** Milliseconds until a start may be possible again, or null (waits on running jobs). */
  retryInMs: number | null;
}

/** What `completeAndClaim` answers: the completions' results and the jobs claimed. */
export interface CompleteAndClaimResult {
  /** One per completion, in input order, as `complete` answers. */
  settled: SettleResult[];
  /** As `claim` answers. */
  claimed: ClaimedJob[];
}

/** A claimed job: the record plus the lease every settle call must present. */
export interface ClaimedJob {
  job: JobRecord;
  lease: Lease;
  /** When the lease expires, store clock, ms since epoch. */
  leaseExpiresAt: number;
  /**
   * The claim recorded this job as buffered (`ClaimRequest.startsAtOnce`,
   * `capabilities.claimMarksBuffered`): its start must be marked (`markBuffered(…, false)`).
   * Absent: not recorded.
   */
  markedBuffered?: boolean;
}

export interface HeartbeatResult {
  /** Leases that were NOT extended, with why. The runtime aborts those handlers. */
  lost: Array<{ lease: Lease; reason: LeaseLossReason }>;
}

export interface Completion {
  lease: Lease;
  result: Json;
}

export interface Failure {
  lease: Lease;
  error: ErrorInfo;
  /** Delay before the next attempt in ms (state `scheduled`), or null to make the job `dead`. */
  retryDelayMs: number | null;
}

/** Per-item answer of a fenced call: applied, or refused because the lease was stale. */
export type SettleResult = "applied" | "stale";

export interface RescueOptions {
  /**
   * Lease expiries in a row after which the job is quarantined in `dead` instead of retried
   * (it keeps killing its workers). Default 3. An expiry counts only when the job is the likely
   * cause: it had started (it was not held unstarted in a prefetch buffer, see `markBuffered`)
   * and it was the only started job of its worker (on Redis: of its worker in its queue). A
   * worker that dies running several jobs does not say which one killed it, so none of them is
   * counted, also those whose leases expire later than the first (the rescuer excuses them all
   * at the first); their attempts still are. An expiry that does not count leaves the count as
   * it was.
   */
  maxStalls?: number;
  /** Maximum jobs to rescue in one call. Default 1000. */
  limit?: number;
}

export interface RescuedJob {
  id: string;
  queue: string;
  name: string;
  /** `waiting` when it will run again, `dead` when attempts or `maxStalls` ran out. */
  state: "waiting" | "dead";
  attempt: number;
  workerId: string | null;
}

export interface PrunePolicy {
  /** Keep at most this many completed (and cancelled) jobs per queue; older ones go. Default 1000. */
  maxCompletedPerQueue?: number;
  /** Keep at most this many dead jobs per queue. Default 10000. */
  maxDeadPerQueue?: number;
  /** Maximum rows deleted in one call, so one prune never holds the store for long. Default 5000. */
  limit?: number;
}

export interface PruneResult {
  /** Jobs deleted. */
  jobs: number;
  /** Expired idempotency keys deleted. */
  idempotencyKeys: number;
}

export interface ListFilter {
  queue?: string;
  /** `waiting` includes due `scheduled` jobs; `scheduled` only future ones. */
  state?: JobState;
  name?: string;
  /** Only jobs created at or after this time, ms since epoch (store clock). Default: no bound. */
  createdFrom?: number;
  /** Only jobs created before this time, ms since epoch (store clock). Default: no bound. */
  createdUntil?: number;
}

export interface Page {
  /** Default 50, at most 1000. */
  limit?: number;
  /** Rows to skip (after the cursor, when `after` is given too). Default 0, at most 1,000,000,000 (page deeper with `after`). */
  offset?: number;
  /**
   * Keyset pagination: only jobs that come after this job (by id) in the listing's newest-first
   * order, so a deep page costs what the first one does. Needs `filter.queue`, and the job must
   * still be in that queue: a cursor whose job was deleted meanwhile is refused with
   * InvalidInputError (start again from the first page). Default: from the newest job.
   */
  after?: string;
  /**
   * The reverse cursor (the previous page): only jobs that come before this job in the
   * newest-first order, i.e. newer ones, the `limit` closest to it, still returned newest first.
   * Same rules as `after` (needs `filter.queue`; a deleted cursor job is refused); not with
   * `after`. Default: none.
   */
  before?: string;
}

/** One finished job's times, as `finishedWindow` samples them (ms since epoch, store clock). */
export interface FinishedTiming {
  state: "completed" | "dead";
  /** When its last attempt became due. */
  runAt: number;
  /** When its last attempt started (null for a job that never ran, e.g. failed before a claim). */
  startedAt: number | null;
  finishedAt: number;
}

/** The jobs of one queue that finished in `[from, until)`, still stored (retention applies). */
export interface FinishedWindow {
  completed: number;
  dead: number;
  /**
   * Up to `sampleLimit` completed and up to `sampleLimit` dead jobs of the window, the earliest
   * finished first.
   */
  samples: FinishedTiming[];
}

export interface QueueStats {
  queue: string;
  paused: boolean;
  counts: Record<JobState, number>;
  /** Age in ms of the job that has waited longest since it became due, or null when none waits. */
  oldestWaitingAgeMs: number | null;
}

export type CancelResult = "cancelled" | "not-found" | "already-finished";
export type RemoveResult = "removed" | "not-found" | "not-finished";
export type ReplayResult = "replayed" | "not-found" | "not-dead";

/**
 * Called when jobs may be claimable on `queue`, or on any queue when `queue` is "*" (a backend
 * that only learns "something changed", e.g. from a file watch). Wake-ups are hints: polling
 * stays the fallback.
 */
export type WakeListener = (queue: string) => void;

/** The processed-keys store for idempotent consumers. */
export interface IdempotencyStore {
  /**
   * Records `key` for `ttlMs` milliseconds. True the first time (go ahead), false while the key is
   * already recorded (this work was done, or is being done, elsewhere).
   */
  once(key: string, ttlMs: number): Promise<boolean>;
}

export interface Backend extends AsyncDisposable {
  /** A short label for logs and the CLI, e.g. "sqlite:/var/lib/app/jobs.db". */
  readonly description: string;
  readonly capabilities: Capabilities;
  readonly idempotency: IdempotencyStore;

  /** Creates or upgrades the schema. Safe to call many times and from many processes. */
  migrate(): Promise<void>;
  /** Releases connections and watchers. Also runs on `await using backend = …` (AsyncDisposable). */
  close(): Promise<void>;
  /** The store's clock, ms since epoch. */
  now(): Promise<number>;

  /** Inserts jobs atomically as one batch; a spec whose id exists is reported as a duplicate. */
  enqueue(specs: readonly JobSpec[], options?: EnqueueOptions): Promise<EnqueueResult[]>;
  /**
   * Moves up to `limit` runnable jobs (due, queue not paused, name handled) to `active`: lowest
   * priority number first, then earliest run_at, then insertion order, within each queue; across
   * the queues as `capabilities.claimAcrossQueues` says. Each gets attempt + 1 and a new lease
   * token.
   */
  claim(request: ClaimRequest): Promise<ClaimedJob[]>;
  /** Extends every lease still held by `leaseMs` from now; reports the ones that were lost. */
  heartbeat(leases: readonly Lease[], leaseMs: number): Promise<HeartbeatResult>;
  /**
   * Records that these leases are held unstarted in the worker's prefetch buffer (`buffered`
   * true), or that they have since started (false), so a lease expiry while buffered does not
   * count toward the job's quarantine (`RescueOptions.maxStalls`). A claimed job counts as
   * started until told otherwise. Fenced: a lease no longer held is skipped silently. Absent on
   * stores without stall counting (RabbitMQ); the worker then sends nothing.
   */
  markBuffered?(leases: readonly Lease[], buffered: boolean): Promise<void>;
  /** Marks jobs completed with their results (fenced). */
  complete(items: readonly Completion[]): Promise<SettleResult[]>;
  /**
   * `complete(items)` then `claim(request)` as one atomic call, each exactly as the separate call
   * would do it (one result per item in input order; the claimed jobs in claim order). Only
   * where `capabilities.completeAndClaim`; the worker sends it when it has finished jobs to
   * settle and wants more work.
   */
  completeAndClaim?(items: readonly Completion[], request: ClaimRequest): Promise<CompleteAndClaimResult>;
  /** Records failed attempts: to `scheduled` after the delay, or `dead` (fenced). */
  fail(items: readonly Failure[]): Promise<SettleResult[]>;
  /** Returns jobs to `waiting` without using an attempt (shutdown). Fenced. */
  release(leases: readonly Lease[]): Promise<SettleResult[]>;
  /** Stores a progress report for a running job (fenced). */
  progress(lease: Lease, progress: Json): Promise<SettleResult>;
  /**
   * Appends lines to a running job's log, in order, with the store's time and the job's attempt
   * (fenced: a stale lease writes nothing). Applies `boundLogLines` and keeps at most
   * `JOB_LOG_MAX_LINES` per job, dropping the oldest, in the same atomic step.
   */
  appendLogs(lease: Lease, lines: readonly string[]): Promise<SettleResult>;
  /** A job's log, oldest line first; empty when the job has none or does not exist (queue rule of `get`). */
  logs(id: string, queue?: string): Promise<JobLogLine[]>;

  /** Active jobs whose lease expired: the attempt fails with "lease expired". */
  rescueExpired(options?: RescueOptions): Promise<RescuedJob[]>;
  /** Relabels due `scheduled` jobs as `waiting`; returns how many. */
  promoteDue(): Promise<number>;
  /** Deletes finished jobs past their retention or beyond the per-queue counts, and expired keys. */
  prune(policy?: PrunePolicy): Promise<PruneResult>;

  /**
   * One job by id. Ids name one job in the whole store on SQLite and PostgreSQL; on Redis they
   * are unique per queue. With `queue`, only a job of that queue is returned (another queue's job
   * with this id is null). Without it, a backend whose ids are per queue throws
   * `AmbiguousJobIdError` when several queues hold the id, rather than guessing which one is meant.
   * The same rule holds for `cancel`, `replay` and `remove` ("not-found" for another queue's job).
   */
  get(id: string, queue?: string): Promise<JobRecord | null>;
  list(filter?: ListFilter, page?: Page): Promise<JobRecord[]>;
  /** Per-queue statistics; every known queue when `queue` is omitted. */
  stats(queue?: string): Promise<QueueStats[]>;
  /**
   * Counts the jobs of `queue` that completed or died in `[fromMs, untilMs)` (store clock) and
   * returns a bounded sample of their times: one indexed range per state, so the cost does not
   * grow with the rest of the queue. Jobs already pruned (or removed on completion) are not
   * counted. Only with `capabilities.finishedWindows`; otherwise `UnsupportedByStoreError`.
   */
  finishedWindow(queue: string, fromMs: number, untilMs: number, sampleLimit: number): Promise<FinishedWindow>;
  /**
   * Cancels a job. Waiting and scheduled jobs never run; an active job is marked cancelled and its
   * worker learns at its next heartbeat (its result is then refused).
   */
  cancel(id: string, queue?: string): Promise<CancelResult>;
  /** Moves a dead job back to `waiting` with a fresh set of attempts; its history is kept. */
  replay(id: string, queue?: string): Promise<ReplayResult>;
  /**
   * Replays the dead jobs of `queue` (only those named `name`; at most `limit`, default all) in
   * one pass, for a store where finding one dead job by id is a scan (RabbitMQ's dead queue):
   * `dlq replay --all` and the HTTP "replay all" use it where it exists, instead of listing pages
   * and replaying each by id, which is quadratic there. Jobs that die again during the pass are
   * not replayed twice. Answers the ids replayed, in the order they were.
   */
  replayAllDead?(queue: string, options?: { name?: string; limit?: number }): Promise<{ replayed: string[] }>;
  /**
   * Deletes a finished job (completed, dead or cancelled) before its retention runs out, e.g. a
   * dead letter an operator has dealt with. Unfinished jobs are refused: cancel them first.
   */
  remove(id: string, queue?: string): Promise<RemoveResult>;
  pause(queue: string): Promise<void>;
  resume(queue: string): Promise<void>;
  /**
   * Sets a queue's flow limits (already validated by `normalizeQueueLimits`), replacing the
   * previous ones; every claim on every worker obeys them from the next claim on. Limits that
   * limit nothing remove the queue's limits.
   */
  setQueueLimits(queue: string, limits: StoredQueueLimits): Promise<void>;
  /** A queue's limits and hold, or null when it has neither. */
  getQueueFlow(queue: string): Promise<QueueFlow | null>;
  /**
   * Lets no job of the queue start for `forMs` milliseconds from the store's now (a downstream
   * 429: `RetryLater` with `pause: "queue"`). A longer hold already in place is kept. With
   * `keyOfJob`, only the jobs sharing that job's limiter key are held (`pause: "key"`; a job
   * without a limiter key holds nothing; needs `capabilities.jobFlowKeys`).
   */
  holdQueue(queue: string, forMs: number, options?: HoldOptions): Promise<void>;
  /** Registers a wake-up listener; returns the function that removes it. */
  subscribe(listener: WakeListener): () => void;

  /**
   * Creates or replaces a cron schedule (upsert by queue and id), in one store step. A new
   * schedule's anchor is now; an update keeps its last fired tick, bumps its version, and moves
   * the anchor to now only when `timing` changed (so a new pattern starts at its next tick).
   */
  scheduleUpsert(write: ScheduleWrite): Promise<{ created: boolean; schedule: StoredSchedule }>;
  /** Deletes a schedule; false when there was none. Jobs it already enqueued stay. */
  scheduleRemove(queue: string, id: string): Promise<boolean>;
  /** Every schedule (of `queue`, when given), ordered by queue, then id. */
  scheduleList(queue?: string): Promise<StoredSchedule[]>;
  /**
   * Fires a schedule in one atomic step: when its version and `lastTickAt` are still the ones the
   * firing was computed from (compare-and-set) and `tickAt` is later, sets `lastTickAt` to
   * `tickAt` and enqueues `jobs`; otherwise writes nothing and answers `fired: false`.
   */
  scheduleFire(firing: ScheduleFiring): Promise<{ fired: boolean; jobs: EnqueueResult[] }>;

  /**
   * Stores a whole flow atomically: every node, or (when any node's id exists already) none, the
   * results then flagging the duplicates. A node with children starts in `waiting-children`; each
   * child's final settle (completed, dead, cancelled) records its outcome with the parent and
   * releases the parent in the same atomic step. `options.tx` as for `enqueue`.
   */
  enqueueFlow(nodes: readonly FlowNodeSpec[], options?: Pick<EnqueueOptions, "tx">): Promise<EnqueueResult[]>;
  /** A job's parent and children (with their outcomes), or null when there is no such job. */
  flow(id: string, queue?: string): Promise<FlowInfo | null>;

  /**
   * Only with `capabilities.eventLog`: up to `limit` events after `cursor`, oldest first. The
   * cursor is opaque; a malformed one is refused with InvalidInputError.
   */
  readEvents?(cursor: string, limit: number): Promise<EventLogPage>;
  /** Only with `capabilities.eventLog`: a cursor at the end of the log ("from now on"). */
  latestEventCursor?(): Promise<string>;
  /** Only with `capabilities.eventLog`: deletes old events; returns how many. */
  pruneEvents?(policy?: EventPrunePolicy): Promise<number>;

  /** Only with `capabilities.transactionalCompletion`: opens a transaction for a running job. */
  beginCompletion?(lease: Lease): Promise<CompletionTransaction>;
}
