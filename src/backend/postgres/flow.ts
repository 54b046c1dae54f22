/**
 * Flow control on PostgreSQL: how a claim on a queue with limits runs (src/core/flow.ts). In one
 * transaction: lock the queue's flow row (flow-lock.sql; every claimer of the queue queues here,
 * so no two see the same free slot), read the counts the limits need (flow-window.sql,
 * flow-running.sql), size the claim with `claimBudget`, run the ordinary claim statement for
 * that queue with that size (claim.sql with flow_checked), and record the starts
 * (flow-record.sql). Queues without limits never come here: claim.sql alone serves them.
 */
import type { ClaimRequest, ClaimThrottle } from "../contract.js";
import { claimBudget, type StoredQueueLimits } from "../../core/flow.js";
import { textArray } from "./arrays.js";

/** The statements this module runs. */
export type FlowQuery = "flow-lock" | "flow-window" | "flow-running" | "flow-record" | "claim";

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
  now?: number;
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
): Promise<{ rows: Row[]; throttles: ClaimThrottle[] }> {
  const locked = await run<PgFlowRow>("flow-lock", [nowParam, textArray(queues)]);
  const rowOf = new Map(locked.map((row) => [row.queue!, row]));
  const { id, host, pid } = request.worker;
  const rows: Row[] = [];
  const throttles: ClaimThrottle[] = [];
  // Every claim below runs at the locked clock reading, so the starts recorded in the rate
  // window and the jobs' started_at are the same instant.
  const now = locked[0]?.now ?? nowParam;
  const claimFrom = async (queue: string, names: readonly string[], lim: number, checked: boolean) =>
    run<Row>("claim", [now, textArray([queue]), textArray(names), lim, leaseMs, id, host, pid, checked]);

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
    let startsInWindow = 0;
    let oldestStart: number | null = null;
    if (limits.rate !== null) {
      const [window] = await run<{ n: number; oldest: number | null }>("flow-window", [queue, now, limits.rate.durationMs]);
      startsInWindow = window!.n;
      oldestStart = window!.oldest;
    }
    let active = 0;
    const activeByName = new Map<string, number>();
    if (limits.maxRunning !== null || Object.keys(limits.maxRunningPerName).length > 0) {
      for (const { name, n } of await run<{ name: string; n: number }>("flow-running", [queue])) {
        active += n;
        activeByName.set(name, n);
      }
    }
    const budget = claimBudget(
      { now, limits, heldUntil: row.held_until, active, activeByName, startsInWindow, oldestStart },
      remaining,
      request.names,
    );
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
  }
  return { rows, throttles };
}
