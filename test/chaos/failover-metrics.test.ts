/**
 * The failover measurements (chaos/failover-metrics.ts) on planted evidence: a measurement that
 * cannot come out wrong proves nothing.
 */
import { describe, expect, it } from "vitest";
import { firstCompletionAfter, stalledAfter, throughputDip } from "../../chaos/failover-metrics.js";
import type { FinalJob, HistoryEntry, RunRecord } from "../../chaos/records.js";

const job = (id: string, history: Array<Partial<HistoryEntry>>): FinalJob => ({
  id,
  name: "work",
  state: "completed",
  attempt: history.length,
  maxAttempts: 10,
  result: null,
  error: null,
  history: history.map((h, i) => ({ attempt: i + 1, pid: 1, startedAt: 0, finishedAt: 0, outcome: "completed", ...h })),
});

describe("firstCompletionAfter", () => {
  it("counts only attempts claimed after the fault that completed", () => {
    const final = [
      // Claimed before the fault, acknowledged after it: not proof the claim path is back.
      job("a", [{ startedAt: 900, finishedAt: 1_100 }]),
      // Claimed after it but failed, then completed later.
      job("b", [
        { startedAt: 1_200, finishedAt: 1_300, outcome: "lease-expired" },
        { startedAt: 2_000, finishedAt: 2_500 },
      ]),
      job("c", [{ startedAt: 1_800, finishedAt: 2_200 }]),
    ];
    expect(firstCompletionAfter(1_000, final)).toBe(1_200);
    expect(firstCompletionAfter(3_000, final)).toBeNull();
  });
});

const ends = (times: number[]): RunRecord[] => times.map((at, i) => ({ t: "end", id: `j${i}`, attempt: 1, token: 1, pid: 1, wpid: 1, at, ok: true }));

describe("stalledAfter", () => {
  it("names the faults never or too late followed by a completed job", () => {
    const timings = [
      { kind: "failover", firstCompletionMs: 2_400 },
      { kind: "failover", firstCompletionMs: null },
      { kind: "reshard", firstCompletionMs: 30_000 },
      { kind: "failover", firstCompletionMs: 270_000 },
    ];
    expect(stalledAfter(timings, 30_000)).toEqual([timings[1], timings[3]]);
    expect(stalledAfter(timings.slice(0, 1), 30_000)).toEqual([]);
  });
});

describe("throughputDip", () => {
  it("measures the rate before, during, the lowest second and the recovery", () => {
    const times: number[] = [];
    // 10 per second for 10 s before the rollout (0-10 s), 2 per second during it (10-14 s),
    // 5 per second for 2 s after it, then 10 per second again.
    for (let t = 0; t < 10_000; t += 100) times.push(t);
    for (let t = 10_000; t < 14_000; t += 500) times.push(t);
    for (let t = 14_000; t < 16_000; t += 200) times.push(t);
    for (let t = 16_000; t < 20_000; t += 100) times.push(t);
    const dip = throughputDip(ends(times), { from: 10_000, to: 14_000 });
    expect(dip.beforePerSec).toBe(10);
    expect(dip.duringPerSec).toBe(2);
    expect(dip.minPerSec).toBe(2);
    // Back to 9 per second (90 %) in the second ending at 17 s at the latest: 2-3 s after the end.
    expect(dip.recoveryMs).toBeGreaterThanOrEqual(2_000);
    expect(dip.recoveryMs).toBeLessThanOrEqual(3_000);
  });

  it("says never when the rate does not come back, and ignores failed runs", () => {
    const times: number[] = [];
    for (let t = 0; t < 10_000; t += 100) times.push(t);
    for (let t = 10_000; t < 20_000; t += 1_000) times.push(t);
    const failed: RunRecord[] = Array.from({ length: 50 }, (_, i) => ({
      t: "end",
      id: `f${i}`,
      attempt: 1,
      token: 1,
      pid: 1,
      wpid: 1,
      at: 12_000 + i,
      ok: false,
    }));
    const dip = throughputDip([...ends(times), ...failed], { from: 10_000, to: 12_000 });
    expect(dip.minPerSec).toBe(1);
    expect(dip.recoveryMs).toBeNull();
  });
});
