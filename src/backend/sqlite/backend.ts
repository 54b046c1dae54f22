/**
 * The embedded backend: one SQLite file (or `:memory:`) through better-sqlite3.
 *
 * Concurrency model. better-sqlite3 is synchronous, so within one process every call runs to
 * completion before the next starts. Across processes sharing a file, every write is one
 * `BEGIN IMMEDIATE` transaction: it takes SQLite's single write lock before it reads anything,
 * so the rows a claim selects cannot be claimed by another process before it updates them, and
 * no transaction ever has to upgrade a stale read snapshot (which in WAL mode fails with
 * SQLITE_BUSY_SNAPSHOT instead of waiting). Readers never block the writer and vice versa (WAL).
 *
 * Every statement is prepared once: in the constructor, or for list()'s few filter shapes on
 * first use. IN-lists are passed as one JSON array parameter and expanded with `json_each(?)`,
 * so one prepared statement serves any list length.
 *
 * Wake-ups. Within a process, a commit that makes jobs claimable calls the listeners directly.
 * Across processes, such a commit also bumps its queue's `wake` counter; a process with
 * listeners watches the file's directory and, when another connection has committed (PRAGMA
 * data_version), wakes exactly the queues whose counter moved.
 */
import { WakeListeners } from "../listeners.js";
import { serializeError } from "../error-json.js";
import { checkedBackend, PRUNE_DEFAULTS, RESCUE_DEFAULTS } from "../checked.js";

import { readMigrationFiles, SchemaTooNewError } from "../migration-files.js";
import { asStoreError, errorCodes } from "../store-errors.js";
import { SqliteJobLogs } from "./job-logs.js";
import { SqliteEventLog } from "./event-log.js";
import type { EventLogPage, EventPrunePolicy } from "../../core/queue-events.js";
import type { JobLogLine } from "../../core/job-log.js";
import { checkFinishedWindowArgs, checkListArgs, staleCursor } from "../listing.js";
import type { FinishedTiming, FinishedWindow } from "../contract.js";
import { scheduleTransactions, type ScheduleTransactions } from "./schedules.js";
import type { ScheduleFiring, ScheduleWrite, StoredSchedule } from "../../core/schedule.js";
import { planDedupBatch } from "../dedup.js";
import { SqliteDedupWindows } from "./dedup.js";
import { checkFlow, flowRefused } from "../flows.js";
import { SqliteFlows } from "./flows.js";
import { watch, type FSWatcher } from "node:fs";
import { basename, dirname, resolve } from "node:path";
import Database from "better-sqlite3";
import type {
  Backend,
  CancelResult,
  Capabilities,
  ClaimedJob,
  ClaimRequest,
  ClaimThrottle,
  HoldOptions,
  Completion,
  EnqueueOptions,
  EnqueueResult,
  Failure,
  HeartbeatResult,
  IdempotencyStore,
  ListFilter,
  Page,
  PrunePolicy,
  PruneResult,
  QueueStats,
  RemoveResult,
  ReplayResult,
  RescuedJob,
  RescueOptions,
  SettleResult,
  WakeListener,
} from "../contract.js";
import { FULL_STORE_FEATURES } from "../contract.js";
import { allOrNothingOf, inQueue, refusedBatch } from "../contract.js";
import { systemClock, type Clock } from "../../core/clock.js";
import { ConveyorError, InvalidInputError, LeaseExpiredError, quarantineMessage, type LeaseLossReason } from "../../core/errors.js";
import type { Json } from "../../core/json.js";
import { reportThrottle, type ClaimBudget, type QueueFlow, type StoredQueueLimits } from "../../core/flow.js";
import { checkName } from "../../core/spec.js";
import { SqliteFlow } from "./flow.js";
import {
  effectiveState,
  type AttemptRecord,
  type BackoffSpec,
  type ErrorInfo,
  type FlowInfo,
  type FlowNodeSpec,
  type JobRecord,
  type JobSpec,
  type JobState,
  type Lease,
} from "../../core/job.js";

/** Options of {@link SqliteBackend}. */
export interface SqliteBackendOptions {
  /**
   * Path of the database file, created with its schema if missing; or `":memory:"` for a private
   * in-memory store that lives as long as this backend object (one process only; for tests).
   */
  path: string;
  /**
   * Source of "now" (ms since the epoch) for leases, run_at, created_at and retention.
   * Default: the system clock. Inject a `FakeClock` to test time-dependent behaviour.
   */
  clock?: Clock;
  /**
   * How long a write waits for another connection's write lock before failing with
   * SQLITE_BUSY, in milliseconds. Default 5000.
   */
  busyTimeoutMs?: number;
  /**
   * SQLite's `synchronous` setting, i.e. when commits are flushed to disk. Default `"NORMAL"`.
   * - `"NORMAL"`: a committed job survives any crash of the process, SIGKILL included; after a
   *   power loss or OS crash the last few commits may be rolled back (the database stays intact).
   * - `"FULL"`: every commit is fsynced, so it also survives power loss; writes are slower.
   */
  synchronous?: "NORMAL" | "FULL";
  /**
   * Prefix of every table and index name, so Conveyor can share a database file with your
   * application's tables. Letters, digits and `_`, not starting with a digit. Default `"conveyor_"`.
   */
  tablePrefix?: string;
  /**
   * Watch the database file so subscribers hear about jobs written by other processes within
   * milliseconds instead of at their next poll. Wake-ups within this process work either way.
   * Ignored for `:memory:`. Default `true`.
   */
  wakeups?: boolean;
}

const DEFAULT_BUSY_TIMEOUT_MS = 5_000;
const DEFAULT_TABLE_PREFIX = "conveyor_";
const PREFIX_PATTERN = /^(?:[A-Za-z_][A-Za-z0-9_]*)?$/;

/**
 * After the WAL file changes, when to look (ms after the change) whether another connection
 * committed. A writer appends its frames, then publishes the commit in the shared-memory index,
 * which raises no file event; the later looks catch a writer that was descheduled in between.
 */
const WAKE_CHECK_DELAYS_MS = [1, 15, 100] as const;

/** The error of an attempt whose lease expired, as stored (JSON text). */
const LEASE_EXPIRED_TEXT = serializeError({ name: "LeaseExpiredError", message: new LeaseExpiredError().message, stack: null });

/** One row of the jobs table, as better-sqlite3 returns it. */
interface JobRow {
  seq: number;
  id: string;
  queue: string;
  name: string;
  payload: string;
  meta: string | null;
  state: JobState;
  priority: number;
  run_at: number;
  created_at: number;
  attempt: number;
  max_attempts: number;
  backoff: string;
  timeout_ms: number | null;
  retain_completed_ms: number | null;
  retain_dead_ms: number | null;
  lease_token: number;
  lease_expires_at: number | null;
  worker_id: string | null;
  worker_host: string | null;
  worker_pid: number | null;
  started_at: number | null;
  finished_at: number | null;
  expires_at: number | null;
  stalls: number;
  replays: number;
  progress: string | null;
  result: string | null;
  error: string | null;
  history: string;
  parent_id: string | null;
  parent_queue: string | null;
}

/** The columns of the claim order. */
type ClaimKey = Pick<JobRow, "seq" | "priority" | "run_at">;

type ExpiredRow = Pick<JobRow, "seq" | "id" | "queue" | "name" | "attempt" | "max_attempts" | "stalls" | "worker_id" | "retain_dead_ms"> & {
  /** 1 when this lease's expiry must not count as a stall (the stall_blame migration). */ excused: number;
};

type CancelRow = Pick<JobRow, "state" | "retain_completed_ms">;

interface FenceParams {
  id: string;
  token: number;
  now: number;
}

interface Migration {
  version: number;
  file: string;
  sql: string;
}

/** Queue name -> its wake counter after a commit (see the queues table). */
type WakeMarks = Map<string, number>;

/** A list filter's state, as the query sees it ("waiting" and "scheduled" depend on run_at). */
type StateFilter = "none" | "due" | "future" | "stored";

/**
 * Conveyor's embedded backend. Usable as soon as it is constructed: the constructor opens the
 * file and creates or upgrades the schema synchronously.
 *
 * ```ts
 * const backend = new SqliteBackend({ path: "jobs.db" });
 * ```
 */
/** finishedWindow's statements for one state. */
interface FinishedStatements {
  count: Database.Statement<[string, number, number], { n: number }>;
  sample: Database.Statement<[string, number, number, number], { run_at: number; started_at: number | null; finished_at: number }>;
}

export class SqliteBackend implements Backend {
  readonly description: string;
  readonly capabilities: Capabilities;
  readonly idempotency: IdempotencyStore;

  private readonly db: Database.Database;
  private readonly clock: Clock;
  private readonly prefix: string;
  private readonly memory: boolean;
  /** Absolute path of the database file, fixed at construction (a later chdir must not move it). */
  private readonly file: string;
  private readonly watchWal: boolean;
  private readonly listeners = new WakeListeners({ start: () => this.startWatcher(), stop: () => this.stopWatcher() });
  private watcher: FSWatcher | null = null;
  private wakeCheckTimer: NodeJS.Timeout | null = null;
  private wakeCheckDueAt = 0;
  /** `PRAGMA data_version` when the watcher last looked. */
  private seenDataVersion = 0;
  /** Each queue's wake counter as last seen, so only queues whose counter moved are woken. */
  private seenWakeMarks: WakeMarks = new Map();
  private closed = false;

  private readonly s: ReturnType<SqliteBackend["prepareStatements"]>;
  private readonly dedup: SqliteDedupWindows;
  private readonly flows: SqliteFlows;
  private readonly storeFlow: (nodes: readonly FlowNodeSpec[], childCount: readonly number[]) => { results: EnqueueResult[]; marks: WakeMarks };
  private readonly tx: ReturnType<SqliteBackend["defineTransactions"]>;
  private readonly listStatements = new Map<string, Database.Statement<unknown[], JobRow>>();
  /** finishedWindow's statements, prepared on its first call. */
  private finishedStatements: Record<"completed" | "dead", FinishedStatements> | undefined;
  private readonly schedules: ScheduleTransactions<WakeMarks>;

  constructor(options: SqliteBackendOptions) {
    if (typeof options?.path !== "string" || options.path === "") {
      throw new InvalidInputError(`SqliteBackend needs { path }: a database file path or ":memory:"`);
    }
    const prefix = options.tablePrefix ?? DEFAULT_TABLE_PREFIX;
    if (!PREFIX_PATTERN.test(prefix)) {
      throw new InvalidInputError(`tablePrefix must be letters, digits and _ and not start with a digit; got ${JSON.stringify(prefix)}`);
    }
    const busyTimeoutMs = options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS;
    if (!Number.isInteger(busyTimeoutMs) || busyTimeoutMs < 0) {
      throw new InvalidInputError(`busyTimeoutMs must be an integer >= 0; got ${JSON.stringify(busyTimeoutMs)}`);
    }
    const synchronous = options.synchronous ?? "NORMAL";
    if (synchronous !== "NORMAL" && synchronous !== "FULL") {
      throw new InvalidInputError(`synchronous must be "NORMAL" or "FULL"; got ${JSON.stringify(synchronous)}`);
    }

    this.prefix = prefix;
    this.clock = options.clock ?? systemClock;
    this.memory = options.path === ":memory:";
    this.file = this.memory ? options.path : resolve(options.path);
    this.watchWal = !this.memory && (options.wakeups ?? true);
    this.description = `sqlite:${options.path}`;
    this.capabilities = Object.freeze({
      ...FULL_STORE_FEATURES,
      transactionalEnqueue: false,
      crossProcessWakeups: this.watchWal,
      multiProcess: !this.memory,
      // A completion transaction would hold SQLite's one write lock for the handler's whole run,
      // stalling every other claim and settle on the file.
      transactionalCompletion: false,
      claimAcrossQueues: "merged",
      flows: "across-queues",
      eventLog: true,
      jobFlowKeys: true,
    });
    this.idempotency = { once: (key, ttlMs) => this.once(key, ttlMs) };

    this.db = new Database(this.file, { timeout: busyTimeoutMs });
    try {
      // busy_timeout is set by the constructor option above, before anything below may wait on
      // another process's lock (switching to WAL needs one).
      if (!this.memory) {
        const mode = this.db.pragma("journal_mode = WAL", { simple: true });
        if (mode !== "wal") {
          throw new ConveyorError(
            `could not switch ${options.path} to WAL journal mode (SQLite answered ${String(mode)}); ` +
              `Conveyor needs WAL, which needs a local file system with shared memory (not NFS/SMB)`,
          );
        }
      }
      this.db.pragma(`synchronous = ${synchronous}`);
      // SQLite reuses the WAL file without shrinking it: after one large bulk enqueue it would
      // keep its peak size for as long as any connection stays open. Truncate it past 64 MiB.
      this.db.pragma(`journal_size_limit = ${64 * 1024 * 1024}`);
      // Cancelling a flow's parent cascades to grandchildren through the same trigger (0003).
      this.db.pragma("recursive_triggers = ON");
      this.migrateSync();
      this.s = this.prepareStatements();
      this.dedup = new SqliteDedupWindows(this.db, prefix);
      this.flows = new SqliteFlows(this.db, prefix);
      this.tx = this.typedErrors(this.defineTransactions());
      this.schedules = scheduleTransactions(
        this.db,
        prefix,
        () => this.nowMs(),
        (specs) => this.tx.enqueue(specs, false),
      );
      this.storeFlow = this.defineFlowTransaction();
    } catch (error) {
      this.db.close();
      throw error;
    }
    // Callers get the store behind the checking facade (../checked.ts): arguments checked once, for every store.
    return checkedBackend(this);
  }

  // ── lifecycle ────────────────────────────────────────────────────────────────────────────

  async migrate(): Promise<void> {
    this.migrateSync();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.listeners.clear();
    this.stopWatcher();
    this.db.close();
  }

  /** `await using backend = new …Backend(…)`: `close()` when the scope ends. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  async now(): Promise<number> {
    return this.nowMs();
  }

  // ── producing and claiming ───────────────────────────────────────────────────────────────

  async enqueue(specs: readonly JobSpec[], options?: EnqueueOptions): Promise<EnqueueResult[]> {
    if (options?.tx !== undefined) {
      throw new InvalidInputError(
        "the SQLite backend cannot join your transaction (capabilities.transactionalEnqueue is false); " +
          "enqueue without { tx }, or use a backend that supports transactional enqueue",
      );
    }
    if (specs.length === 0) return [];
    const allOrNothing = allOrNothingOf(specs, options);
    const plan = planDedupBatch(specs, options);
    try {
      const { results, marks } = this.tx.enqueue.immediate(plan.specs, allOrNothing);
      this.announce(marks);
      return plan.answers(results);
    } catch (error) {
      if (error instanceof RefusedBatch) return error.results;
      throw error;
    }
  }

  async enqueueFlow(nodes: readonly FlowNodeSpec[], options?: Pick<EnqueueOptions, "tx">): Promise<EnqueueResult[]> {
    if (options?.tx !== undefined) return this.enqueue([], options);
    const childCount = checkFlow(nodes, true);
    try {
      const { results, marks } = this.storeFlow(nodes, childCount);
      this.announce(marks);
      return results;
    } catch (error) {
      if (error instanceof RefusedBatch) return error.results;
      throw error;
    }
  }

  async flow(id: string, queue?: string): Promise<FlowInfo | null> {
    return this.flows.flow(id, queue, this.nowMs());
  }

  /** The flow's jobs through the enqueue transaction (a savepoint inside this one), then their links. */
  private defineFlowTransaction() {
    const store = this.db.transaction((nodes: readonly FlowNodeSpec[], childCount: readonly number[]) => {
      const stored = this.tx.enqueue(
        nodes.map((n) => n.spec),
        false,
      );
      // Thrown to roll the transaction back: a flow is stored whole or not at all.
      if (flowRefused(stored.results)) throw new RefusedBatch(stored.results);
      this.flows.link(nodes, childCount);
      return stored;
    });
    const guarded = this.typedErrors({ store }).store;
    return (nodes: readonly FlowNodeSpec[], childCount: readonly number[]) => guarded.immediate(nodes, childCount);
  }

  async claim(request: ClaimRequest): Promise<ClaimedJob[]> {
    const { limit } = request;
    if (request.queues.length === 0 || request.names.length === 0) return [];
    const { rows, now, throttles } = this.tx.claim.immediate(request, limit, request.leaseMs);
    for (const t of throttles) reportThrottle(request.onThrottle, t.queue, t.retryInMs);
    return rows.map((row) => ({
      job: this.toRecord(row, now),
      lease: { jobId: row.id, token: row.lease_token },
      leaseExpiresAt: row.lease_expires_at!,
    }));
  }

  // ── settling (fenced by lease token) ─────────────────────────────────────────────────────

  async heartbeat(leases: readonly Lease[], leaseMs: number): Promise<HeartbeatResult> {
    if (leases.length === 0) return { lost: [] };
    return { lost: this.tx.heartbeat.immediate(leases, leaseMs) };
  }

  async markBuffered(leases: readonly Lease[], buffered: boolean): Promise<void> {
    if (leases.length === 0) return;
    this.tx.markBuffered.immediate(leases, buffered);
  }

  async complete(items: readonly Completion[]): Promise<SettleResult[]> {
    if (items.length === 0) return [];
    // Serialised before the transaction: a result JSON cannot hold fails the call before anything is written.
    const results = items.map((item) => jsonText(item.result));
    return this.tx.complete.immediate(items, results);
  }

  async fail(items: readonly Failure[]): Promise<SettleResult[]> {
    if (items.length === 0) return [];
    const errors = items.map((item) => serializeError(item.error));
    const { results, marks } = this.tx.fail.immediate(items, errors);
    this.announce(marks);
    return results;
  }

  async release(leases: readonly Lease[]): Promise<SettleResult[]> {
    if (leases.length === 0) return [];
    const { results, marks } = this.tx.release.immediate(leases);
    this.announce(marks);
    return results;
  }

  async progress(lease: Lease, progress: Json): Promise<SettleResult> {
    return this.tx.progress.immediate(lease, jsonText(progress));
  }

  // ── maintenance ──────────────────────────────────────────────────────────────────────────

  async rescueExpired(options: RescueOptions = {}): Promise<RescuedJob[]> {
    // Checked by the facade (../checked.ts); defaults from its one table when called bare.
    const { maxStalls, limit } = { ...RESCUE_DEFAULTS, ...options };
    const { rescued, marks } = this.tx.rescue.immediate(maxStalls, limit);
    this.announce(marks);
    return rescued;
  }

  async promoteDue(): Promise<number> {
    return this.tx.promote.immediate();
  }

  async prune(given: PrunePolicy = {}): Promise<PruneResult> {
    const policy = { ...PRUNE_DEFAULTS, ...given };
    return this.tx.prune.immediate(policy.maxCompletedPerQueue, policy.maxDeadPerQueue, policy.limit);
  }

  async appendLogs(lease: Lease, lines: readonly string[]): Promise<SettleResult> {
    return this.jobLogs().appendLogs(lease, lines);
  }

  async logs(id: string, queue?: string): Promise<JobLogLine[]> {
    return this.jobLogs().logs(id, queue);
  }

  async readEvents(cursor: string, limit: number): Promise<EventLogPage> {
    return this.eventLog().readEvents(cursor, limit);
  }

  async latestEventCursor(): Promise<string> {
    return this.eventLog().latestEventCursor();
  }

  async pruneEvents(policy?: EventPrunePolicy): Promise<number> {
    return this.eventLog().pruneEvents(policy);
  }

  private eventLogStore: SqliteEventLog | null = null;

  private eventLog(): SqliteEventLog {
    this.eventLogStore ??= new SqliteEventLog(
      this.db,
      this.prefix,
      () => this.nowMs(),
      (error) => asStoreError(error, this.description, isSqliteBusy),
    );
    return this.eventLogStore;
  }

  private jobLogStore: SqliteJobLogs | null = null;

  /** Prepared on first use, so a backend that never logs prepares nothing for it. */
  private jobLogs(): SqliteJobLogs {
    this.jobLogStore ??= new SqliteJobLogs(
      this.db,
      this.prefix,
      () => this.nowMs(),
      (error) => asStoreError(error, this.description, isSqliteBusy),
    );
    return this.jobLogStore;
  }

  // ── inspection ───────────────────────────────────────────────────────────────────────────

  async get(id: string, queue?: string): Promise<JobRecord | null> {
    const row = this.s.getJob.get(id);
    return row === undefined || !inQueue(row.queue, queue) ? null : this.toRecord(row, this.nowMs());
  }

  async list(filter: ListFilter = {}, page: Page = {}): Promise<JobRecord[]> {
    const args = checkListArgs(filter, page);
    const stateFilter: StateFilter =
      filter.state === undefined ? "none" : filter.state === "waiting" ? "due" : filter.state === "scheduled" ? "future" : "stored";
    let beforeSeq: number | null = null;
    if (args.after !== null) {
      const cursor = this.s.getJob.get(args.after);
      if (cursor === undefined || cursor.queue !== filter.queue) throw staleCursor(args.after, filter.queue!);
      beforeSeq = cursor.seq;
    }
    // The reverse cursor: the jobs just above it, read upwards from it and turned back to newest first.
    let afterSeq: number | null = null;
    if (args.before !== null) {
      const cursor = this.s.getJob.get(args.before);
      if (cursor === undefined || cursor.queue !== filter.queue) throw staleCursor(args.before, filter.queue!, "before");
      afterSeq = cursor.seq;
    }
    const now = this.nowMs();
    const params: unknown[] = [];
    if (filter.queue !== undefined) params.push(filter.queue);
    if (filter.name !== undefined) params.push(filter.name);
    if (stateFilter === "due" || stateFilter === "future") params.push(now);
    if (stateFilter === "stored") params.push(filter.state);
    if (beforeSeq !== null) params.push(beforeSeq);
    if (afterSeq !== null) params.push(afterSeq);
    if (args.createdFrom !== null) params.push(args.createdFrom);
    if (args.createdUntil !== null) params.push(args.createdUntil);
    params.push(args.limit, args.offset);
    const statement = this.listStatement({
      byQueue: filter.queue !== undefined,
      byName: filter.name !== undefined,
      state: stateFilter,
      byCursor: beforeSeq !== null,
      from: args.createdFrom !== null,
      until: args.createdUntil !== null,
      ...(afterSeq !== null ? { newer: true } : {}),
    });
    const rows = statement.all(...params);
    if (afterSeq !== null) rows.reverse();
    return rows.map((row) => this.toRecord(row, now));
  }

  async stats(queue?: string): Promise<QueueStats[]> {
    return this.tx.stats.deferred(queue);
  }

  async finishedWindow(queue: string, fromMs: number, untilMs: number, sampleLimit: number): Promise<FinishedWindow> {
    const args = checkFinishedWindowArgs(queue, fromMs, untilMs, sampleLimit);
    const jobs = `${this.prefix}jobs`;
    // One range of jobs_finished (queue, state, finished_at) each, the count from the index alone.
    // SQLite uses a partial index only when the query repeats its WHERE term word for word.
    const partial = `state IN ('completed', 'cancelled', 'dead')`;
    const prepare = (state: "completed" | "dead") => ({
      count: this.db.prepare<[string, number, number], { n: number }>(
        `SELECT count(*) AS n FROM ${jobs} WHERE queue = ? AND ${partial} AND state = '${state}' AND finished_at >= ? AND finished_at < ?`,
      ),
      sample: this.db.prepare<[string, number, number, number], { run_at: number; started_at: number | null; finished_at: number }>(
        `SELECT run_at, started_at, finished_at FROM ${jobs}
         WHERE queue = ? AND ${partial} AND state = '${state}' AND finished_at >= ? AND finished_at < ? ORDER BY finished_at LIMIT ?`,
      ),
    });
    this.finishedStatements ??= { completed: prepare("completed"), dead: prepare("dead") };
    const statements = this.finishedStatements;
    const read = this.db.transaction(() => {
      const out: FinishedWindow = { completed: 0, dead: 0, samples: [] };
      for (const state of ["completed", "dead"] as const) {
        const range = [args.queue, args.fromMs, args.untilMs] as const;
        out[state] = statements[state].count.get(...range)?.n ?? 0;
        if (args.sampleLimit === 0 || out[state] === 0) continue;
        for (const r of statements[state].sample.all(...range, args.sampleLimit)) {
          out.samples.push({ state, runAt: r.run_at, startedAt: r.started_at, finishedAt: r.finished_at } satisfies FinishedTiming);
        }
      }
      return out;
    });
    return read.deferred();
  }

  // ── administration ───────────────────────────────────────────────────────────────────────

  async cancel(id: string, queue?: string): Promise<CancelResult> {
    return this.tx.cancel.immediate(id, queue);
  }

  async replay(id: string, queue?: string): Promise<ReplayResult> {
    const { result, marks } = this.tx.replay.immediate(id, queue);
    this.announce(marks);
    return result;
  }

  async remove(id: string, queue?: string): Promise<RemoveResult> {
    return this.tx.remove.immediate(id, queue);
  }

  async pause(queue: string): Promise<void> {
    this.tx.pause.immediate(queue);
  }

  async resume(queue: string): Promise<void> {
    this.announce(this.tx.resume.immediate(queue));
  }

  // ── flow control (src/core/flow.ts, ./flow.ts) ───────────────────────────────────────────

  async setQueueLimits(queue: string, limits: StoredQueueLimits): Promise<void> {
    // Wakes the queue: claims that found nothing under the old limits may under the new ones.
    this.announce(this.tx.setLimits.immediate(checkName("queue", queue), limits));
  }

  async getQueueFlow(queue: string): Promise<QueueFlow | null> {
    return this.tx.getFlow.deferred(queue);
  }

  async holdQueue(queue: string, forMs: number, options: HoldOptions = {}): Promise<void> {
    this.tx.hold.immediate(queue, forMs, options.keyOfJob);
  }

  // ── schedules (rules in src/core/schedule.ts) ────────────────────────────────────────────

  async scheduleUpsert(write: ScheduleWrite): Promise<{ created: boolean; schedule: StoredSchedule }> {
    return this.storeCall(() => this.schedules.upsert.immediate(write));
  }

  async scheduleRemove(queue: string, id: string): Promise<boolean> {
    return this.storeCall(() => this.schedules.remove(queue, id));
  }

  async scheduleList(queue?: string): Promise<StoredSchedule[]> {
    return this.storeCall(() => this.schedules.list(queue));
  }

  async scheduleFire(firing: ScheduleFiring): Promise<{ fired: boolean; jobs: EnqueueResult[] }> {
    // The clock is read by the enqueue inside the transaction, once it holds the write lock.
    const { fired, jobs, marks } = this.storeCall(() => this.schedules.fire.immediate(firing));
    if (marks !== null) this.announce(marks);
    return { fired, jobs };
  }

  /** Runs a statement outside `tx`, with the same typed error for a database that stayed locked. */
  private storeCall<T>(call: () => T): T {
    try {
      return call();
    } catch (error) {
      throw asStoreError(error, this.description, isSqliteBusy);
    }
  }

  private async once(key: string, ttlMs: number): Promise<boolean> {
    return this.tx.once.immediate(key, ttlMs);
  }

  // ── wake-ups ─────────────────────────────────────────────────────────────────────────────

  subscribe(listener: WakeListener): () => void {
    return this.listeners.add(listener);
  }

  /**
   * After a commit that bumped wake counters: wakes this process's listeners directly, and
   * records the counters as seen so the watcher does not report this process's own commit again.
   */
  private announce(marks: WakeMarks): void {
    for (const [queue, mark] of marks) {
      if (this.watcher !== null && mark > (this.seenWakeMarks.get(queue) ?? 0)) this.seenWakeMarks.set(queue, mark);
      this.wake(queue);
    }
  }

  /** Calls every listener; a throwing listener must not break the caller or the others. */
  private wake(queue: string): void {
    this.listeners.wake(queue);
  }

  /**
   * Watches the database's directory, not its `-wal` file: SQLite deletes and recreates the WAL
   * (last connection closing, checkpoints with truncate), which would silently orphan a watch
   * on the file itself.
   */
  private startWatcher(): void {
    if (!this.watchWal || this.watcher !== null || this.closed) return;
    const walName = `${basename(this.file)}-wal`;
    try {
      this.seenDataVersion = this.s.dataVersion.get()!;
      this.seenWakeMarks = new Map(this.s.wakeCounters.all().map((row) => [row.name, row.wake]));
      const watcher = watch(dirname(this.file), { persistent: false }, (_event, filename) => {
        if (filename === null || filename === walName) this.scheduleWakeCheck(0);
      });
      watcher.on("error", () => this.stopWatcher());
      watcher.unref();
      this.watcher = watcher;
    } catch {
      // No watch (inotify limits, exotic file systems): workers still find jobs by polling.
      this.watcher = null;
    }
  }

  private stopWatcher(): void {
    if (this.wakeCheckTimer !== null) clearTimeout(this.wakeCheckTimer);
    this.wakeCheckTimer = null;
    const watcher = this.watcher;
    this.watcher = null;
    watcher?.close();
  }

  /**
   * Every WAL write raises file events, this process's own included, several per commit, and
   * most are claims, settles and heartbeats that wake nobody. `PRAGMA data_version` changes only
   * when ANOTHER connection committed; only then are the queues' wake counters read, and only
   * the queues whose counter moved are woken. Each burst of events is followed by the whole
   * ladder of looks, because the commit that raised the last event may become visible after an
   * earlier look already found (another) commit.
   */
  private scheduleWakeCheck(step: number): void {
    const delay = WAKE_CHECK_DELAYS_MS[step];
    if (delay === undefined || this.watcher === null) return;
    const dueAt = Date.now() + delay;
    if (this.wakeCheckTimer !== null) {
      // A look is already coming; only pull it forward, so a steady stream of events cannot
      // postpone it forever.
      if (this.wakeCheckDueAt <= dueAt) return;
      clearTimeout(this.wakeCheckTimer);
    }
    this.wakeCheckDueAt = dueAt;
    this.wakeCheckTimer = setTimeout(() => {
      this.wakeCheckTimer = null;
      const moved = this.movedQueues();
      this.scheduleWakeCheck(step + 1);
      for (const queue of moved) this.wake(queue);
    }, delay);
    this.wakeCheckTimer.unref();
  }

  /** Queues whose wake counter moved since the last look, if another connection committed. */
  private movedQueues(): string[] {
    const moved: string[] = [];
    try {
      const version = this.s.dataVersion.get()!;
      if (version === this.seenDataVersion) return moved;
      this.seenDataVersion = version;
      for (const { name, wake } of this.s.wakeCounters.all()) {
        if (wake !== this.seenWakeMarks.get(name)) {
          this.seenWakeMarks.set(name, wake);
          moved.push(name);
        }
      }
    } catch {
      // Closed meanwhile: nothing to wake. Polling covers whatever a look misses.
    }
    return moved;
  }

  // ── schema ───────────────────────────────────────────────────────────────────────────────

  /**
   * Applies every migration the database lacks, each in its own IMMEDIATE transaction together
   * with its row in the migrations table, so concurrent starters apply each one exactly once.
   */
  private migrateSync(): void {
    const migrations = loadMigrations(this.prefix);
    const latest = migrations.at(-1)?.version ?? 0;
    const table = `${this.prefix}migrations`;
    const tooNew = (version: number) => new SchemaTooNewError(this.description, version, latest);

    // Common case, without taking the write lock: the schema is current.
    const exists = this.db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?").get(table);
    if (exists !== undefined) {
      const current = this.db.prepare(`SELECT coalesce(max(version), 0) FROM ${table}`).pluck().get() as number;
      if (current > latest) throw tooNew(current);
      if (current === latest) return;
    }

    const applyNext = this.db.transaction((): boolean => {
      this.db.exec(`CREATE TABLE IF NOT EXISTS ${table} (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`);
      const current = this.db.prepare(`SELECT coalesce(max(version), 0) FROM ${table}`).pluck().get() as number;
      if (current > latest) throw tooNew(current);
      const next = migrations.find((m) => m.version === current + 1);
      if (next === undefined) return false;
      try {
        this.db.exec(next.sql);
      } catch (error) {
        throw new ConveyorError(`migration ${next.file} failed: ${(error as Error).message}`, { cause: error });
      }
      this.db.prepare(`INSERT INTO ${table} (version, applied_at) VALUES (?, ?)`).run(next.version, this.nowMs());
      return true;
    });
    while (applyNext.immediate());
  }

  // ── statements ───────────────────────────────────────────────────────────────────────────

  private prepareStatements() {
    const db = this.db;
    const jobs = `${this.prefix}jobs`;
    const queues = `${this.prefix}queues`;
    const keys = `${this.prefix}idempotency`;

    /**
     * Appends the attempt that is ending to `history`; SET expressions see the row as it was, so
     * `attempt` and the worker columns are the ending attempt's. better-sqlite3 binds every JS
     * number as REAL, which JSON would render as "1893456000000.0": hence the CAST.
     */
    const appendHistory = (outcome: AttemptRecord["outcome"], error: "NULL" | "json(@error)" | "json(@attemptError)") =>
      `history = json_insert(history, '$[#]', json_object(
         'attempt', attempt, 'workerId', worker_id, 'host', worker_host, 'pid', worker_pid,
         'startedAt', started_at, 'finishedAt', CAST(@now AS INTEGER), 'outcome', '${outcome}', 'error', ${error}))`;
    const fenced = "id = @id AND lease_token = @token AND state = 'active'";

    return {
      dataVersion: db.prepare<[], number>("PRAGMA data_version").pluck(),

      insertJob: db.prepare<
        [string, string, string, string, string | null, JobState, number, number, number, number, string, number | null, number | null, number | null]
      >(
        `INSERT INTO ${jobs} (id, queue, name, payload, meta, state, priority, run_at, created_at, max_attempts,
                              backoff, timeout_ms, retain_completed_ms, retain_dead_ms)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (id) DO NOTHING`,
      ),
      upsertQueue: db.prepare<[string]>(`INSERT OR IGNORE INTO ${queues} (name) VALUES (?)`),
      signalQueue: db
        .prepare<[string], number>(
          `INSERT INTO ${queues} (name, wake) VALUES (?, 1) ON CONFLICT (name) DO UPDATE SET wake = wake + 1
         RETURNING wake`,
        )
        .pluck(),
      wakeCounters: db.prepare<[], { name: string; wake: number }>(`SELECT name, wake FROM ${queues}`),
      setPaused: db.prepare<[string, number]>(`INSERT INTO ${queues} (name, paused) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET paused = excluded.paused`),
      pausedAmong: db.prepare<[string], string>(`SELECT name FROM ${queues} WHERE paused = 1 AND name IN (SELECT value FROM json_each(?))`).pluck(),

      /*
       * The runnable head of one queue, in claim order. Plan (SQLite 3.53):
       *   SEARCH conveyor_jobs USING INDEX conveyor_jobs_claim (queue=?)
       *   LIST SUBQUERY 1
       *   SCAN json_each VIRTUAL TABLE INDEX 1:
       *   CREATE BLOOM FILTER
       * No sort: the index range is already in (priority, run_at, seq) order, so the scan stops
       * after `limit` matches. Queues are read one at a time and merged in JS because a single
       * query over several queues would have to sort every due job of all of them.
       */
      claimCandidates: db.prepare<[string, number, string, number], ClaimKey>(
        `SELECT seq, priority, run_at FROM ${jobs}
         WHERE queue = ? AND state IN ('waiting', 'scheduled') AND run_at <= ?
           AND name IN (SELECT value FROM json_each(?))
         ORDER BY priority, run_at, seq
         LIMIT ?`,
      ),
      claimJobs: db.prepare<[number, string, string, number, number, string], JobRow>(
        `UPDATE ${jobs}
         SET state = 'active', attempt = attempt + 1, lease_token = lease_token + 1, lease_expires_at = ?,
             worker_id = ?, worker_host = ?, worker_pid = ?, started_at = ?
         WHERE seq IN (SELECT value FROM json_each(?)) AND state IN ('waiting', 'scheduled')
         RETURNING *`,
      ),

      extendLease: db.prepare<[number, string, number]>(`UPDATE ${jobs} SET lease_expires_at = ? WHERE id = ? AND lease_token = ? AND state = 'active'`),
      leaseState: db.prepare<[string], Pick<JobRow, "state" | "lease_token">>(`SELECT state, lease_token FROM ${jobs} WHERE id = ?`),

      deleteCompletedUnretained: db.prepare<[FenceParams]>(`DELETE FROM ${jobs} WHERE ${fenced} AND retain_completed_ms = 0`),
      // The event triggers (migration 0004) fire on insert and update only: a job deleted as it
      // finishes gets its "completed" / "dead" event here, written (with the details the trigger
      // would give) while its row still exists, in the transaction that deletes it.
      logCompletedUnretained: db.prepare<[FenceParams & { result: string }]>(
        `INSERT INTO ${this.prefix}events (at, type, queue, name, job_id, attempt, data)
         SELECT @now, 'completed', queue, name, id, attempt, json_object('result', json(@result)) FROM ${jobs}
         WHERE ${fenced} AND retain_completed_ms = 0`,
      ),
      logDeadUnretained: db.prepare<[FenceParams & { error: string }]>(
        `INSERT INTO ${this.prefix}events (at, type, queue, name, job_id, attempt, data)
         SELECT @now, 'dead', queue, name, id, attempt, json_object('error', json(@error)) FROM ${jobs}
         WHERE ${fenced} AND retain_dead_ms = 0`,
      ),
      // `@now + retain_completed_ms` stays NULL for a job kept forever (NULL + x is NULL). `error`
      // is cleared: it means the last attempt's error, and the last attempt succeeded.
      completeJob: db.prepare<[FenceParams & { result: string }]>(
        `UPDATE ${jobs}
         SET state = 'completed', result = @result, error = NULL, finished_at = @now, lease_expires_at = NULL,
             stalls = 0, expires_at = @now + retain_completed_ms, ${appendHistory("completed", "NULL")}
         WHERE ${fenced}`,
      ),
      retryJob: db
        .prepare<[FenceParams & { runAt: number; error: string }], string>(
          `UPDATE ${jobs}
         SET state = 'scheduled', run_at = @runAt, error = @error, lease_expires_at = NULL, stalls = 0,
             ${appendHistory("failed", "json(@error)")}
         WHERE ${fenced}
         RETURNING queue`,
        )
        .pluck(),
      deleteDeadUnretained: db.prepare<[FenceParams]>(`DELETE FROM ${jobs} WHERE ${fenced} AND retain_dead_ms = 0`),
      buryJob: db.prepare<[FenceParams & { error: string }]>(
        `UPDATE ${jobs}
         SET state = 'dead', error = @error, finished_at = @now, lease_expires_at = NULL, stalls = 0,
             expires_at = @now + retain_dead_ms, ${appendHistory("dead", "json(@error)")}
         WHERE ${fenced}`,
      ),
      releaseJob: db
        .prepare<[FenceParams], string>(
          `UPDATE ${jobs}
         SET state = 'waiting', attempt = attempt - 1, lease_expires_at = NULL, stalls = 0,
             ${appendHistory("released", "NULL")}
         WHERE ${fenced}
         RETURNING queue`,
        )
        .pluck(),
      setProgress: db.prepare<[string, string, number]>(`UPDATE ${jobs} SET progress = ? WHERE id = ? AND lease_token = ? AND state = 'active'`),

      /* Plan: SEARCH conveyor_jobs USING INDEX conveyor_jobs_lease (lease_expires_at<?) */
      expiredLeases: db.prepare<[number, number], ExpiredRow>(
        `SELECT seq, id, queue, name, attempt, max_attempts, stalls, worker_id, retain_dead_ms,
                excused_token IS lease_token AS excused FROM ${jobs}
         WHERE state = 'active' AND lease_expires_at <= ?
         ORDER BY lease_expires_at
         LIMIT ?`,
      ),
      /**
       * Workers running more than one job (buffered ones left out): their expiries say nothing
       * about which job killed them (see RescueOptions.maxStalls).
       */
      busyWorkers: db
        .prepare<[], string>(
          `SELECT worker_id FROM ${jobs} WHERE state = 'active' AND excused_token IS NOT lease_token
         GROUP BY worker_id HAVING count(*) > 1`,
        )
        .pluck(),
      /** A busy worker's expiry excuses every job it holds, also those rescued later (the stall_blame migration). */
      excuseWorkerJobs: db.prepare<[string]>(`UPDATE ${jobs} SET excused_token = lease_token WHERE state = 'active' AND worker_id = ?`),
      markBuffered: db.prepare<[number, string, number]>(
        `UPDATE ${jobs} SET excused_token = CASE WHEN ? THEN lease_token END
         WHERE id = ? AND lease_token = ? AND state = 'active'`,
      ),
      rescueToWaiting: db.prepare<[{ seq: number; now: number; error: string; stall: number }]>(
        `UPDATE ${jobs}
         SET state = 'waiting', run_at = @now, error = @error, lease_expires_at = NULL, stalls = stalls + @stall,
             ${appendHistory("lease-expired", "json(@error)")}
         WHERE seq = @seq`,
      ),
      rescueToDead: db.prepare<[{ seq: number; now: number; error: string; attemptError: string; stall: number }]>(
        `UPDATE ${jobs}
         SET state = 'dead', error = @error, finished_at = @now, lease_expires_at = NULL, stalls = stalls + @stall,
             expires_at = @now + retain_dead_ms, ${appendHistory("lease-expired", "json(@attemptError)")}
         WHERE seq = @seq`,
      ),
      deleteBySeq: db.prepare<[number]>(`DELETE FROM ${jobs} WHERE seq = ?`),
      // A rescued job deleted as it dies: its "dead" event (the triggers fire on insert and update only).
      logDeadBySeq: db.prepare<[{ seq: number; now: number; error: string }]>(
        `INSERT INTO ${this.prefix}events (at, type, queue, name, job_id, attempt, data)
         SELECT @now, 'dead', queue, name, id, attempt, json_object('error', json(@error)) FROM ${jobs} WHERE seq = @seq`,
      ),

      /* Plan: SEARCH conveyor_jobs USING INDEX conveyor_jobs_due (run_at<?) */
      promoteDue: db.prepare<[number]>(`UPDATE ${jobs} SET state = 'waiting' WHERE state = 'scheduled' AND run_at <= ?`),

      /* Plan: SEARCH conveyor_jobs USING COVERING INDEX conveyor_jobs_expires (expires_at<?) */
      deleteExpired: db.prepare<[number, number]>(`DELETE FROM ${jobs} WHERE seq IN (SELECT seq FROM ${jobs} WHERE expires_at <= ? LIMIT ?)`),
      /*
       * Plan: SEARCH conveyor_jobs USING INDEX conveyor_jobs_prunable (queue=? AND <expr>=?)
       * Walks one bucket newest first straight off the index; OFFSET skips the rows to keep.
       */
      deleteBeyondCount: db.prepare<[string, number, number, number]>(
        `DELETE FROM ${jobs} WHERE seq IN (
           SELECT seq FROM ${jobs}
           WHERE queue = ? AND (state = 'dead') = ? AND expires_at IS NOT NULL
           ORDER BY finished_at DESC, seq DESC
           LIMIT ? OFFSET ?)`,
      ),
      queueNames: db.prepare<[], string>(`SELECT name FROM ${queues} ORDER BY name`).pluck(),
      deleteExpiredKeys: db.prepare<[number, number]>(`DELETE FROM ${keys} WHERE key IN (SELECT key FROM ${keys} WHERE expires_at <= ? LIMIT ?)`),

      getJob: db.prepare<[string], JobRow>(`SELECT * FROM ${jobs} WHERE id = ?`),

      queueRows: db.prepare<[], { name: string; paused: number }>(`SELECT name, paused FROM ${queues} ORDER BY name`),
      queueRow: db.prepare<[string], { name: string; paused: number }>(`SELECT name, paused FROM ${queues} WHERE name = ?`),
      /* Plan: SCAN conveyor_jobs USING COVERING INDEX conveyor_jobs_claim */
      pendingCounts: db.prepare<[number, number], PendingCounts>(
        `SELECT queue, sum(run_at <= ?) AS due, count(*) AS total, min(CASE WHEN run_at <= ? THEN run_at END) AS oldest
         FROM ${jobs} WHERE state IN ('waiting', 'scheduled') GROUP BY queue`,
      ),
      pendingCountsOf: db.prepare<[number, number, string], PendingCounts>(
        `SELECT queue, sum(run_at <= ?) AS due, count(*) AS total, min(CASE WHEN run_at <= ? THEN run_at END) AS oldest
         FROM ${jobs} WHERE queue = ? AND state IN ('waiting', 'scheduled') GROUP BY queue`,
      ),
      /* Plan: SCAN conveyor_jobs USING INDEX conveyor_jobs_lease; then COVERING INDEX conveyor_jobs_finished */
      settledCounts: db.prepare<[], StateCount>(
        `SELECT queue, state, count(*) AS n FROM ${jobs} WHERE state = 'active' GROUP BY queue
         UNION ALL
         SELECT queue, state, count(*) AS n FROM ${jobs}
         WHERE state IN ('completed', 'cancelled', 'dead') GROUP BY queue, state`,
      ),
      settledCountsOf: db.prepare<[string, string], StateCount>(
        `SELECT queue, state, count(*) AS n FROM ${jobs} WHERE state = 'active' AND queue = ? GROUP BY queue
         UNION ALL
         SELECT queue, state, count(*) AS n FROM ${jobs}
         WHERE queue = ? AND state IN ('completed', 'cancelled', 'dead') GROUP BY state`,
      ),

      cancelLookup: db.prepare<[string], CancelRow>(`SELECT state, retain_completed_ms FROM ${jobs} WHERE id = ?`),
      cancelPending: db.prepare<[{ id: string; now: number }]>(
        `UPDATE ${jobs} SET state = 'cancelled', finished_at = @now, expires_at = @now + retain_completed_ms
         WHERE id = @id`,
      ),
      /*
       * The row outlives its lease even with retention 0, so the worker's next heartbeat can still
       * tell "cancelled" from "gone"; the lease token is kept so its late settle is refused.
       */
      cancelActive: db.prepare<[{ id: string; now: number }]>(
        `UPDATE ${jobs}
         SET state = 'cancelled', finished_at = @now, lease_expires_at = NULL,
             expires_at = max(@now + retain_completed_ms, lease_expires_at), ${appendHistory("cancelled", "NULL")}
         WHERE id = @id`,
      ),
      deleteById: db.prepare<[string]>(`DELETE FROM ${jobs} WHERE id = ?`),
      // `error` is kept: until the replayed job's next attempt settles, the last error is still
      // the one that killed it, which is what an operator looking at a replayed job wants to see.
      replayJob: db
        .prepare<[number, string], string>(
          `UPDATE ${jobs}
         SET state = 'waiting', run_at = ?, attempt = 0, stalls = 0, replays = replays + 1,
             finished_at = NULL, expires_at = NULL, lease_expires_at = NULL
         WHERE id = ? AND state = 'dead'
         RETURNING queue`,
        )
        .pluck(),
      removeFinished: db.prepare<[string]>(`DELETE FROM ${jobs} WHERE id = ? AND state IN ('completed', 'dead', 'cancelled')`),
      jobState: db.prepare<[string], JobState>(`SELECT state FROM ${jobs} WHERE id = ?`).pluck(),
      jobQueue: db.prepare<[string], string>(`SELECT queue FROM ${jobs} WHERE id = ?`).pluck(),

      deleteKeyIfExpired: db.prepare<[string, number]>(`DELETE FROM ${keys} WHERE key = ? AND expires_at <= ?`),
      insertKey: db.prepare<[string, number]>(`INSERT OR IGNORE INTO ${keys} (key, expires_at) VALUES (?, ?)`),
    };
  }

  /**
   * `txs` with every call (and its `immediate` / `deferred` / `exclusive` forms) rethrowing a
   * database that stayed locked past busyTimeoutMs as StoreUnavailableError.
   */
  private typedErrors<T extends object>(txs: T): T {
    const store = this.description;
    type Call = (...args: unknown[]) => unknown;
    const guard =
      (fn: Call): Call =>
      (...args) => {
        try {
          return fn(...args);
        } catch (error) {
          throw asStoreError(error, store, isSqliteBusy);
        }
      };
    const wrap = (tx: Call & { immediate: Call; deferred: Call; exclusive: Call }) =>
      Object.assign(guard(tx), { immediate: guard(tx.immediate), deferred: guard(tx.deferred), exclusive: guard(tx.exclusive) });
    return Object.fromEntries(Object.entries(txs).map(([name, tx]) => [name, wrap(tx as Parameters<typeof wrap>[0])])) as T;
  }

  /** Every multi-statement operation, as a better-sqlite3 transaction function. */
  private defineTransactions() {
    const db = this.db;
    const s = this.s;
    const flow = new SqliteFlow(db, this.prefix, s.claimCandidates);

    /** Bumps the wake counter of each queue (see the queues table); returns the new values. */
    const signal = (queues: Iterable<string>): WakeMarks => {
      const marks: WakeMarks = new Map();
      for (const queue of queues) marks.set(queue, s.signalQueue.get(queue)!);
      return marks;
    };

    // Each transaction reads the clock once it holds the write lock, not before waiting for it,
    // so a lease or schedule never starts in the past by however long another process held it.
    const enqueue = db.transaction((specs: readonly JobSpec[], allOrNothing: boolean) => {
      const now = this.nowMs();
      const results: EnqueueResult[] = new Array<EnqueueResult>(specs.length);
      const seenQueues = new Set<string>();
      const woken = new Set<string>();
      // Specs built from one set of defaults share their backoff object: serialise it once.
      let lastBackoff: BackoffSpec | null = null;
      let lastBackoffText = "";
      // Queues whose claims take turns across lanes (flow control): their unkeyed jobs get lane "".
      const laned = flow.lanedAmong(specs.map((spec) => spec.queue));
      for (let i = 0; i < specs.length; i++) {
        const spec = specs[i]!;
        if (spec.backoff !== lastBackoff) {
          lastBackoff = spec.backoff;
          lastBackoffText = JSON.stringify(spec.backoff);
        }
        if (spec.dedup !== undefined) {
          const taken = this.dedup.decide(spec, now);
          if (taken !== null) {
            results[i] = taken.result;
            seenQueues.add(spec.queue);
            if (taken.wake) woken.add(spec.queue);
            continue;
          }
        }
        const runAt = spec.runAt ?? now + spec.delayMs;
        const { changes } = s.insertJob.run(
          spec.id,
          spec.queue,
          spec.name,
          spec.payload,
          spec.meta ?? null,
          runAt > now ? "scheduled" : "waiting",
          spec.priority,
          runAt,
          now,
          spec.maxAttempts,
          lastBackoffText,
          spec.timeoutMs,
          spec.retainCompletedMs,
          spec.retainDeadMs,
        );
        results[i] = { id: spec.id, duplicate: changes === 0 };
        if (changes !== 0 && spec.flow !== undefined) {
          flow.setJobFlow(spec.id, spec.queue, spec.flow);
          laned.add(spec.queue);
        } else if (changes !== 0 && laned.has(spec.queue)) {
          flow.setUnkeyedLane(spec.id);
        }
        seenQueues.add(spec.queue);
        if (changes !== 0) woken.add(spec.queue);
      }
      // Thrown to roll the transaction back: an all-or-nothing batch with a duplicate stores nothing.
      if (allOrNothing && refusedBatch(results)) throw new RefusedBatch(results);
      for (const queue of seenQueues) if (!woken.has(queue)) s.upsertQueue.run(queue);
      return { results, marks: signal(woken) };
    });

    const claim = db.transaction((request: ClaimRequest, limit: number, leaseMs: number) => {
      const now = this.nowMs();
      const queues = [...new Set(request.queues)];
      const paused = new Set(s.pausedAmong.all(JSON.stringify(queues)));
      const names = JSON.stringify(request.names);
      const flows = flow.rowsAmong(queues);
      const throttles: ClaimThrottle[] = [];
      const rateBudgets = new Map<string, ClaimBudget>();
      let candidates: ClaimKey[] = [];
      for (const queue of queues) {
        if (paused.has(queue)) continue;
        const row = flows.get(queue);
        if (row === undefined) candidates.push(...s.claimCandidates.all(queue, now, names, limit));
        else candidates.push(...flow.candidates(row, now, request, limit, throttles, rateBudgets));
      }
      if (candidates.length === 0) return { rows: [], now, throttles };
      if (queues.length > 1) candidates = candidates.sort(byClaimOrder).slice(0, limit);
      const { id, host, pid } = request.worker;
      const rows = s.claimJobs.all(now + leaseMs, id, host, pid, now, JSON.stringify(candidates.map((c) => c.seq)));
      if (flows.size > 0) flow.recordStarts(flows, rows, now);
      if (rateBudgets.size > 0) flow.throttlesAfterClaim(rateBudgets, rows, throttles);
      // RETURNING yields rows in no particular order.
      return { rows: rows.sort(byClaimOrder), now, throttles };
    });

    const heartbeat = db.transaction((leases: readonly Lease[], leaseMs: number) => {
      const now = this.nowMs();
      const lost: HeartbeatResult["lost"] = [];
      for (const lease of leases) {
        if (s.extendLease.run(now + leaseMs, lease.jobId, lease.token).changes === 1) continue;
        const row = s.leaseState.get(lease.jobId);
        const reason: LeaseLossReason = row === undefined ? "gone" : row.state === "cancelled" && row.lease_token === lease.token ? "cancelled" : "expired";
        lost.push({ lease, reason });
      }
      return lost;
    });

    const complete = db.transaction((items: readonly Completion[], results: readonly string[]) => {
      const now = this.nowMs();
      return items.map((item, i): SettleResult => {
        const fence = { id: item.lease.jobId, token: item.lease.token, now };
        if (s.logCompletedUnretained.run({ ...fence, result: results[i]! }).changes === 1) {
          s.deleteCompletedUnretained.run(fence);
          return "applied";
        }
        return s.completeJob.run({ ...fence, result: results[i]! }).changes === 1 ? "applied" : "stale";
      });
    });

    const fail = db.transaction((items: readonly Failure[], errors: readonly string[]) => {
      const now = this.nowMs();
      const woken = new Set<string>();
      const results = items.map((item, i): SettleResult => {
        const fence = { id: item.lease.jobId, token: item.lease.token, now };
        const error = errors[i]!;
        if (item.retryDelayMs !== null) {
          const runAt = now + Math.floor(item.retryDelayMs);
          const queue = s.retryJob.get({ ...fence, runAt, error });
          if (queue === undefined) return "stale";
          woken.add(queue);
          return "applied";
        }
        if (s.logDeadUnretained.run({ ...fence, error }).changes === 1) {
          s.deleteDeadUnretained.run(fence);
          return "applied";
        }
        return s.buryJob.run({ ...fence, error }).changes === 1 ? "applied" : "stale";
      });
      return { results, marks: signal(woken) };
    });

    const release = db.transaction((leases: readonly Lease[]) => {
      const now = this.nowMs();
      const woken = new Set<string>();
      const results = leases.map((lease): SettleResult => {
        const queue = s.releaseJob.get({ id: lease.jobId, token: lease.token, now });
        if (queue === undefined) return "stale";
        woken.add(queue);
        return "applied";
      });
      return { results, marks: signal(woken) };
    });

    const markBuffered = db.transaction((leases: readonly Lease[], buffered: boolean) => {
      for (const lease of leases) s.markBuffered.run(buffered ? 1 : 0, lease.jobId, lease.token);
    });

    const progress = db.transaction((lease: Lease, text: string): SettleResult =>
      s.setProgress.run(text, lease.jobId, lease.token).changes === 1 ? "applied" : "stale",
    );

    const rescue = db.transaction((maxStalls: number, limit: number) => {
      const now = this.nowMs();
      const woken = new Set<string>();
      const expired = s.expiredLeases.all(now, limit);
      // Read before any of them changes: a job counts a stall only when it was running, and was
      // the only job its worker was running (RescueOptions.maxStalls).
      const busy = new Set(expired.length > 0 ? s.busyWorkers.all() : []);
      for (const worker of new Set(expired.map((row) => row.worker_id))) if (worker !== null && busy.has(worker)) s.excuseWorkerJobs.run(worker);
      const rescued = expired.map((row): RescuedJob => {
        const stall = row.excused === 1 || (row.worker_id !== null && busy.has(row.worker_id)) ? 0 : 1;
        const stalls = row.stalls + stall;
        const quarantined = stall === 1 && stalls >= maxStalls;
        const dead = quarantined || row.attempt >= row.max_attempts;
        if (!dead) {
          s.rescueToWaiting.run({ seq: row.seq, now, error: LEASE_EXPIRED_TEXT, stall });
          woken.add(row.queue);
        } else if (row.retain_dead_ms === 0) {
          s.logDeadBySeq.run({ seq: row.seq, now, error: quarantined ? serializeError(quarantineError(stalls)) : LEASE_EXPIRED_TEXT });
          s.deleteBySeq.run(row.seq);
        } else {
          const error = quarantined ? serializeError(quarantineError(stalls)) : LEASE_EXPIRED_TEXT;
          s.rescueToDead.run({ seq: row.seq, now, error, attemptError: LEASE_EXPIRED_TEXT, stall });
        }
        return {
          id: row.id,
          queue: row.queue,
          name: row.name,
          state: dead ? "dead" : "waiting",
          attempt: row.attempt,
          workerId: row.worker_id,
        };
      });
      return { rescued, marks: signal(woken) };
    });

    const promote = db.transaction(() => s.promoteDue.run(this.nowMs()).changes);

    const prune = db.transaction((maxCompleted: number, maxDead: number, limit: number): PruneResult => {
      const now = this.nowMs();
      let jobs = s.deleteExpired.run(now, limit).changes;
      for (const queue of s.queueNames.all()) {
        if (jobs >= limit) break;
        jobs += s.deleteBeyondCount.run(queue, 0, limit - jobs, maxCompleted).changes;
        if (jobs >= limit) break;
        jobs += s.deleteBeyondCount.run(queue, 1, limit - jobs, maxDead).changes;
      }
      const idempotencyKeys = s.deleteExpiredKeys.run(now, limit).changes;
      this.dedup.prune(now, limit);
      return { jobs, idempotencyKeys };
    });

    // A read transaction, so every count comes from the same snapshot.
    const stats = db.transaction((queue: string | undefined): QueueStats[] => {
      const now = this.nowMs();
      const queueRows = queue === undefined ? s.queueRows.all() : [s.queueRow.get(queue) ?? { name: queue, paused: 0 }];
      const pending = queue === undefined ? s.pendingCounts.all(now, now) : s.pendingCountsOf.all(now, now, queue);
      const settled = queue === undefined ? s.settledCounts.all() : s.settledCountsOf.all(queue, queue);
      const byQueue = new Map<string, QueueStats>();
      for (const row of queueRows) {
        byQueue.set(row.name, {
          queue: row.name,
          paused: row.paused === 1,
          counts: { scheduled: 0, waiting: 0, "waiting-children": 0, active: 0, completed: 0, dead: 0, cancelled: 0 },
          oldestWaitingAgeMs: null,
        });
      }
      for (const row of pending) {
        const entry = byQueue.get(row.queue);
        if (entry === undefined) continue;
        entry.counts.waiting = row.due ?? 0;
        entry.counts.scheduled = row.total - (row.due ?? 0);
        entry.oldestWaitingAgeMs = row.oldest === null ? null : now - row.oldest;
      }
      for (const row of settled) {
        const entry = byQueue.get(row.queue);
        if (entry !== undefined) entry.counts[row.state] = row.n;
      }
      for (const row of this.flows.waitingCounts(queue)) {
        const entry = byQueue.get(row.queue);
        if (entry !== undefined) entry.counts["waiting-children"] = row.n;
      }
      return [...byQueue.values()];
    });

    /** False when `queue` is given and the job `id` belongs to another queue (read in the caller's transaction). */
    const scoped = (id: string, queue: string | undefined): boolean => queue === undefined || inQueue(s.jobQueue.get(id), queue);

    const cancel = db.transaction((id: string, queue: string | undefined): CancelResult => {
      const now = this.nowMs();
      const row = s.cancelLookup.get(id);
      if (row === undefined || !scoped(id, queue)) return "not-found";
      if (row.state === "completed" || row.state === "dead" || row.state === "cancelled") return "already-finished";
      if (row.state === "active") s.cancelActive.run({ id, now });
      else if (row.retain_completed_ms === 0) s.deleteById.run(id);
      else s.cancelPending.run({ id, now });
      return "cancelled";
    });

    const remove = db.transaction((id: string, queue: string | undefined): RemoveResult => {
      if (!scoped(id, queue)) return "not-found";
      if (s.removeFinished.run(id).changes === 1) return "removed";
      return s.jobState.get(id) === undefined ? "not-found" : "not-finished";
    });

    const replay = db.transaction((id: string, scope: string | undefined): { result: ReplayResult; marks: WakeMarks } => {
      if (!scoped(id, scope)) return { result: "not-found", marks: new Map() };
      const queue = s.replayJob.get(this.nowMs(), id);
      if (queue !== undefined) return { result: "replayed", marks: signal([queue]) };
      return { result: s.jobState.get(id) === undefined ? "not-found" : "not-dead", marks: new Map() };
    });

    const pause = db.transaction((queue: string) => {
      s.setPaused.run(queue, 1);
    });

    const resume = db.transaction((queue: string) => {
      s.setPaused.run(queue, 0);
      return signal([queue]);
    });

    const once = db.transaction((key: string, ttlMs: number): boolean => {
      const now = this.nowMs();
      s.deleteKeyIfExpired.run(key, now);
      return s.insertKey.run(key, now + ttlMs).changes === 1;
    });

    const setLimits = db.transaction((queue: string, limits: StoredQueueLimits) => {
      flow.setLimits(queue, limits);
      return signal([queue]);
    });
    const getFlow = db.transaction((queue: string) => flow.get(queue));
    const hold = db.transaction((queue: string, forMs: number, keyOfJob: string | undefined) => {
      if (keyOfJob === undefined) flow.hold(queue, this.nowMs() + forMs);
      else flow.holdKeyOf(queue, keyOfJob, this.nowMs() + forMs);
    });

    return {
      enqueue,
      claim,
      heartbeat,
      markBuffered,
      complete,
      fail,
      release,
      progress,
      rescue,
      promote,
      prune,
      stats,
      cancel,
      replay,
      remove,
      pause,
      resume,
      once,
      setLimits,
      getFlow,
      hold,
    };
  }

  /**
   * One statement per filter shape, prepared on first use: a single statement with
   * "(? IS NULL OR col = ?)" terms would stop SQLite from using any index. The cursor is a
   * `seq <` bound, so a page after it reads the rowid (or index) from there on, whatever its depth.
   */
  private listStatement(shape: {
    byQueue: boolean;
    byName: boolean;
    state: StateFilter;
    byCursor: boolean;
    from: boolean;
    until: boolean;
    newer?: true;
  }): Database.Statement<unknown[], JobRow> {
    const key = JSON.stringify(shape);
    let statement = this.listStatements.get(key);
    if (statement === undefined) {
      const where: string[] = [];
      if (shape.byQueue) where.push("queue = ?");
      if (shape.byName) where.push("name = ?");
      if (shape.state === "due") where.push("state IN ('waiting', 'scheduled') AND run_at <= ?");
      if (shape.state === "future") where.push("state IN ('waiting', 'scheduled') AND run_at > ?");
      if (shape.state === "stored") where.push("state = ?");
      if (shape.byCursor) where.push("seq < ?");
      if (shape.newer) where.push("seq > ?");
      if (shape.from) where.push("created_at >= ?");
      if (shape.until) where.push("created_at < ?");
      statement = this.db.prepare<unknown[], JobRow>(
        `SELECT * FROM ${this.prefix}jobs ${where.length > 0 ? `WHERE ${where.join(" AND ")}` : ""}
         ORDER BY seq ${shape.newer ? "ASC" : "DESC"} LIMIT ? OFFSET ?`,
      );
      this.listStatements.set(key, statement);
    }
    return statement;
  }

  // ── mapping ──────────────────────────────────────────────────────────────────────────────

  private toRecord(row: JobRow, now: number): JobRecord {
    return {
      id: row.id,
      queue: row.queue,
      name: row.name,
      data: JSON.parse(row.payload) as Json,
      state: effectiveState(row.state, row.run_at, now),
      priority: row.priority,
      attempt: row.attempt,
      maxAttempts: row.max_attempts,
      backoff: JSON.parse(row.backoff) as BackoffSpec,
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
      progress: row.progress === null ? null : (JSON.parse(row.progress) as Json),
      result: row.result === null ? null : (JSON.parse(row.result) as Json),
      error: row.error === null ? null : (JSON.parse(row.error) as ErrorInfo),
      history: JSON.parse(row.history) as AttemptRecord[],
      stalls: row.stalls,
      replays: row.replays,
      meta: row.meta === null ? null : (JSON.parse(row.meta) as { [key: string]: Json }),
      ...(row.parent_id === null ? {} : { parent: { id: row.parent_id, queue: row.parent_queue! } }),
    };
  }

  /** The clock's now as whole milliseconds: the time columns are STRICT integers. */
  private nowMs(): number {
    return Math.floor(this.clock.now());
  }
}

interface PendingCounts {
  queue: string;
  due: number | null;
  total: number;
  oldest: number | null;
}

interface StateCount {
  queue: string;
  state: JobState;
  n: number;
}

/** The database stayed locked by another connection past busyTimeoutMs (SQLITE_BUSY, SQLITE_LOCKED and their extended codes). */
function isSqliteBusy(error: unknown): boolean {
  return errorCodes(error).some((code) => code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED"));
}

/** Rolls back an all-or-nothing enqueue that met a duplicate, carrying its per-spec answers. */
class RefusedBatch extends Error {
  constructor(readonly results: EnqueueResult[]) {
    super("all-or-nothing batch refused");
  }
}

function byClaimOrder(a: ClaimKey, b: ClaimKey): number {
  return a.priority - b.priority || a.run_at - b.run_at || a.seq - b.seq;
}

/** JSON text of a result or progress report; `undefined` (a handler that returned nothing) is null. */
function jsonText(value: Json | undefined): string {
  return JSON.stringify(value ?? null) ?? "null";
}

function quarantineError(stalls: number): ErrorInfo {
  return {
    name: "LeaseExpiredError",
    message: quarantineMessage(stalls),
    stack: null,
  };
}

/**
 * Reads the numbered migrations next to this module (`migrations/0001_init.sql`, …). The build
 * copies the folder to dist, so source and compiled code read the same files.
 */
function loadMigrations(prefix: string): Migration[] {
  return readMigrationFiles(new URL("./migrations/", import.meta.url), "SQLite", "sqlite/").map((m) => ({
    version: m.version,
    file: m.file,
    sql: m.text.replaceAll("{{prefix}}", prefix),
  }));
}
