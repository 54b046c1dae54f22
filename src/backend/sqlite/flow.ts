/**
 * Flow control on SQLite: the statements behind the limits of src/core/flow.ts, run inside the
 * claim's IMMEDIATE transaction (which holds the file's one write lock, so no other claim can
 * change the counts between reading them and claiming).
 */
import type Database from "better-sqlite3";
import type { ClaimRequest, ClaimThrottle } from "../contract.js";
import {
  claimBudget,
  flowSnapshot,
  throttleAfterStarts,
  type ClaimBudget,
  isUnlimited,
  needsRunningCounts,
  pickAcrossLanes,
  type LaneHead,
  type LaneJob,
  type LimiterWindow,
  type QueueFlow,
  type StoredQueueLimits,
  windowNeedsExactCount,
} from "../../core/flow.js";
import type { JobFlow } from "../../core/job.js";
import { jobFlowFromColumns, laneOf, lanesToVisit, limiterBucket, type JobFlowColumns } from "../../core/job-flow.js";
import type { InsertJob } from "./statements.js";

/** One row of the flow_queues table. */
export interface FlowRow {
  queue: string;
  rate_max: number | null;
  rate_duration_ms: number | null;
  max_running: number | null;
  max_running_per_name: string;
  held_until: number | null;
  /** 1 once the queue has had keyed jobs (group or limiter): its claims take turns across lanes. */
  lanes: number;
  lane_cursor: string | null;
}

/** A rate window's length (ms) and the most starts it allows. */
interface WindowLimit {
  ms: number;
  max: number;
}

/** A waiting keyed job at the head of its lane. */
interface LaneRow extends FlowCandidate, JobFlowColumns {
  name: string;
}

/** The claim-order columns the claim candidates carry. */
export interface FlowCandidate {
  seq: number;
  priority: number;
  run_at: number;
}

type CandidateStatement = Database.Statement<[string, number, string, number], FlowCandidate>;

export class SqliteFlow {
  private readonly s: ReturnType<typeof prepare>;

  constructor(
    db: Database.Database,
    prefix: string,
    /** The backend's own candidate query (one queue, names as a JSON array, in claim order). */
    private readonly claimCandidates: CandidateStatement,
  ) {
    this.s = prepare(db, prefix);
  }

  /** The flow rows of `queues` (usually none: one index probe per queue). */
  rowsAmong(queues: readonly string[]): Map<string, FlowRow> {
    const rows = this.s.rowsAmong.all(JSON.stringify(queues));
    return new Map(rows.map((row) => [row.queue, row]));
  }

  /**
   * The candidates a claim may take from a flow-controlled queue: at most the budget in all,
   * at most each capped name's room of that name, in claim order. A queue that can start none
   * reports when to look again in `throttles`. A rate-limited queue's budget goes into
   * `rateBudgets`, for throttlesAfterClaim.
   */
  candidates(
    row: FlowRow,
    now: number,
    request: ClaimRequest,
    limit: number,
    throttles: ClaimThrottle[],
    rateBudgets: Map<string, ClaimBudget>,
  ): FlowCandidate[] {
    const limits = toLimits(row);
    if (row.lanes === 1) return this.laneCandidates(row, limits, now, request, limit, throttles, rateBudgets);
    const budget = this.budget(row, limits, now, limit, request, needsRunningCounts(limits) ? this.s.running.all(row.queue) : []);
    if (budget.total === 0) {
      throttles.push({ queue: row.queue, retryInMs: budget.retryInMs });
      return [];
    }
    if (budget.rateRoom !== null) rateBudgets.set(row.queue, budget);
    const uncapped = request.names.filter((name) => !budget.perName.has(name));
    const found: FlowCandidate[] = [];
    if (uncapped.length > 0) found.push(...this.claimCandidates.all(row.queue, now, JSON.stringify(uncapped), budget.total));
    for (const [name, room] of budget.perName) {
      if (room > 0) found.push(...this.claimCandidates.all(row.queue, now, JSON.stringify([name]), Math.min(room, budget.total)));
    }
    return found.sort(byClaimOrder).slice(0, budget.total);
  }

  /** The claim budget of a queue, its rate window read first (windowsOf). */
  private budget(row: FlowRow, limits: StoredQueueLimits, now: number, limit: number, request: ClaimRequest, running: Iterable<{ name: string; n: number }>) {
    const rate = limits.rate;
    const window = rate === null ? null : this.windowsOf(new Map([[row.queue, { ms: rate.durationMs, max: rate.max }]]), now, limit).get(row.queue)!;
    return claimBudget(flowSnapshot(now, limits, row.held_until, window, running), limit, request.names);
  }

  /**
   * A laned queue (one with groups or limiter keys): lanes in turn from after the last claim's
   * lane, each lane's head in claim order, picked round robin under each group's concurrency and
   * each limiter key's rate (pickAcrossLanes). The unkeyed jobs form one more lane (lane "").
   *
   * The statements are few and each reads little (docs/flow-control.md, "Fifth round"): the
   * running counts per name and per group in one read of the active rows; the lane walk and
   * every lane's head in one statement, an even share of the claim per lane (more only when the
   * pick runs out of a lane's share: readMoreHeads); then the queue's rate window and the head
   * jobs' limiter windows together (windowsOf). The budget is first taken without the rate, the
   * heads read for it, and narrowed once the rate window is known: the rate only ever lowers it.
   */
  private laneCandidates(
    row: FlowRow,
    limits: StoredQueueLimits,
    now: number,
    request: ClaimRequest,
    limit: number,
    throttles: ClaimThrottle[],
    rateBudgets: Map<string, ClaimBudget>,
  ): FlowCandidate[] {
    const queue = row.queue;
    const groupActive = new Map<string, number>();
    let running: Array<{ name: string; n: number }> = [];
    const countsRead = needsRunningCounts(limits);
    if (countsRead) running = this.runningCounts(queue, groupActive);
    const unrated = claimBudget(flowSnapshot(now, { ...limits, rate: null }, row.held_until, null, running), limit, request.names);
    if (unrated.total === 0) {
      // Held or full of running jobs: as claimBudget says with the rate too (a full rate window's slot time first).
      const budget = limits.rate === null ? unrated : this.budget(row, limits, now, limit, request, running);
      throttles.push({ queue, retryInMs: budget.retryInMs });
      return [];
    }
    const names = JSON.stringify(request.names.filter((name) => (unrated.perName.get(name) ?? 1) > 0));
    const total = unrated.total;
    const lanes = this.s.lanesFrom.all({ queue, cursor: row.lane_cursor ?? "", maxLanes: lanesToVisit(total) });
    const unkeyed = lanes[0] === "";
    if (unkeyed) lanes.shift();
    // An even share of the claim per lane (all of it when four lanes or fewer share it); more
    // only when the pick takes a lane's whole share and still has room (lanesReadWhole).
    const perLane = lanes.length <= 4 ? total : Math.ceil(total / lanes.length);
    const byLane = new Map<string, Array<LaneJob<FlowCandidate>>>([["", []]]);
    const windowLimits = new Map<string, WindowLimit>();
    if (limits.rate !== null) windowLimits.set(queue, { ms: limits.rate.durationMs, max: limits.rate.max });
    let grouped = false;
    const add = (c: LaneRow & { lane: string }): void => {
      const flow = c.lane === "" ? null : jobFlowFromColumns(c);
      if (flow?.group != null) grouped = true;
      if (flow?.limiter != null) {
        // A key's window: the last head's length, as before; the least limit its heads give, for windowNeedsExactCount.
        const bucket = limiterBucket(queue, flow.limiter.key);
        const max = Math.min(flow.limiter.max, windowLimits.get(bucket)?.max ?? Infinity);
        windowLimits.set(bucket, { ms: flow.limiter.durationMs, max });
      }
      let jobs = byLane.get(c.lane);
      if (jobs === undefined) byLane.set(c.lane, (jobs = []));
      jobs.push({ ref: c, name: c.name, flow });
    };
    if (unkeyed) for (const c of this.s.laneHead.all(queue, "", now, names, total)) add({ ...c, lane: "" });
    if (lanes.length > 0) for (const c of this.s.laneHeads.all({ queue, lanes: JSON.stringify(lanes), now, names, perLane })) add(c);
    let groupsRead = countsRead;
    const readGroups = (): void => {
      if (!grouped || groupsRead) return;
      for (const { group_key, n } of this.s.groupRunning.all(queue)) groupActive.set(group_key, n);
      groupsRead = true;
    };
    readGroups();
    const windows = this.windowsOf(windowLimits, now, total);
    const budget = claimBudget(flowSnapshot(now, limits, row.held_until, windows.get(queue) ?? null, running), limit, request.names);
    if (budget.total === 0) {
      throttles.push({ queue, retryInMs: budget.retryInMs });
      return [];
    }
    if (budget.rateRoom !== null) rateBudgets.set(queue, budget);
    const limiterWindow = { get: (key: string) => windows.get(limiterBucket(queue, key)) };
    const heads = (): Array<LaneHead<FlowCandidate>> => [...byLane].map(([lane, jobs]) => ({ lane, jobs }));
    let pick = pickAcrossLanes(heads(), budget.total, budget.perName, { groupActive, limiterWindow }, now);
    // A keyed lane whose share the pick took whole may hold more jobs the claim has room for:
    // read those lanes' heads up to the budget and pick again (the same turns, further on).
    if (pick.picked.length < budget.total) {
      const more = lanesReadWhole(byLane, pick.picked, perLane, budget.total);
      if (more.length > 0) {
        for (const lane of more) byLane.set(lane, []);
        for (const lane of more) for (const c of this.s.laneHead.all(queue, lane, now, names, budget.total)) add({ ...c, lane });
        // New heads may bring limiter keys not read yet, or a group.
        readGroups();
        const missing = new Map([...windowLimits].filter(([bucket]) => !windows.has(bucket)));
        for (const [bucket, w] of this.windowsOf(missing, now, total)) windows.set(bucket, w);
        pick = pickAcrossLanes(heads(), budget.total, budget.perName, { groupActive, limiterWindow }, now);
      }
    }
    if (pick.throttled) throttles.push({ queue, retryInMs: pick.retryInMs });
    if (pick.lastLane !== null && pick.lastLane !== "") this.s.setCursor.run(pick.lastLane, queue);
    return pick.picked.map((job) => job.ref);
  }

  /**
   * Active jobs of the queue per name (returned) and per group (into `groupActive`), in one read
   * of the active rows.
   */
  private runningCounts(queue: string, groupActive: Map<string, number>): Array<{ name: string; n: number }> {
    const byName = new Map<string, number>();
    for (const { name, group_key, n } of this.s.runningByGroup.all(queue)) {
      byName.set(name, (byName.get(name) ?? 0) + n);
      if (group_key !== null) groupActive.set(group_key, (groupActive.get(group_key) ?? 0) + n);
    }
    return [...byName].map(([name, n]) => ({ name, n }));
  }

  /**
   * The rate windows of some buckets (the queue's own, limiter keys': each one's length and the
   * least limit it is held to), for a claim that can start at most `claimSize` jobs. One read gives
   * each one's stored count, oldest stored start and hold (a held key, by RetryLater with pause
   * "key", has a flow row of its own, named by its bucket). A window the claim could fill
   * (windowNeedsExactCount) is counted exactly: the starts that left it are forgotten and counted
   * off in flow_counts, and it is read again. Another one keeps its stored count, an upper bound
   * that leads the claim to the same decisions, and no oldest start; its starts that left it are
   * forgotten once the oldest of them left a whole window ago, all at once. So most claims read
   * their windows and delete nothing, where each one used to delete a row from every window it
   * read and write those pages (docs/flow-control.md, "Session 13").
   */
  private windowsOf(buckets: ReadonlyMap<string, WindowLimit>, now: number, claimSize: number): Map<string, LimiterWindow> {
    const windows = new Map<string, LimiterWindow>();
    if (buckets.size === 0) return windows;
    const cutoffs: Array<[string, number]> = [];
    for (const w of this.s.windowsOf.all(JSON.stringify([...buckets.keys()]))) {
      const { ms, max } = buckets.get(w.bucket)!;
      const oldest = w.n === 0 ? null : w.oldest;
      const exact = windowNeedsExactCount(w.n, claimSize, max);
      if (oldest !== null && oldest <= now - (exact ? ms : 2 * ms)) cutoffs.push([w.bucket, now - ms]);
      else windows.set(w.bucket, { n: w.n, oldest: exact ? oldest : null, heldUntil: w.held_until });
    }
    if (cutoffs.length === 0) return windows;
    const dropped: Record<string, number> = {};
    const forget = JSON.stringify(cutoffs);
    for (const drop of [this.s.dropOldStartsOf, this.s.dropOldRecentStartsOf]) {
      for (const { queue: bucket, n } of drop.all(forget)) dropped[bucket] = (dropped[bucket] ?? 0) - n;
    }
    this.s.countUpOf.run(JSON.stringify(dropped));
    for (const w of this.s.windowsOf.all(JSON.stringify(cutoffs.map(([bucket]) => bucket)))) {
      windows.set(w.bucket, { n: w.n, oldest: w.n === 0 ? null : w.oldest, heldUntil: w.held_until });
    }
    return windows;
  }

  /**
   * A claim that took the last open slot of a queue's rate says when the next one opens
   * (throttleAfterStarts), so workers do not claim the queue again before. `claimed`: the jobs
   * the claim started, of every queue.
   */
  throttlesAfterClaim(rateBudgets: ReadonlyMap<string, ClaimBudget>, claimed: ReadonlyArray<{ queue: string }>, throttles: ClaimThrottle[]): void {
    const started = new Map<string, number>();
    for (const job of claimed) started.set(job.queue, (started.get(job.queue) ?? 0) + 1);
    for (const [queue, budget] of rateBudgets) {
      const retryInMs = throttleAfterStarts(budget, started.get(queue) ?? 0);
      if (retryInMs !== null) throttles.push({ queue, retryInMs });
    }
  }

  /**
   * Stores a job that waits in a lane: one with a group or limiter key (`flow`), or an unkeyed
   * job (`flow` null) of a laned queue, in lane "". The row is written whole, with its lane, in
   * one statement: giving it its lane by an UPDATE after the insert cost a second statement and
   * put the job in jobs_claim for a moment (keyed enqueue CPU about 13 -> 11 ms per 1,000 jobs;
   * docs/flow-control.md, "Sixth round (SQLite)").
   * A keyed job turns its queue's lane path on. Returns 1 when stored, 0 for a duplicate id.
   */
  insertLaned(row: InsertJob, flow: JobFlow | null): number {
    const { changes } = this.s.insertLaned.run(
      ...row,
      flow === null ? "" : laneOf(flow),
      flow?.group?.key ?? null,
      flow?.group?.concurrency ?? null,
      flow?.limiter?.key ?? null,
      flow?.limiter?.max ?? null,
      flow?.limiter?.durationMs ?? null,
    );
    if (changes !== 0 && flow !== null) this.markLaned(row[1]);
    return changes;
  }

  /** Queues among `queues` whose claims take turns across lanes. */
  lanedAmong(queues: readonly string[]): Set<string> {
    const distinct = new Set(queues);
    return new Set(this.s.lanedAmong.all(JSON.stringify([...distinct])));
  }

  /**
   * Turns a queue's lane path on; the first time, its unkeyed jobs that wait or may wait again
   * move to lane "", where lane claims look for them (one pass over the queue's jobs, once).
   */
  private markLaned(queue: string): void {
    if (this.s.markLaned.run(queue).changes === 0) return;
    this.s.backfillUnkeyed.run(queue);
  }

  /**
   * Records the starts of this claim in the rate windows of the rate-limited queues among
   * `flows`, and of every claimed job's limiter key: one row per window with the number of
   * starts (every start of a claim has the same time; 0009_flow_start_counts), in the recent
   * starts table, whose rows move to flow_starts together (RECENT_STARTS_MOVED_AT).
   */
  recordStarts(flows: ReadonlyMap<string, FlowRow>, claimed: ReadonlyArray<{ queue: string }>, now: number): void {
    // Two statements for every window the claim filled (json_each), not two per window.
    const added = new Map<string, number>();
    const add = (bucket: string) => added.set(bucket, (added.get(bucket) ?? 0) + 1);
    for (const job of claimed) {
      const flow = flows.get(job.queue);
      if (flow?.rate_max != null) add(job.queue);
      const key = (job as { limiter_key?: string | null }).limiter_key;
      if (flow?.lanes === 1 && typeof key === "string") add(limiterBucket(job.queue, key));
    }
    if (added.size === 0) return;
    const starts = JSON.stringify(Object.fromEntries(added));
    // The recent table starts its rowids again from 1 once emptied: the last one is how many
    // rows it holds since the last move.
    const { lastInsertRowid } = this.s.addStartsOf.run(now, starts);
    this.s.countUpOf.run(starts);
    if (Number(lastInsertRowid) >= RECENT_STARTS_MOVED_AT) {
      this.s.moveRecentStarts.run();
      this.s.clearRecentStarts.run();
    }
  }

  setLimits(queue: string, limits: StoredQueueLimits): void {
    const rate = limits.rate;
    this.s.upsertLimits.run(queue, rate?.max ?? null, rate?.durationMs ?? null, limits.maxRunning, JSON.stringify(limits.maxRunningPerName));
    // A rate window outlives no rate limit; a new limit starts with the starts still in it.
    if (rate === null) {
      this.s.clearStarts.run(queue);
      this.s.clearRecentStartsOf.run(queue);
      this.s.clearCount.run(queue);
    }
    if (isUnlimited(limits)) this.s.dropIfIdle.run(queue);
  }

  hold(queue: string, until: number): void {
    this.s.hold.run(queue, until);
  }

  /** Holds the limiter key of job `id` (of `queue`) until `until`; false when it has none. */
  holdKeyOf(queue: string, id: string, until: number): boolean {
    const key = this.s.limiterKeyOf.get(id, queue);
    if (key == null) return false;
    this.s.hold.run(limiterBucket(queue, key), until);
    return true;
  }

  get(queue: string): QueueFlow | null {
    const row = this.s.row.get(queue);
    return row === undefined ? null : { limits: toLimits(row), heldUntil: row.held_until };
  }
}

/**
 * How many rows the recent starts table (0014_sqlite_flow_recent_starts) takes before a claim
 * moves them to flow_starts, all at once in window order. Small enough that the table stays a
 * few pages, so a claim's starts of many windows land on one or two of them; large enough that
 * a move writes each window's page of flow_starts_window once for many claims (about 23 claims
 * of ten limiter keys and a rated queue, 256 of a queue's rate alone).
 */
const RECENT_STARTS_MOVED_AT = 256;

/** $1: [[bucket, forget starts at or before this ms], ...]; one index range per bucket of `table`. */
function forgetStartsIn(table: string): string {
  return `DELETE FROM ${table} WHERE rowid IN (
            SELECT s.rowid FROM json_each(?) AS b JOIN ${table} AS s
              ON s.queue = b.value ->> 0 AND s.at <= b.value ->> 1
          ) RETURNING queue, n`;
}

function prepare(db: Database.Database, prefix: string) {
  const flow = `${prefix}flow_queues`;
  const starts = `${prefix}flow_starts`;
  const recent = `${prefix}flow_starts_recent`;
  const jobs = `${prefix}jobs`;
  return {
    rowsAmong: db.prepare<[string], FlowRow>(`SELECT * FROM ${flow} WHERE queue IN (SELECT value FROM json_each(?))`),
    row: db.prepare<[string], FlowRow>(`SELECT * FROM ${flow} WHERE queue = ?`),
    clearCount: db.prepare<[string]>(`DELETE FROM ${prefix}flow_counts WHERE bucket = ?`),
    /* $2: {bucket: starts}. Into the recent table (0014): see RECENT_STARTS_MOVED_AT. */
    addStartsOf: db.prepare<[number, string]>(`INSERT INTO ${recent} (queue, at, n) SELECT key, ?, value FROM json_each(?)`),
    /* In window order, so each window's rows of many claims land together in flow_starts_window. */
    moveRecentStarts: db.prepare<[]>(`INSERT INTO ${starts} (queue, at, n) SELECT queue, at, n FROM ${recent} ORDER BY queue, at`),
    clearRecentStarts: db.prepare<[]>(`DELETE FROM ${recent}`),
    countUpOf: db.prepare<[string]>(
      `INSERT INTO ${prefix}flow_counts (bucket, n) SELECT key, value FROM json_each(?) WHERE true
       ON CONFLICT (bucket) DO UPDATE SET n = n + excluded.n`,
    ),
    dropOldStartsOf: db.prepare<[string], { queue: string; n: number }>(forgetStartsIn(starts)),
    dropOldRecentStartsOf: db.prepare<[string], { queue: string; n: number }>(forgetStartsIn(recent)),
    /* $1: [bucket, ...] */
    windowsOf: db.prepare<[string], { bucket: string; n: number; oldest: number | null; held_until: number | null }>(
      `SELECT b.value AS bucket,
              coalesce((SELECT c.n FROM ${prefix}flow_counts AS c WHERE c.bucket = b.value), 0) AS n,
              (SELECT min(at) FROM (SELECT min(s.at) AS at FROM ${starts} AS s WHERE s.queue = b.value
                                    UNION ALL SELECT min(r.at) FROM ${recent} AS r WHERE r.queue = b.value)) AS oldest,
              (SELECT f.held_until FROM ${flow} AS f WHERE f.queue = b.value) AS held_until
       FROM json_each(?) AS b`,
    ),
    clearStarts: db.prepare<[string]>(`DELETE FROM ${starts} WHERE queue = ?`),
    clearRecentStartsOf: db.prepare<[string]>(`DELETE FROM ${recent} WHERE queue = ?`),
    /* Plan: SEARCH jobs USING INDEX jobs_lease: the active rows, bounded by the fleet's concurrency */
    running: db.prepare<[string], { name: string; n: number }>(`SELECT name, count(*) AS n FROM ${jobs} WHERE queue = ? AND state = 'active' GROUP BY name`),
    upsertLimits: db.prepare<[string, number | null, number | null, number | null, string]>(
      `INSERT INTO ${flow} (queue, rate_max, rate_duration_ms, max_running, max_running_per_name) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (queue) DO UPDATE SET rate_max = excluded.rate_max, rate_duration_ms = excluded.rate_duration_ms,
         max_running = excluded.max_running, max_running_per_name = excluded.max_running_per_name`,
    ),
    // No limits, no hold, no keyed jobs: the row goes, and the queue's claims take the plain path again.
    dropIfIdle: db.prepare<[string]>(`DELETE FROM ${flow} WHERE queue = ? AND held_until IS NULL AND lanes = 0`),
    /*
     * Up to maxLanes lanes with waiting or scheduled jobs, in turn from after the cursor: the
     * lanes after it in lane order, then (wrapping round) the first ones up to the cursor itself.
     * A skip scan over jobs_lanes (one index probe per lane, however many jobs each holds) in one
     * statement. Lane '' (the unkeyed jobs) comes first when it holds any, and does not count
     * toward @maxLanes.
     *
     * One chain of probes: from a lane after the cursor the next probe is unbounded, and when it
     * finds none the walk wraps round ('' marks the wrap: no keyed lane is named '', and "after
     * ''" is the first lane); from a lane at or before the cursor it stops at the cursor. `n`
     * counts the keyed lanes before each row. (Two walks, one after the cursor and one wrapped
     * that counted the first, cost 1.8x the CPU: docs/flow-control.md, "Sixth round (SQLite)".)
     */
    lanesFrom: db
      .prepare<[{ queue: string; cursor: string; maxLanes: number }], string>(
        `WITH RECURSIVE walk (lane, n) AS (
           SELECT coalesce((SELECT lane FROM ${jobs} WHERE queue = @queue AND lane > @cursor AND state IN ('waiting', 'scheduled') ORDER BY lane LIMIT 1), ''), 0
           UNION ALL
           SELECT CASE
                    WHEN w.lane > @cursor THEN coalesce((SELECT lane FROM ${jobs} WHERE queue = @queue AND lane > w.lane AND state IN ('waiting', 'scheduled') ORDER BY lane LIMIT 1), '')
                    ELSE (SELECT lane FROM ${jobs} WHERE queue = @queue AND lane > w.lane AND lane <= @cursor AND state IN ('waiting', 'scheduled') ORDER BY lane LIMIT 1)
                  END,
                  w.n + (w.lane <> '')
           FROM walk AS w WHERE w.lane IS NOT NULL AND w.n < @maxLanes
         )
         SELECT '' AS lane, -1 AS n
         WHERE EXISTS (SELECT 1 FROM ${jobs} WHERE queue = @queue AND lane = '' AND state IN ('waiting', 'scheduled'))
         UNION ALL
         SELECT lane, n FROM walk WHERE lane <> '' AND n < @maxLanes
         ORDER BY n`,
      )
      .pluck(),
    /* Plan: SEARCH jobs USING INDEX jobs_lanes (queue=? AND lane=?) */
    laneHead: db.prepare<[string, string, number, string, number], LaneRow>(
      `SELECT seq, priority, run_at, name, group_key, group_concurrency, limiter_key, limiter_max, limiter_duration_ms
       FROM ${jobs}
       WHERE queue = ? AND lane = ? AND state IN ('waiting', 'scheduled') AND run_at <= ?
         AND name IN (SELECT value FROM json_each(?))
       ORDER BY priority, run_at, seq
       LIMIT ?`,
    ),
    /*
     * laneHead for every lane of @lanes (a JSON array) in one statement: at most @perLane jobs of
     * each, lane by lane, in claim order within each. Each lane is its own range of jobs_lanes:
     * the IN subquery is evaluated once per lane.
     */
    laneHeads: db.prepare<[{ queue: string; lanes: string; now: number; names: string; perLane: number }], LaneRow & { lane: string }>(
      `SELECT j.lane, j.seq, j.priority, j.run_at, j.name, j.group_key, j.group_concurrency, j.limiter_key, j.limiter_max, j.limiter_duration_ms
       FROM json_each(@lanes) AS l
       JOIN ${jobs} AS j ON j.seq IN (
         SELECT h.seq FROM ${jobs} AS h
         WHERE h.queue = @queue AND h.lane = l.value AND h.state IN ('waiting', 'scheduled') AND h.run_at <= @now
           AND h.name IN (SELECT value FROM json_each(@names))
         ORDER BY h.priority, h.run_at, h.seq
         LIMIT @perLane
       )
       ORDER BY l.key, j.priority, j.run_at, j.seq`,
    ),
    lanedAmong: db.prepare<[string], string>(`SELECT queue FROM ${flow} WHERE lanes = 1 AND queue IN (SELECT value FROM json_each(?))`).pluck(),
    // Every job of the queue that waits or may wait again: a running job comes back by a retry,
    // a release or a rescue, a dead one by a replay, a parent when its children settle; with
    // lane NULL none of them would be seen by a lane claim again. Finished ones never wait again.
    backfillUnkeyed: db.prepare<[string]>(`UPDATE ${jobs} SET lane = '' WHERE queue = ? AND lane IS NULL AND state NOT IN ('completed', 'cancelled')`),
    /* Plan: SCAN jobs USING INDEX jobs_lease: the active rows, as running; no index of its own (0010) */
    groupRunning: db.prepare<[string], { group_key: string; n: number }>(
      `SELECT group_key, count(*) AS n FROM ${jobs} WHERE queue = ? AND state = 'active' AND group_key IS NOT NULL GROUP BY group_key`,
    ),
    /* running and groupRunning in one read of the active rows */
    runningByGroup: db.prepare<[string], { name: string; group_key: string | null; n: number }>(
      `SELECT name, group_key, count(*) AS n FROM ${jobs} WHERE queue = ? AND state = 'active' GROUP BY name, group_key`,
    ),
    limiterKeyOf: db.prepare<[string, string], string | null>(`SELECT limiter_key FROM ${jobs} WHERE id = ? AND queue = ?`).pluck(),
    setCursor: db.prepare<[string, string]>(`UPDATE ${flow} SET lane_cursor = ? WHERE queue = ?`),
    /* enqueue.sql's columns and parameters, then the lane and the flow columns (insertLaned) */
    insertLaned: db.prepare<[...InsertJob, string, string | null, number | null, string | null, number | null, number | null]>(
      `INSERT INTO ${jobs} (id, queue, name, payload, meta, state, priority, run_at, created_at, max_attempts,
                            backoff, timeout_ms, retain_completed_ms, retain_dead_ms,
                            lane, group_key, group_concurrency, limiter_key, limiter_max, limiter_duration_ms)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (id) DO NOTHING`,
    ),
    // Changes a row only when the queue was not laned yet (the caller then backfills).
    markLaned: db.prepare<[string]>(`INSERT INTO ${flow} (queue, lanes) VALUES (?, 1) ON CONFLICT (queue) DO UPDATE SET lanes = 1 WHERE lanes = 0`),
    hold: db.prepare<[string, number]>(
      `INSERT INTO ${flow} (queue, held_until) VALUES (?, ?)
       ON CONFLICT (queue) DO UPDATE SET held_until = max(coalesce(held_until, 0), excluded.held_until)`,
    ),
  };
}

function toLimits(row: FlowRow): StoredQueueLimits {
  return {
    rate: row.rate_max !== null && row.rate_duration_ms !== null ? { max: row.rate_max, durationMs: row.rate_duration_ms } : null,
    maxRunning: row.max_running,
    maxRunningPerName: JSON.parse(row.max_running_per_name) as Record<string, number>,
  };
}

/** Keyed lanes whose whole share (`perLane` heads) the pick took: they may hold more jobs. */
function lanesReadWhole(
  byLane: ReadonlyMap<string, ReadonlyArray<LaneJob<FlowCandidate>>>,
  picked: ReadonlyArray<LaneJob<FlowCandidate>>,
  perLane: number,
  total: number,
): string[] {
  if (perLane >= total) return [];
  const taken = new Map<string, number>();
  for (const job of picked) {
    const lane = (job.ref as FlowCandidate & { lane: string }).lane;
    taken.set(lane, (taken.get(lane) ?? 0) + 1);
  }
  return [...byLane].filter(([lane, jobs]) => lane !== "" && jobs.length >= perLane && taken.get(lane) === jobs.length).map(([lane]) => lane);
}

function byClaimOrder(a: FlowCandidate, b: FlowCandidate): number {
  return a.priority - b.priority || a.run_at - b.run_at || a.seq - b.seq;
}
