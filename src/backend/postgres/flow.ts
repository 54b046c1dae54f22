/**
 * Flow control on PostgreSQL: how a claim on a queue with limits runs (src/core/flow.ts). In one
 * transaction: lock the queue's flow row (flow-lock.sql; every claimer of the queue queues here,
 * so no two see the same free slot), read the counts the limits need (flow-counts.sql: the rate
 * window and the running jobs per name and group, one round trip), size the claim with
 * `claimBudget`, run the ordinary claim statement for that queue with that size (claim-one.sql,
 * the one-queue form of claim.sql, with flow_checked), and record the starts (flow-record.sql).
 * A laned queue (groups, limiter keys) reads its counts, lanes, lane heads and limiter keys'
 * windows in one statement (flow-read-lanes.sql), and claims the picked jobs, records their
 * starts and moves its cursor in another (flow-claim-lanes.sql): BEGIN, lock, read, claim,
 * COMMIT. Every round trip is paid while the queue's flow row is locked, so the claimers of one
 * queue wait for each other's: fewer is faster.
 * A claim of one laned queue first tries without the lock and without a transaction
 * (claimLanedOptimistically): the read, then the claim statement, which locks the row and goes
 * ahead only if no other claim committed since the read (the row's xmin, which every laned claim
 * that starts a job changes). Two round trips, one commit; when another claimer came between it
 * claims nothing and the claim runs under the lock as above (and that queue's next claims do, for
 * a second: OptimisticLanes).
 * Queues without limits never come here: claim.sql (claim-one.sql for one queue) alone serves them.
 */
import type { ClaimRequest, ClaimThrottle } from "../contract.js";
import {
  claimBudget,
  flowSnapshot,
  type ClaimBudget,
  needsRunningCounts,
  pickAcrossLanes,
  throttleAfterStarts,
  type LaneHead,
  type LaneJob,
  type LimiterWindow,
  type StoredQueueLimits,
} from "../../core/flow.js";
import type { JobSpec } from "../../core/job.js";
import { headsPerLane, jobFlowFromColumns, laneOf, lanesToVisit, limiterBucket, limiterBucketPrefix, type JobFlowColumns } from "../../core/job-flow.js";
import { integerArray, textArray } from "./arrays.js";

/** The statements this module runs. */
export type FlowQuery = "flow-lock" | "flow-counts" | "flow-record" | "claim-one" | "flow-read-lanes" | "flow-claim-lanes";

/** Runs one of the backend's statements on the transaction's client. */
export type RunFlowQuery = <R extends object>(name: FlowQuery, values: unknown[]) => Promise<R[]>;

/** A flow_queues row (flow-lock.sql, flow-get.sql). */
export interface PgFlowRow {
  queue?: string;
  rate_max: number | null;
  rate_duration_ms: number | null;
  max_running: number | null;
  max_running_per_name: Record<string, number>;
  held_until: number | null;
  lanes?: boolean;
  lane_cursor?: string | null;
  now?: number;
}

/** A head job of flow-read-lanes.sql. */
interface LaneHeadRow extends JobFlowColumns {
  lane: string;
  id: string;
  name: string;
}

/**
 * A head job as flow-read-lanes.sql sends it: an array, not an object (an object repeats its
 * eight keys for every head, and building it cost the server about 90 µs more per read of 70
 * heads: docs/flow-control.md, "Seventh round").
 */
type LaneHeadArray = [string, string, string, string | null, number | null, string | null, number | null, number | null];

function laneHeadOf([lane, id, name, group_key, group_concurrency, limiter_key, limiter_max, limiter_duration_ms]: LaneHeadArray): LaneHeadRow {
  return { lane, id, name, group_key, group_concurrency, limiter_key, limiter_max, limiter_duration_ms };
}

export function limitsOf(row: PgFlowRow): StoredQueueLimits {
  return {
    rate: row.rate_max !== null && row.rate_duration_ms !== null ? { max: row.rate_max, durationMs: row.rate_duration_ms } : null,
    maxRunning: row.max_running,
    maxRunningPerName: row.max_running_per_name,
  };
}

/**
 * Claims up to `limit` jobs from `queues` (queues the backend believes have limits), obeying
 * each one's limits, inside the caller's transaction. Returns the claimed rows (in no order) and
 * the queues that could start nothing.
 */
export async function claimUnderLimits<Row extends object>(
  run: RunFlowQuery,
  queues: readonly string[],
  request: ClaimRequest,
  limit: number,
  leaseMs: number,
  nowParam: number | null,
  hints?: OptimisticLanes,
  forgets?: WindowForgets,
): Promise<{ rows: Row[]; throttles: ClaimThrottle[]; clockReadAt: number | null }> {
  const locked = await run<PgFlowRow>("flow-lock", [nowParam, textArray(queues)]);
  for (const row of locked) hints?.saw(row.queue!, row.lanes === true);
  const clockReadAt = performance.now();
  const rowOf = new Map(locked.map((row) => [row.queue!, row]));
  const { id, host, pid } = request.worker;
  const rows: Row[] = [];
  const throttles: ClaimThrottle[] = [];
  // Every claim below runs at the locked clock reading, so the starts recorded in the rate
  // window and the jobs' started_at are the same instant: the latest row's, read once every
  // row was locked (flow-lock.sql).
  const now = locked.length === 0 ? nowParam : Math.max(...locked.map((row) => row.now!));
  const claimFrom = async (queue: string, names: readonly string[], lim: number, checked: boolean) =>
    // Several claims make up this one: no marks (starts_at_once NULL), the worker sends them.
    run<Row>("claim-one", [now, textArray([queue]), textArray(names), lim, leaseMs, id, host, pid, checked, null, queue, queue]);

  for (const queue of queues) {
    const remaining = limit - rows.length;
    if (remaining <= 0) break;
    const row = rowOf.get(queue);
    if (row === undefined || now === null) {
      // Its limits went since the backend last looked: an ordinary claim.
      rows.push(...(await claimFrom(queue, request.names, remaining, false)));
      continue;
    }
    const limits = limitsOf(row);
    if (row.lanes === true) {
      const read = (names: readonly string[], total: number) => readLanes(run, queue, now, names, total);
      const first = await read(request.names, remaining);
      if (first.flow?.paused === true) continue;
      const budget = claimBudget(flowSnapshot(now, limits, row.held_until, first.window, first.running), remaining, request.names);
      if (budget.total === 0) {
        throttles.push({ queue, retryInMs: budget.retryInMs });
        continue;
      }
      // A name capped to no room now: its jobs must not take the heads' places (a second read,
      // under the same lock, only then).
      const names = request.names.filter((name) => (budget.perName.get(name) ?? 1) > 0);
      const lanes = names.length === request.names.length ? first : await read(names, budget.total);
      const got = await claimLanes<Row>(run, queue, lanes, now, budget, request, leaseMs, limits.rate !== null, null, forgets);
      rows.push(...got.rows);
      const throttle = laneThrottle(budget, got);
      if (throttle !== null) throttles.push({ queue, retryInMs: throttle.retryInMs });
      continue;
    }
    let window: { n: number; oldest: number | null } | null = null;
    const running: Array<{ name: string; n: number }> = [];
    if (limits.rate !== null || needsRunningCounts(limits)) {
      const counts = await run<{ kind: "window" | "name" | "group"; key: string | null; n: number; oldest: number | null }>("flow-counts", [
        queue,
        now,
        limits.rate?.durationMs ?? null,
        needsRunningCounts(limits),
      ]);
      for (const c of counts) {
        if (c.kind === "window") window = { n: c.n, oldest: c.oldest };
        else if (c.kind === "name") running.push({ name: c.key!, n: c.n });
      }
    }
    const budget = claimBudget(flowSnapshot(now, limits, row.held_until, window, running), remaining, request.names);
    if (budget.total === 0) {
      throttles.push({ queue, retryInMs: budget.retryInMs });
      continue;
    }
    // Jobs of uncapped names together, then each capped name up to its room: within each, claim
    // order holds; across capped names it is by name.
    let taken = 0;
    const uncapped = request.names.filter((name) => !budget.perName.has(name));
    if (uncapped.length > 0) {
      const got = await claimFrom(queue, uncapped, budget.total, true);
      rows.push(...got);
      taken += got.length;
    }
    for (const [name, room] of budget.perName) {
      const lim = Math.min(room, budget.total - taken);
      if (lim <= 0) continue;
      const got = await claimFrom(queue, [name], lim, true);
      rows.push(...got);
      taken += got.length;
    }
    if (limits.rate !== null && taken > 0) await run("flow-record", [queue, now, taken]);
    // It took the rate's last open slot: say when the next one opens (throttleAfterStarts).
    const rateFull = throttleAfterStarts(budget, taken);
    if (rateFull !== null) throttles.push({ queue, retryInMs: rateFull });
  }
  return { rows, throttles, clockReadAt: nowParam === null ? clockReadAt : null };
}

/**
 * A throttle's `retryInMs` as of now rather than as of the database clock reading it was
 * computed from: the rest of the claim's transaction, its commit and the reply all ran after
 * that reading, and a worker counts `retryInMs` from when it hears it (QueueThrottle.note).
 * Reported as computed, every slot would be heard of late by that much and the limit would
 * under-deliver by it on every window. `clockReadAt`: when the reading arrived
 * (performance.now()), null under an injected clock (its time does not move by itself). Never
 * less than 1 ms, like claimBudget.
 */
export function retryInMsFromNow(retryInMs: number | null, clockReadAt: number | null, now = performance.now()): number | null {
  if (retryInMs === null || clockReadAt === null) return retryInMs;
  return Math.max(1, retryInMs - Math.floor(now - clockReadAt));
}

/** The flow row as flow-read-lanes.sql read it, with its version (xmin) and the clock it read at. */
interface LaneFlowRow extends PgFlowRow {
  cursor: string;
  version: string;
  /** The queue is paused: nothing starts (claim.sql checks the same for every other queue). */
  paused: boolean;
  now: number;
}

/** What flow-read-lanes.sql read for one laned queue. */
interface LaneRead {
  /** The queue's flow row, null when it has none. */
  flow: LaneFlowRow | null;
  window: { n: number; oldest: number | null } | null;
  running: Array<{ name: string; n: number }>;
  groupActive: Map<string, number>;
  /** Lanes with waiting jobs, in turn from after the cursor (at most lanesToVisit(total)). */
  lanes: string[];
  /** Head jobs of those lanes and of lane "", in claim order. */
  heads: LaneHeadRow[];
  limiterWindow: Map<string, LimiterWindow>;
  /**
   * The windows counted (the queue's own under its name, each limiter key's bucket), their length
   * in ms, and whether the read counted them exactly (the claim could fill them).
   */
  windows: Array<{ bucket: string; windowMs: number; exact: boolean }>;
}

/**
 * Reads, in one round trip (flow-read-lanes.sql), what a claim of up to `total` jobs of a laned
 * queue needs: its flow row, its rate window and running counts (for its budget), its lanes in
 * turn from after the row's cursor, their head jobs of `names`, and the windows of the limiter
 * keys among them. Read for `total` before the budget is known: claimLanes narrows it to the
 * budget. `now`: the clock to read at (the lock's), or null for the database clock now (the
 * optimistic claim, or an injected clock's reading).
 */
async function readLanes(run: RunFlowQuery, queue: string, now: number | null, names: readonly string[], total: number): Promise<LaneRead> {
  const maxLanes = lanesToVisit(total);
  const prefix = limiterBucketPrefix(queue);
  const [row] = await run<{
    flow: LaneFlowRow | null;
    rate_window: { n: number; oldest: number | null; exact: boolean } | null;
    running: Array<{ kind: "name" | "group"; key: string; n: number }>;
    lanes: string[];
    heads: LaneHeadArray[];
    keys: Array<{ key: string; window_ms: number; n: number; oldest: number | null; exact: boolean; held_until: number | null }>;
  }>("flow-read-lanes", [
    queue,
    now,
    maxLanes,
    textArray(names),
    integerArray(Array.from({ length: maxLanes + 1 }, (_, lanes) => headsPerLane(total, lanes))),
    total,
    prefix,
  ]);
  const read = row!;
  const groupActive = new Map<string, number>();
  const running: Array<{ name: string; n: number }> = [];
  for (const r of read.running) {
    if (r.kind === "name") running.push({ name: r.key, n: r.n });
    else groupActive.set(r.key, r.n);
  }
  const limiterWindow = new Map(read.keys.map((k): [string, LimiterWindow] => [k.key, { n: k.n, oldest: k.oldest, heldUntil: k.held_until }]));
  const windows = read.keys.map((k) => ({ bucket: prefix + k.key, windowMs: k.window_ms, exact: k.exact }));
  const rate = read.flow?.rate_duration_ms ?? null;
  if (read.rate_window !== null && rate !== null) windows.push({ bucket: queue, windowMs: rate, exact: read.rate_window.exact });
  return {
    flow: read.flow,
    window: read.rate_window === null ? null : { n: read.rate_window.n, oldest: read.rate_window.oldest },
    running,
    groupActive,
    lanes: read.lanes,
    heads: read.heads.map(laneHeadOf),
    limiterWindow,
    windows,
  };
}

/** The throttle a laned claim reports: the pick's (a lane's limit), else the rate's when the claim took its last open slot. */
function laneThrottle(
  budget: ClaimBudget,
  got: { rows: readonly unknown[]; throttle: { retryInMs: number | null } | null },
): { retryInMs: number | null } | null {
  if (got.throttle !== null) return got.throttle;
  const rateFull = throttleAfterStarts(budget, got.rows.length);
  return rateFull === null ? null : { retryInMs: rateFull };
}

/**
 * A laned queue's claim of `budget.total` jobs from what readLanes read (for as many or more):
 * its first lanesToVisit(total) lanes, headsPerLane of each, picked round robin under each
 * group's concurrency and each limiter key's rate (pickAcrossLanes), claimed by id with the
 * starts (the queue's rate when `recordQueueRate`, each limiter key's), the windows read
 * forgotten up to now (those `forgets` says are due; every one without it) and the lane cursor
 * recorded in the same statement
 * (flow-claim-lanes.sql). `version`: null under the queue's flow row lock; else the version the
 * unlocked read saw, checked by the statement (no rows back, `stale`, when another claim
 * committed since).
 */
async function claimLanes<Row extends object>(
  run: RunFlowQuery,
  queue: string,
  read: LaneRead,
  now: number,
  budget: ClaimBudget,
  request: ClaimRequest,
  leaseMs: number,
  recordQueueRate: boolean,
  optimistic: { version: string; databaseClock: boolean } | null,
  forgets: WindowForgets | undefined,
): Promise<{ rows: Row[]; throttle: { retryInMs: number | null } | null; stale: boolean }> {
  const total = budget.total;
  const lanes = read.lanes.slice(0, lanesToVisit(total));
  const perLane = headsPerLane(total, lanes.length);
  const byLane = new Map<string, LaneJob<string>[]>([["", []], ...lanes.map((lane): [string, LaneJob<string>[]] => [lane, []])]);
  for (const r of read.heads) {
    const jobs = byLane.get(r.lane);
    if (jobs !== undefined && jobs.length < (r.lane === "" ? total : perLane))
      jobs.push({ ref: r.id, name: r.name, flow: r.lane === "" ? null : jobFlowFromColumns(r) });
  }
  const heads: LaneHead<string>[] = [...byLane].map(([lane, jobs]) => ({ lane, jobs }));
  const pick = pickAcrossLanes(heads, total, budget.perName, { groupActive: read.groupActive, limiterWindow: read.limiterWindow }, now);
  const throttle = pick.throttled ? { retryInMs: pick.retryInMs } : null;
  if (pick.picked.length === 0) return { rows: [], throttle, stale: false };
  const { id, host, pid } = request.worker;
  const forget = forgets === undefined ? read.windows : read.windows.filter((w) => forgets.due(w, now));
  const rows = await run<Row>("flow-claim-lanes", [
    now,
    textArray(pick.picked.map((p) => p.ref)),
    leaseMs,
    id,
    host,
    pid,
    queue,
    textArray(pick.picked.map((p) => (p.flow?.limiter ? limiterBucket(queue, p.flow.limiter.key) : null))),
    recordQueueRate,
    pick.lastLane !== null && pick.lastLane !== "" ? pick.lastLane : null,
    optimistic?.version ?? null,
    optimistic?.databaseClock ?? false,
    textArray(forget.map((w) => w.bucket)),
    integerArray(forget.map((w) => now - w.windowMs)),
  ]);
  // With a version, no row back means the check failed (every picked job still waiting is
  // claimed when it holds; a pick whose jobs all went meanwhile is rare and just claims again).
  const stale = optimistic !== null && rows.length === 0;
  // A stale claim forgot nothing (the statement did nothing); any other one forgot what it was given.
  if (forgets !== undefined && !stale) for (const w of forget) forgets.forgot(w.bucket, now);
  return { rows, throttle, stale };
}

/**
 * Which laned queues a backend claims optimistically (claimLanedOptimistically): the queues
 * seen laned, less those whose last optimistic claim lost to another claimer within
 * CONTENDED_MS (they claim under the lock meanwhile, where claimers take turns instead of
 * reading for nothing).
 */
export class OptimisticLanes {
  private readonly laned = new Set<string>();
  private readonly contendedAt = new Map<string, number>();

  /** Whether to try `queue` without the lock now. */
  tries(queue: string, at = performance.now()): boolean {
    if (!this.laned.has(queue)) return false;
    const contended = this.contendedAt.get(queue);
    if (contended === undefined) return true;
    if (at - contended < CONTENDED_MS) return false;
    this.contendedAt.delete(queue);
    return true;
  }

  /** A claim under the lock found the queue laned (or not). */
  saw(queue: string, laned: boolean): void {
    if (laned) this.laned.add(queue);
    else this.laned.delete(queue);
  }

  /** An optimistic claim of `queue` lost to another claimer. */
  lost(queue: string, at = performance.now()): void {
    this.contendedAt.set(queue, at);
  }
}

/**
 * When a laned claim forgets the starts that left a rate window (flow-claim-lanes.sql, $13/$14),
 * per backend: a window the read counted exactly (the claim could fill it) on every claim, as its
 * count needs; another one once a window length after this backend last did, not on every claim.
 * Such a window's count is flow_counts' stored one, the starts that left it included, an upper
 * bound that leads the pick to the same decisions (windowNeedsExactCount, src/core/flow.ts), so
 * the starts that left it only need forgetting before they pile up: most claims then delete
 * nothing, where each one deleted a row from every window it read (eleven one-row deletes per
 * claim of the flowctl bench; docs/flow-control.md, "Session 14"). The same rule as SQLite's
 * windowsOf, which reads each window's oldest start instead of remembering when it forgot.
 */
export class WindowForgets {
  private readonly lastForgotAt = new Map<string, number>();

  /** Whether a claim at `now` (database ms) forgets window `w`'s starts that left it. */
  due(w: { bucket: string; windowMs: number; exact: boolean }, now: number): boolean {
    if (w.exact) return true;
    const last = this.lastForgotAt.get(w.bucket);
    return last === undefined || now - last >= w.windowMs || now < last;
  }

  forgot(bucket: string, now: number): void {
    // Bounded: many limiter keys (one per tenant, say) must not grow it for ever; forgetting it
    // all only makes each window's next claim forget once more.
    if (this.lastForgotAt.size >= FORGETS_REMEMBERED && !this.lastForgotAt.has(bucket)) this.lastForgotAt.clear();
    this.lastForgotAt.set(bucket, now);
  }
}

/** How many windows' last forget a backend remembers (WindowForgets) before it starts over. */
const FORGETS_REMEMBERED = 10_000;

/** How long a queue whose optimistic claim lost claims under the lock, in ms. */
const CONTENDED_MS = 1_000;

/**
 * A claim of one laned queue in two round trips and no transaction of its own: the read without
 * the lock (flow-read-lanes.sql, which also reads the queue's flow row and its version), the
 * budget and pick, then flow-claim-lanes.sql, which locks the row and claims only if its version
 * is the one read (no other claim committed since: the counts still hold). Null when it cannot
 * say: the queue is not laned (or has no flow row), a capped name would need a second read, or
 * another claim came between (noted in `hints`); the caller then claims under the lock
 * (claimUnderLimits). Each statement runs on its own (`run` outside a transaction).
 */
export async function claimLanedOptimistically<Row extends object>(
  run: RunFlowQuery,
  hints: OptimisticLanes,
  forgets: WindowForgets,
  queue: string,
  request: ClaimRequest,
  limit: number,
  leaseMs: number,
  nowParam: number | null,
): Promise<{ rows: Row[]; throttles: ClaimThrottle[]; clockReadAt: number | null } | null> {
  const read = await readLanes(run, queue, nowParam, request.names, limit);
  const clockReadAt = performance.now();
  const flow = read.flow;
  if (flow === null || flow.lanes !== true) {
    hints.saw(queue, false);
    return null;
  }
  const clock = nowParam === null ? clockReadAt : null;
  if (flow.paused) return { rows: [], throttles: [], clockReadAt: clock };
  const limits = limitsOf(flow);
  const budget = claimBudget(flowSnapshot(flow.now, limits, flow.held_until, read.window, read.running), limit, request.names);
  if (budget.total === 0) return { rows: [], throttles: [{ queue, retryInMs: budget.retryInMs }], clockReadAt: clock };
  if (request.names.some((name) => budget.perName.get(name) === 0)) return null;
  const got = await claimLanes<Row>(
    run,
    queue,
    read,
    flow.now,
    budget,
    request,
    leaseMs,
    limits.rate !== null,
    { version: flow.version, databaseClock: nowParam === null },
    forgets,
  );
  if (got.stale) {
    hints.lost(queue);
    return null;
  }
  const throttle = laneThrottle(budget, got);
  return { rows: got.rows, throttles: throttle === null ? [] : [{ queue, retryInMs: throttle.retryInMs }], clockReadAt: clock };
}

/** enqueue.sql's $16..$21 for a batch none of whose jobs has a group or limiter key. */
export const NO_JOB_FLOW: readonly unknown[] = [null, null, null, null, null, null];

/**
 * enqueue.sql's flow columns ($16..$21: lane, group key and concurrency, limiter key, max and
 * window) for `batch`, element i for job i (NULL elements for a job without a group or limiter
 * key), and the queues of the jobs with one; null when no job of the batch has one (send
 * NO_JOB_FLOW). Keyed jobs are inserted with their lane, so they never enter jobs_claim (lane IS
 * NULL only) and leave no row version behind.
 */
export function jobFlowColumns(batch: readonly JobSpec[]): { columns: readonly unknown[]; queues: ReadonlySet<string> } | null {
  if (!batch.some((spec) => spec.flow !== undefined)) return null;
  const flows = batch.map((spec) => spec.flow ?? null);
  return {
    columns: [
      textArray(flows.map((f) => (f === null ? null : laneOf(f)))),
      textArray(flows.map((f) => f?.group?.key ?? null)),
      integerArray(flows.map((f) => f?.group?.concurrency ?? null)),
      textArray(flows.map((f) => f?.limiter?.key ?? null)),
      integerArray(flows.map((f) => f?.limiter?.max ?? null)),
      integerArray(flows.map((f) => f?.limiter?.durationMs ?? null)),
    ],
    queues: new Set(batch.flatMap((spec) => (spec.flow === undefined ? [] : [spec.queue]))),
  };
}
