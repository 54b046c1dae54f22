/**
 * The embedded backend: one SQLite file (or `:memory:`) through better-sqlite3.
 *
 * Its parts, each in its own module: the statements (queries/*.sql, prepared in statements.ts),
 * the transactions and the concurrency model (transactions.ts), listings (list.ts), wake-ups
 * within and across processes (wakeups.ts), row mapping (rows.ts, over ../job-rows.ts shared with
 * PostgreSQL) and the schema (migrate.ts). This class opens the file and answers the contract.
 */
import { serializeError } from "../error-json.js";
import { checkedBackend, PRUNE_DEFAULTS, RESCUE_DEFAULTS } from "../checked.js";
import { asStoreError } from "../store-errors.js";
import { SqliteJobLogs } from "./job-logs.js";
import { SqliteEventLog } from "./event-log.js";
import { EVENT_LOG_SCOPE, keepEventLogOff, settleSqliteEventLog } from "./event-log-setting.js";
import { eventLogOffError, eventLogOption } from "../event-log-switch.js";
import type { EventLogPage, EventPrunePolicy } from "../../core/queue-events.js";
import type { JobLogLine } from "../../core/job-log.js";
import type { FinishedWindow } from "../contract.js";
import { scheduleTransactions, type ScheduleTransactions } from "./schedules.js";
import type { ScheduleFiring, ScheduleWrite, StoredSchedule } from "../../core/schedule.js";
import { planDedupBatch } from "../dedup.js";
import { SqliteDedupWindows } from "./dedup.js";
import { checkFlow } from "../flows.js";
import { SqliteFlows } from "./flows.js";
import { resolve } from "node:path";
import Database from "better-sqlite3";
import { planOnce } from "./stable-plans.js";
import type {
  Backend,
  CancelResult,
  Capabilities,
  ClaimedJob,
  ClaimRequest,
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
import { allOrNothingOf, inQueue } from "../contract.js";
import { systemClock, type Clock } from "../../core/clock.js";
import { ConveyorError, InvalidInputError } from "../../core/errors.js";
import type { Json } from "../../core/json.js";
import { reportThrottle, type QueueFlow, type StoredQueueLimits } from "../../core/flow.js";
import { checkName } from "../../core/spec.js";
import type { FlowInfo, FlowNodeSpec, JobRecord, JobSpec, Lease } from "../../core/job.js";
import { SqliteListing } from "./list.js";
import { migrateSqlite } from "./migrate.js";
import { toRecord } from "./rows.js";
import { prepareStatements, type Statements } from "./statements.js";
import { defineTransactions, flowTransaction, isSqliteBusy, RefusedBatch, typedErrors, type Transactions } from "./transactions.js";
import { SqliteWakeups, type WakeMarks } from "./wakeups.js";
import { shown } from "../../core/checks.js";

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
  /**
   * Keep the durable event log (the `events` table, written by triggers with each change): what
   * `queue.events()`, `GET /v1/events` and the event-driven dashboard read. It is about a quarter of a
   * processed job's time (docs/performance-sqlite.md, "Session 12: the event log switch"). With
   * `false` the prefix's event triggers are dropped and nothing is written; `queue.events()` and
   * `GET /v1/events` refuse by name (`capabilities.eventLog` false) and the dashboard and job
   * event streams poll instead. One setting per table prefix (migration 0012): the first process
   * on a prefix records it, and a process configured otherwise refuses to start, so every process
   * on one prefix agrees. In URLs: `sqlite:PATH?eventLog=off`. Default `true`.
   */
  eventLog?: boolean;
}

const DEFAULT_BUSY_TIMEOUT_MS = 5_000;
const DEFAULT_TABLE_PREFIX = "conveyor_";
const PREFIX_PATTERN = /^(?:[A-Za-z_][A-Za-z0-9_]*)?$/;

/**
 * Conveyor's embedded backend. Usable as soon as it is constructed: the constructor opens the
 * file and creates or upgrades the schema synchronously.
 *
 * ```ts
 * const backend = new SqliteBackend({ path: "jobs.db" });
 * ```
 */
export class SqliteBackend implements Backend {
  readonly description: string;
  readonly capabilities: Capabilities;
  readonly idempotency: IdempotencyStore;

  private readonly db: Database.Database;
  private readonly clock: Clock;
  private readonly prefix: string;
  private readonly memory: boolean;
  /** SqliteBackendOptions.eventLog, checked against the prefix's record (settleSqliteEventLog). */
  private readonly eventLogOn: boolean;
  private closed = false;

  private readonly s: Statements;
  private readonly wakeups: SqliteWakeups;
  private readonly dedup: SqliteDedupWindows;
  private readonly flows: SqliteFlows;
  private readonly storeFlow: (nodes: readonly FlowNodeSpec[], childCount: readonly number[]) => { results: EnqueueResult[]; marks: WakeMarks };
  private readonly tx: Transactions;
  private readonly listing: SqliteListing;
  private readonly schedules: ScheduleTransactions<WakeMarks>;

  constructor(options: SqliteBackendOptions) {
    if (typeof options?.path !== "string" || options.path === "") {
      throw new InvalidInputError(`SqliteBackend needs { path }: a database file path or ":memory:"`);
    }
    const prefix = options.tablePrefix ?? DEFAULT_TABLE_PREFIX;
    if (!PREFIX_PATTERN.test(prefix)) {
      throw new InvalidInputError(`tablePrefix must be letters, digits and _ and not start with a digit; got ${shown(prefix)}`);
    }
    const busyTimeoutMs = options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS;
    if (!Number.isInteger(busyTimeoutMs) || busyTimeoutMs < 0) {
      throw new InvalidInputError(`busyTimeoutMs must be an integer >= 0; got ${shown(busyTimeoutMs)}`);
    }
    const synchronous = options.synchronous ?? "NORMAL";
    if (synchronous !== "NORMAL" && synchronous !== "FULL") {
      throw new InvalidInputError(`synchronous must be "NORMAL" or "FULL"; got ${shown(synchronous)}`);
    }

    this.eventLogOn = eventLogOption(options.eventLog);
    this.prefix = prefix;
    this.clock = options.clock ?? systemClock;
    this.memory = options.path === ":memory:";
    // Absolute, fixed at construction: a later chdir must not move the file.
    const file = this.memory ? options.path : resolve(options.path);
    const watchWal = !this.memory && (options.wakeups ?? true);
    this.description = `sqlite:${options.path}`;
    this.capabilities = Object.freeze({
      ...FULL_STORE_FEATURES,
      transactionalEnqueue: false,
      crossProcessWakeups: watchWal,
      multiProcess: !this.memory,
      // A completion transaction would hold SQLite's one write lock for the handler's whole run,
      // stalling every other claim and settle on the file.
      transactionalCompletion: false,
      claimAcrossQueues: "merged",
      flows: "across-queues",
      eventLog: this.eventLogOn,
      jobFlowKeys: true,
    });
    this.idempotency = { once: (key, ttlMs) => this.once(key, ttlMs) };

    // Every statement planned once, not again on each run (stable-plans.ts).
    this.db = planOnce(new Database(file, { timeout: busyTimeoutMs }));
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
      this.s = prepareStatements(this.db, prefix);
      this.wakeups = new SqliteWakeups(file, watchWal, this.s);
      this.listing = new SqliteListing(this.db, prefix, this.s.getJob);
      this.dedup = new SqliteDedupWindows(this.db, prefix);
      this.flows = new SqliteFlows(this.db, prefix);
      const context = { db: this.db, prefix, s: this.s, dedup: this.dedup, flows: this.flows, eventLog: this.eventLogOn, nowMs: () => this.nowMs() };
      this.tx = typedErrors(defineTransactions(context), this.description);
      this.schedules = scheduleTransactions(
        this.db,
        prefix,
        () => this.nowMs(),
        (specs) => this.tx.enqueue(specs, false),
      );
      this.storeFlow = flowTransaction(this.db, this.tx.enqueue, this.flows, this.description);
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

  private migrateSync(): void {
    migrateSqlite(
      this.db,
      this.prefix,
      this.description,
      () => this.nowMs(),
      () => keepEventLogOff(this.db, this.prefix),
    );
    settleSqliteEventLog(this.db, this.prefix, this.eventLogOn, `table prefix "${this.prefix}" of ${this.description}`);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.wakeups.close();
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

  async enqueueFlow(nodes: readonly FlowNodeSpec[], _options?: Pick<EnqueueOptions, "tx">): Promise<EnqueueResult[]> {
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

  async claim(request: ClaimRequest): Promise<ClaimedJob[]> {
    const { limit } = request;
    if (request.queues.length === 0 || request.names.length === 0) return [];
    const { rows, now, throttles } = this.tx.claim.immediate(request, limit, request.leaseMs);
    for (const t of throttles) reportThrottle(request.onThrottle, t.queue, t.retryInMs);
    return rows.map((row) => ({
      job: toRecord(row, now),
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
    if (!this.eventLogOn) throw eventLogOffError(this.description, "read the event log", EVENT_LOG_SCOPE);
    return this.eventLog().readEvents(cursor, limit);
  }

  async latestEventCursor(): Promise<string> {
    if (!this.eventLogOn) throw eventLogOffError(this.description, "read the event log", EVENT_LOG_SCOPE);
    return this.eventLog().latestEventCursor();
  }

  async pruneEvents(policy?: EventPrunePolicy): Promise<number> {
    if (!this.eventLogOn) throw eventLogOffError(this.description, "prune the event log", EVENT_LOG_SCOPE);
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
    return row === undefined || !inQueue(row.queue, queue) ? null : toRecord(row, this.nowMs());
  }

  async list(filter: ListFilter = {}, page: Page = {}): Promise<JobRecord[]> {
    return this.listing.list(filter, page, this.nowMs());
  }

  async stats(queue?: string): Promise<QueueStats[]> {
    return this.tx.stats.deferred(queue);
  }

  async finishedWindow(queue: string, fromMs: number, untilMs: number, sampleLimit: number): Promise<FinishedWindow> {
    return this.listing.finishedWindow(queue, fromMs, untilMs, sampleLimit);
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

  // ── wake-ups (./wakeups.ts) ──────────────────────────────────────────────────────────────

  subscribe(listener: WakeListener): () => void {
    return this.wakeups.subscribe(listener);
  }

  /** After a commit that bumped wake counters: wakes this process's listeners (and remembers the marks). */
  private announce(marks: WakeMarks): void {
    this.wakeups.announce(marks);
  }

  /** The clock's now as whole milliseconds: the time columns are STRICT integers. */
  private nowMs(): number {
    return Math.floor(this.clock.now());
  }
}

/** JSON text of a result or progress report; `undefined` (a handler that returned nothing) is null. */
function jsonText(value: Json | undefined): string {
  return JSON.stringify(value ?? null) ?? "null";
}
