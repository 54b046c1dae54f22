/**
 * What the failover scenarios measure, as pure functions of the evidence (unit-tested in
 * test/chaos/failover-metrics.test.ts):
 *
 * - fault -> first job completed again: the first attempt claimed after the fault (its stored
 *   startedAt) that ended completed, its finishedAt minus the fault's time. A claim after the
 *   fault and its acknowledgement both went through whatever the fault left (a promoted replica,
 *   a moved slot, a replaced worker), so the path is whole again.
 * - throughput around a rollout: completions per second (handlers' `end ok` records) before,
 *   during and after, the lowest one-second bucket during it, and how long after its end the rate
 *   is back to 90 % of the rate before.
 */
import type { FinalJob, RunRecord } from "./records.js";

/** Ms from `at` to the first completion of an attempt that started at or after `at`, or null. */
export function firstCompletionAfter(at: number, final: readonly FinalJob[]): number | null {
  let best: number | null = null;
  for (const job of final) {
    for (const h of job.history) {
      if (h.outcome !== "completed" || h.startedAt < at) continue;
      const ms = h.finishedAt - at;
      if (best === null || ms < best) best = ms;
    }
  }
  return best;
}

/**
 * The faults (by their time from the run's start and their measured first completion) after which
 * no job claimed later completed within `boundMs`: the fleet did not come back, or came back late.
 */
export function stalledAfter<T extends { firstCompletionMs: number | null }>(timings: readonly T[], boundMs: number): T[] {
  return timings.filter((t) => t.firstCompletionMs === null || t.firstCompletionMs > boundMs);
}

export interface ThroughputDip {
  /** Completions per second in the `baselineMs` before the window. */
  beforePerSec: number;
  /** Mean completions per second during the window. */
  duringPerSec: number;
  /** The lowest one-second bucket during the window. */
  minPerSec: number;
  /** From the window's end until a one-second bucket reaches 90 % of `beforePerSec`; 0 when none fell below, null when never. */
  recoveryMs: number | null;
}

export function throughputDip(runs: readonly RunRecord[], window: { from: number; to: number }, baselineMs = 10_000, until = Infinity): ThroughputDip {
  const ends = runs
    .filter((r): r is Extract<RunRecord, { t: "end" }> => r.t === "end" && r.ok)
    .map((r) => r.at)
    .sort((a, b) => a - b);
  const count = (from: number, to: number) => ends.filter((t) => t >= from && t < to).length;
  const beforePerSec = count(window.from - baselineMs, window.from) / (baselineMs / 1000);
  const span = Math.max(1, window.to - window.from);
  const duringPerSec = count(window.from, window.to) / (span / 1000);
  let minPerSec = Infinity;
  for (let t = window.from; t + 1000 <= window.to; t += 1000) minPerSec = Math.min(minPerSec, count(t, t + 1000));
  if (minPerSec === Infinity) minPerSec = duringPerSec;
  const target = 0.9 * beforePerSec;
  let recoveryMs: number | null = null;
  const last = Math.min(until, ends.at(-1) ?? window.to);
  for (let t = window.to - 1000; t + 1000 <= last + 1; t += 250) {
    if (count(t, t + 1000) >= target) {
      recoveryMs = Math.max(0, t + 1000 - window.to);
      break;
    }
  }
  return { beforePerSec, duringPerSec, minPerSec, recoveryMs };
}
