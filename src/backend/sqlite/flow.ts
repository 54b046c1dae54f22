/**
 * Flow control on SQLite: the statements behind the limits of src/core/flow.ts, run inside the
 * claim's IMMEDIATE transaction (which holds the file's one write lock, so no other claim can
 * change the counts between reading them and claiming).
 */
import type Database from "better-sqlite3";
import type { ClaimRequest, ClaimThrottle } from "../contract.js";
import { claimBudget, isUnlimited, type QueueFlow, type StoredQueueLimits } from "../../core/flow.js";

/** One row of the flow_queues table. */
export interface FlowRow {
  queue: string;
  rate_max: number | null;
  rate_duration_ms: number | null;
  max_running: number | null;
  max_running_per_name: string;
  held_until: number | null;
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
   * reports when to look again in `throttles`.
   */
  candidates(row: FlowRow, now: number, request: ClaimRequest, limit: number, throttles: ClaimThrottle[]): FlowCandidate[] {
    const limits = toLimits(row);
    let startsInWindow = 0;
    let oldestStart: number | null = null;
    if (limits.rate !== null) {
      this.s.dropOldStarts.run(row.queue, now - limits.rate.durationMs);
      const window = this.s.window.get(row.queue)!;
      startsInWindow = window.n;
      oldestStart = window.oldest;
    }
    let active = 0;
    const activeByName = new Map<string, number>();
    if (limits.maxRunning !== null || Object.keys(limits.maxRunningPerName).length > 0) {
      for (const { name, n } of this.s.running.all(row.queue)) {
        active += n;
        activeByName.set(name, n);
      }
    }
    const budget = claimBudget(
      { now, limits, heldUntil: row.held_until, active, activeByName, startsInWindow, oldestStart },
      limit,
      request.names,
    );
    if (budget.total === 0) {
      throttles.push({ queue: row.queue, retryInMs: budget.retryInMs });
      return [];
    }
    const uncapped = request.names.filter((name) => !budget.perName.has(name));
    const found: FlowCandidate[] = [];
    if (uncapped.length > 0) found.push(...this.claimCandidates.all(row.queue, now, JSON.stringify(uncapped), budget.total));
    for (const [name, room] of budget.perName) {
      if (room > 0) found.push(...this.claimCandidates.all(row.queue, now, JSON.stringify([name]), Math.min(room, budget.total)));
    }
    return found.sort(byClaimOrder).slice(0, budget.total);
  }

  /** Records the starts of this claim in the rate windows of the rate-limited queues among `flows`. */
  recordStarts(flows: ReadonlyMap<string, FlowRow>, claimed: ReadonlyArray<{ queue: string }>, now: number): void {
    for (const job of claimed) {
      if (flows.get(job.queue)?.rate_max != null) this.s.addStart.run(job.queue, now);
    }
  }

  setLimits(queue: string, limits: StoredQueueLimits): void {
    const rate = limits.rate;
    this.s.upsertLimits.run(queue, rate?.max ?? null, rate?.durationMs ?? null, limits.maxRunning, JSON.stringify(limits.maxRunningPerName));
    // A rate window outlives no rate limit; a new limit starts with the starts still in it.
    if (rate === null) this.s.clearStarts.run(queue);
    if (isUnlimited(limits)) this.s.dropIfIdle.run(queue);
  }

  hold(queue: string, until: number): void {
    this.s.hold.run(queue, until);
  }

  get(queue: string): QueueFlow | null {
    const row = this.s.row.get(queue);
    return row === undefined ? null : { limits: toLimits(row), heldUntil: row.held_until };
  }
}

function prepare(db: Database.Database, prefix: string) {
  const flow = `${prefix}flow_queues`;
  const starts = `${prefix}flow_starts`;
  const jobs = `${prefix}jobs`;
  return {
    rowsAmong: db.prepare<[string], FlowRow>(`SELECT * FROM ${flow} WHERE queue IN (SELECT value FROM json_each(?))`),
    row: db.prepare<[string], FlowRow>(`SELECT * FROM ${flow} WHERE queue = ?`),
    /* Plan: SEARCH flow_starts USING COVERING INDEX flow_starts_window (queue=? AND at<?) */
    dropOldStarts: db.prepare<[string, number]>(`DELETE FROM ${starts} WHERE queue = ? AND at <= ?`),
    window: db.prepare<[string], { n: number; oldest: number | null }>(
      `SELECT count(*) AS n, min(at) AS oldest FROM ${starts} WHERE queue = ?`,
    ),
    addStart: db.prepare<[string, number]>(`INSERT INTO ${starts} (queue, at) VALUES (?, ?)`),
    clearStarts: db.prepare<[string]>(`DELETE FROM ${starts} WHERE queue = ?`),
    /* Plan: SEARCH jobs USING COVERING INDEX jobs_running (queue=?) */
    running: db.prepare<[string], { name: string; n: number }>(
      `SELECT name, count(*) AS n FROM ${jobs} WHERE queue = ? AND state = 'active' GROUP BY name`,
    ),
    upsertLimits: db.prepare<[string, number | null, number | null, number | null, string]>(
      `INSERT INTO ${flow} (queue, rate_max, rate_duration_ms, max_running, max_running_per_name) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (queue) DO UPDATE SET rate_max = excluded.rate_max, rate_duration_ms = excluded.rate_duration_ms,
         max_running = excluded.max_running, max_running_per_name = excluded.max_running_per_name`,
    ),
    // No limits and no hold: the row goes, and the queue's claims take the plain path again.
    dropIfIdle: db.prepare<[string]>(`DELETE FROM ${flow} WHERE queue = ? AND held_until IS NULL`),
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

function byClaimOrder(a: FlowCandidate, b: FlowCandidate): number {
  return a.priority - b.priority || a.run_at - b.run_at || a.seq - b.seq;
}
