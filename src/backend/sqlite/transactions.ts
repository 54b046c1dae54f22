/**
 * Every multi-statement operation of the SQLite backend, as a better-sqlite3 transaction function.
 *
 * Concurrency model. better-sqlite3 is synchronous, so within one process every call runs to
 * completion before the next starts. Across processes sharing a file, every write is one
 * `BEGIN IMMEDIATE` transaction: it takes SQLite's single write lock before it reads anything,
 * so the rows a claim selects cannot be claimed by another process before it updates them, and
 * no transaction ever has to upgrade a stale read snapshot (which in WAL mode fails with
 * SQLITE_BUSY_SNAPSHOT instead of waiting). Readers never block the writer and vice versa (WAL).
 */
import type Database from "better-sqlite3";
import type {
  CancelResult,
  ClaimRequest,
  ClaimThrottle,
  Completion,
  EnqueueResult,
  Failure,
  HeartbeatResult,
  PruneResult,
  QueueStats,
  RemoveResult,
  ReplayResult,
  RescuedJob,
  SettleResult,
} from "../contract.js";
import { inQueue, refusedBatch } from "../contract.js";
import { serializeError } from "../error-json.js";
import { byClaimOrder, type ClaimKey } from "../job-rows.js";
import { asStoreError, errorCodes } from "../store-errors.js";
import type { ClaimBudget, QueueFlow, StoredQueueLimits } from "../../core/flow.js";
import { LeaseExpiredError, quarantineMessage, type LeaseLossReason } from "../../core/errors.js";
import type { BackoffSpec, ErrorInfo, FlowNodeSpec, JobSpec, Lease } from "../../core/job.js";
import { flowRefused } from "../flows.js";
import type { SqliteDedupWindows } from "./dedup.js";
import { SqliteFlow } from "./flow.js";
import type { SqliteFlows } from "./flows.js";
import { JobInserts } from "./job-inserts.js";
import { queuesToProbe } from "./pending-queues.js";
import type { FenceParams, InsertJob, Statements } from "./statements.js";
import type { WakeMarks } from "./wakeups.js";
import type { JobRow } from "./rows.js";

/** The error of an attempt whose lease expired, as stored (JSON text). */
const LEASE_EXPIRED_TEXT = serializeError({ name: "LeaseExpiredError", message: new LeaseExpiredError().message, stack: null });

/** What the transactions work on. */
export interface TransactionContext {
  db: Database.Database;
  prefix: string;
  s: Statements;
  dedup: SqliteDedupWindows;
  flows: SqliteFlows;
  /** The prefix keeps its event log (SqliteBackendOptions.eventLog): a job deleted as it settles gets its event written first. */
  eventLog: boolean;
  /** The clock's now as whole milliseconds: the time columns are STRICT integers. */
  nowMs: () => number;
}

type Tx<F extends (...args: never[]) => unknown> = Database.Transaction<F>;
type Marked<T> = T & { marks: WakeMarks };

/** The transactions, by the contract call each serves; `marks` are the wake counters to announce after commit. */
export interface Transactions {
  enqueue: Tx<(specs: readonly JobSpec[], allOrNothing: boolean) => Marked<{ results: EnqueueResult[] }>>;
  claim: Tx<(request: ClaimRequest, limit: number, leaseMs: number) => { rows: JobRow[]; now: number; throttles: ClaimThrottle[] }>;
  heartbeat: Tx<(leases: readonly Lease[], leaseMs: number) => HeartbeatResult["lost"]>;
  markBuffered: Tx<(leases: readonly Lease[], buffered: boolean) => void>;
  complete: Tx<(items: readonly Completion[], results: readonly string[]) => SettleResult[]>;
  fail: Tx<(items: readonly Failure[], errors: readonly string[]) => Marked<{ results: SettleResult[] }>>;
  release: Tx<(leases: readonly Lease[]) => Marked<{ results: SettleResult[] }>>;
  progress: Tx<(lease: Lease, text: string) => SettleResult>;
  rescue: Tx<(maxStalls: number, limit: number) => Marked<{ rescued: RescuedJob[] }>>;
  promote: Tx<() => number>;
  prune: Tx<(maxCompleted: number, maxDead: number, limit: number) => PruneResult>;
  stats: Tx<(queue: string | undefined) => QueueStats[]>;
  cancel: Tx<(id: string, queue: string | undefined) => CancelResult>;
  replay: Tx<(id: string, queue: string | undefined) => Marked<{ result: ReplayResult }>>;
  remove: Tx<(id: string, queue: string | undefined) => RemoveResult>;
  pause: Tx<(queue: string) => void>;
  resume: Tx<(queue: string) => WakeMarks>;
  once: Tx<(key: string, ttlMs: number) => boolean>;
  setLimits: Tx<(queue: string, limits: StoredQueueLimits) => WakeMarks>;
  getFlow: Tx<(queue: string) => QueueFlow | null>;
  hold: Tx<(queue: string, forMs: number, keyOfJob: string | undefined) => void>;
}

/** Rolls back an all-or-nothing enqueue (or a flow) that met a duplicate, carrying its per-spec answers. */
export class RefusedBatch extends Error {
  constructor(readonly results: EnqueueResult[]) {
    super("all-or-nothing batch refused");
  }
}

/** The database stayed locked by another connection past busyTimeoutMs (SQLITE_BUSY, SQLITE_LOCKED and their extended codes). */
export function isSqliteBusy(error: unknown): boolean {
  return errorCodes(error).some((code) => code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED"));
}

/**
 * `txs` with every call (and its `immediate` / `deferred` / `exclusive` forms) rethrowing a
 * database that stayed locked past busyTimeoutMs as StoreUnavailableError naming `store`.
 */
export function typedErrors<T extends object>(txs: T, store: string): T {
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
export function defineTransactions({ db, prefix, s, dedup, flows, eventLog, nowMs }: TransactionContext): Transactions {
  const flow = new SqliteFlow(db, prefix, s.claimCandidates);
  const inserts = new JobInserts(db, prefix, s.insertJob);

  /** Bumps the wake counter of each queue (see the queues table); returns the new values. */
  const signal = (queues: Iterable<string>): WakeMarks => {
    const marks: WakeMarks = new Map();
    for (const queue of queues) marks.set(queue, s.signalQueue.get(queue)!);
    return marks;
  };

  // Each transaction reads the clock once it holds the write lock, not before waiting for it,
  // so a lease or schedule never starts in the past by however long another process held it.
  const enqueue = db.transaction((specs: readonly JobSpec[], allOrNothing: boolean) => {
    const now = nowMs();
    const results: EnqueueResult[] = new Array<EnqueueResult>(specs.length);
    const seenQueues = new Set<string>();
    const woken = new Set<string>();
    // Specs built from one set of defaults share their backoff object: serialise it once.
    let lastBackoff: BackoffSpec | null = null;
    let lastBackoffText = "";
    // Queues whose claims take turns across lanes (flow control): their unkeyed jobs get lane "".
    const laned = flow.lanedAmong(specs.map((spec) => spec.queue));
    // Plain jobs (no dedup window, no flow keys, a queue without lanes) wait here to be stored
    // many per statement (job-inserts.ts); any other job first stores them, so `seq` keeps the
    // order of `specs` and a dedup decision sees every earlier job of the call.
    const batch: InsertJob[] = [];
    const batchAt: number[] = [];
    const storeBatch = (): void => {
      if (batch.length === 0) return;
      const stored = inserts.insert(batch);
      for (let k = 0; k < batch.length; k++) {
        const spec = specs[batchAt[k]!]!;
        results[batchAt[k]!] = { id: spec.id, duplicate: !stored[k] };
        if (stored[k]) woken.add(spec.queue);
      }
      batch.length = 0;
      batchAt.length = 0;
    };
    for (let i = 0; i < specs.length; i++) {
      const spec = specs[i]!;
      if (spec.backoff !== lastBackoff) {
        lastBackoff = spec.backoff;
        lastBackoffText = JSON.stringify(spec.backoff);
      }
      seenQueues.add(spec.queue);
      const runAt = spec.runAt ?? now + spec.delayMs;
      const row: InsertJob = [
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
      ];
      if (spec.dedup === undefined && spec.flow === undefined && !laned.has(spec.queue)) {
        batch.push(row);
        batchAt.push(i);
        continue;
      }
      storeBatch();
      if (spec.dedup !== undefined) {
        const taken = dedup.decide(spec, now);
        if (taken !== null) {
          results[i] = taken.result;
          if (taken.wake) woken.add(spec.queue);
          continue;
        }
      }
      // A job with a group or limiter key, or any job of a laned queue, is stored with its lane.
      const lanedJob = spec.flow !== undefined || laned.has(spec.queue);
      const changes = lanedJob ? flow.insertLaned(row, spec.flow ?? null) : s.insertJob.run(...row).changes;
      results[i] = { id: spec.id, duplicate: changes === 0 };
      if (changes !== 0 && spec.flow !== undefined) laned.add(spec.queue);
      if (changes !== 0) woken.add(spec.queue);
    }
    storeBatch();
    // Thrown to roll the transaction back: an all-or-nothing batch with a duplicate stores nothing.
    if (allOrNothing && refusedBatch(results)) throw new RefusedBatch(results);
    for (const queue of seenQueues) if (!woken.has(queue)) s.upsertQueue.run(queue);
    return { results, marks: signal(woken) };
  });

  const claim = db.transaction((request: ClaimRequest, limit: number, leaseMs: number) => {
    const now = nowMs();
    // Only the named queues that hold pending jobs: empty ones cost nothing (pending-queues.ts).
    const queues = queuesToProbe(s.pendingQueues, request.queues);
    const paused = new Set(s.pausedAmong.all(JSON.stringify(queues)));
    // One job name (a Worker with one handler) is matched as is, without a JSON array (statements.ts).
    const oneName = request.names.length === 1 ? request.names[0]! : null;
    const names = oneName ?? JSON.stringify(request.names);
    const plainCandidates = oneName === null ? s.claimCandidates : s.claimCandidatesOfName;
    const flows = flow.rowsAmong(queues);
    const throttles: ClaimThrottle[] = [];
    const rateBudgets = new Map<string, ClaimBudget>();
    let candidates: ClaimKey[] = [];
    for (const queue of queues) {
      if (paused.has(queue)) continue;
      const row = flows.get(queue);
      if (row === undefined) candidates.push(...plainCandidates.all(queue, now, names, limit));
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
    const now = nowMs();
    const lost: HeartbeatResult["lost"] = [];
    for (const lease of leases) {
      if (s.extendLease.run(now + leaseMs, lease.jobId, lease.token).changes === 1) continue;
      const row = s.leaseState.get(lease.jobId);
      const reason: LeaseLossReason = row === undefined ? "gone" : row.state === "cancelled" && row.lease_token === lease.token ? "cancelled" : "expired";
      lost.push({ lease, reason });
    }
    return lost;
  });

  // A finished job is either kept (one UPDATE: complete.sql, bury.sql) or, kept for 0 ms, deleted
  // after its event is written (the triggers skip deletes: an INSERT of the event, then a DELETE).
  // Each path's first statement matches only its own jobs, so a settle tries the path that applied
  // last first and the other one only when that found nothing: a queue's jobs usually share their
  // retention, and the first statement of the wrong path costs a lookup by id (about a tenth of
  // a completion's CPU, docs/performance-sqlite.md, Session 11).
  const lastSettleUnretained = { completed: false, dead: false };

  const completeRetained = (fence: FenceParams, result: string): boolean => s.completeJob.run({ ...fence, result }).changes === 1;
  // With the event log off nothing is written before the delete, which is fenced the same way.
  const completeUnretained = (fence: FenceParams, result: string): boolean => {
    if (!eventLog) return s.deleteCompletedUnretained.run(fence).changes === 1;
    if (s.logCompletedUnretained.run({ ...fence, result }).changes === 0) return false;
    s.deleteCompletedUnretained.run(fence);
    return true;
  };
  const bury = (fence: FenceParams, error: string): boolean => s.buryJob.run({ ...fence, error }).changes === 1;
  const buryUnretained = (fence: FenceParams, error: string): boolean => {
    if (!eventLog) return s.deleteDeadUnretained.run(fence).changes === 1;
    if (s.logDeadUnretained.run({ ...fence, error }).changes === 0) return false;
    s.deleteDeadUnretained.run(fence);
    return true;
  };

  const complete = db.transaction((items: readonly Completion[], results: readonly string[]) => {
    const now = nowMs();
    return items.map((item, i): SettleResult => {
      const fence = { id: item.lease.jobId, token: item.lease.token, now };
      const first = lastSettleUnretained.completed;
      if ((first ? completeUnretained : completeRetained)(fence, results[i]!)) return "applied";
      if (!(first ? completeRetained : completeUnretained)(fence, results[i]!)) return "stale";
      lastSettleUnretained.completed = !first;
      return "applied";
    });
  });

  const fail = db.transaction((items: readonly Failure[], errors: readonly string[]) => {
    const now = nowMs();
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
      const first = lastSettleUnretained.dead;
      if ((first ? buryUnretained : bury)(fence, error)) return "applied";
      if (!(first ? bury : buryUnretained)(fence, error)) return "stale";
      lastSettleUnretained.dead = !first;
      return "applied";
    });
    return { results, marks: signal(woken) };
  });

  const release = db.transaction((leases: readonly Lease[]) => {
    const now = nowMs();
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
    const now = nowMs();
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
        if (eventLog) s.logDeadBySeq.run({ seq: row.seq, now, error: quarantined ? serializeError(quarantineError(stalls)) : LEASE_EXPIRED_TEXT });
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

  const promote = db.transaction(() => s.promoteDue.run(nowMs()).changes);

  const prune = db.transaction((maxCompleted: number, maxDead: number, limit: number): PruneResult => {
    const now = nowMs();
    let jobs = s.deleteExpired.run(now, limit).changes;
    for (const queue of s.queueNames.all()) {
      if (jobs >= limit) break;
      jobs += s.deleteCompletedBeyondCount.run({ queue, limit: limit - jobs, keep: maxCompleted }).changes;
      if (jobs >= limit) break;
      jobs += s.deleteDeadBeyondCount.run({ queue, limit: limit - jobs, keep: maxDead }).changes;
    }
    const idempotencyKeys = s.deleteExpiredKeys.run(now, limit).changes;
    dedup.prune(now, limit);
    return { jobs, idempotencyKeys };
  });

  // A read transaction, so every count comes from the same snapshot.
  const stats = db.transaction((queue: string | undefined): QueueStats[] => {
    const now = nowMs();
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
    for (const row of flows.waitingCounts(queue)) {
      const entry = byQueue.get(row.queue);
      if (entry !== undefined) entry.counts["waiting-children"] = row.n;
    }
    return [...byQueue.values()];
  });

  /** False when `queue` is given and the job `id` belongs to another queue (read in the caller's transaction). */
  const scoped = (id: string, queue: string | undefined): boolean => queue === undefined || inQueue(s.jobQueue.get(id), queue);

  const cancel = db.transaction((id: string, queue: string | undefined): CancelResult => {
    const now = nowMs();
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
    const queue = s.replayJob.get(nowMs(), id);
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
    const now = nowMs();
    s.deleteKeyIfExpired.run(key, now);
    return s.insertKey.run(key, now + ttlMs).changes === 1;
  });

  const setLimits = db.transaction((queue: string, limits: StoredQueueLimits) => {
    flow.setLimits(queue, limits);
    return signal([queue]);
  });
  const getFlow = db.transaction((queue: string) => flow.get(queue));
  const hold = db.transaction((queue: string, forMs: number, keyOfJob: string | undefined) => {
    if (keyOfJob === undefined) flow.hold(queue, nowMs() + forMs);
    else flow.holdKeyOf(queue, keyOfJob, nowMs() + forMs);
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
 * A flow's store: its jobs through the enqueue transaction (a savepoint inside this one), then
 * their links, all under one IMMEDIATE transaction; a flow with a taken id throws RefusedBatch
 * and stores nothing.
 */
export function flowTransaction(
  db: Database.Database,
  enqueue: Transactions["enqueue"],
  flows: SqliteFlows,
  store: string,
): (nodes: readonly FlowNodeSpec[], childCount: readonly number[]) => Marked<{ results: EnqueueResult[] }> {
  const link = db.transaction((nodes: readonly FlowNodeSpec[], childCount: readonly number[]) => {
    const stored = enqueue(
      nodes.map((n) => n.spec),
      false,
    );
    // Thrown to roll the transaction back: a flow is stored whole or not at all.
    if (flowRefused(stored.results)) throw new RefusedBatch(stored.results);
    flows.link(nodes, childCount);
    return stored;
  });
  const guarded = typedErrors({ link }, store).link;
  return (nodes, childCount) => guarded.immediate(nodes, childCount);
}

function quarantineError(stalls: number): ErrorInfo {
  return {
    name: "LeaseExpiredError",
    message: quarantineMessage(stalls),
    stack: null,
  };
}
