/**
 * The desired-workers formula replayed against a recorded load curve (test/fixtures/
 * load-curve.json): a simulated queue, workers that take one interval to start, and the formula
 * evaluated every 15 s as KEDA would. It must scale out while the oldest job is over target,
 * scale in only once the age is well under target, and not flap.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { desiredWorkers, type ScalingPolicy } from "../../src/observability/autoscale.js";

const curve = JSON.parse(readFileSync(new URL("../fixtures/load-curve.json", import.meta.url), "utf8")) as { intervalSeconds: number; arrivals: number[] };

interface Tick {
  t: number;
  workers: number;
  backlog: number;
  oldestAgeSeconds: number;
  /** Jobs running: the busy fraction of the interval times the fleet's slots. */
  activeJobs: number;
  desired: number;
}

const SLOTS = 10;

/**
 * Replays the curve. Each worker finishes `perWorker` jobs per second; jobs arrive spread evenly
 * over their interval; a scale-out takes effect one interval later (pods starting), a scale-in at once.
 */
function replay(rule: (k: Omit<Tick, "desired">) => number, perWorker: number, startWorkers: number): Tick[] {
  const dt = curve.intervalSeconds;
  // FIFO of [arrival time, count] batches.
  const queue: Array<{ at: number; n: number }> = [];
  let workers = startWorkers;
  let pending: number | null = null;
  const ticks: Tick[] = [];
  curve.arrivals.forEach((arrivals, i) => {
    const t = i * dt;
    // Arrivals of this interval, in 15 slices.
    for (let s = 0; s < dt; s++) queue.push({ at: t + s, n: arrivals / dt });
    // Work done during the interval, oldest first.
    const full = workers * perWorker * dt;
    let capacity = full;
    while (capacity > 0 && queue.length > 0) {
      const head = queue[0]!;
      const take = Math.min(head.n, capacity);
      head.n -= take;
      capacity -= take;
      if (head.n <= 1e-9) queue.shift();
    }
    const activeJobs = full > 0 ? ((full - capacity) / full) * workers * SLOTS : 0;
    if (pending !== null) {
      workers = pending;
      pending = null;
    }
    const now = t + dt;
    const backlog = Math.round(queue.reduce((sum, b) => sum + b.n, 0));
    const oldestAgeSeconds = queue.length > 0 ? now - queue[0]!.at : 0;
    const desired = rule({ t: now, workers, backlog, oldestAgeSeconds, activeJobs });
    ticks.push({ t: now, workers, backlog, oldestAgeSeconds, activeJobs, desired });
    if (desired > workers) pending = desired;
    else workers = desired;
  });
  return ticks;
}

/** How often the direction of change flips (out then in, or in then out). */
function reversals(ticks: Tick[]): number {
  let last = 0;
  let flips = 0;
  for (const k of ticks) {
    const dir = Math.sign(k.desired - k.workers);
    if (dir === 0) continue;
    if (last !== 0 && dir !== last) flips++;
    last = dir;
  }
  return flips;
}

const policy: ScalingPolicy = { targetAgeSeconds: 30, jobsPerSecondPerWorker: 2, slotsPerWorker: SLOTS, minWorkers: 1, maxWorkers: 40 };

describe("desiredWorkers", () => {
  const ticks = replay(
    (k) => desiredWorkers(policy, { backlog: k.backlog, oldestAgeSeconds: k.oldestAgeSeconds, activeJobs: k.activeJobs, currentWorkers: k.workers }),
    2,
    1,
  );

  it("scales out whenever the oldest job is over target (below the maximum)", () => {
    const lagging = ticks.filter((k) => k.oldestAgeSeconds > policy.targetAgeSeconds);
    expect(lagging.length).toBeGreaterThan(0); // the burst does cause lag
    for (const k of lagging) if (k.workers < policy.maxWorkers!) expect(k.desired, `at t=${k.t}`).toBeGreaterThan(k.workers);
    // And the lag is brought back under control: never far beyond the target.
    expect(Math.max(...ticks.map((k) => k.oldestAgeSeconds))).toBeLessThan(3 * policy.targetAgeSeconds);
  });

  it("scales in only while the oldest age is under half the target", () => {
    const scaleIns = ticks.filter((k) => k.desired < k.workers);
    expect(scaleIns.length).toBeGreaterThan(0); // it does come back in after the burst and at night
    for (const k of scaleIns) expect(k.oldestAgeSeconds, `at t=${k.t}`).toBeLessThan(0.5 * policy.targetAgeSeconds);
  });

  it("does not flap: a handful of direction changes over the hour, steady on the plateau", () => {
    // Phases of the curve: ramp up, burst, back down, dip, recovery, night.
    expect(reversals(ticks)).toBeLessThanOrEqual(8);
    // On the plateau (t = 31-37 min, once the burst's extra workers have stepped back in), the
    // fleet holds within one worker.
    const plateau = ticks.filter((k) => k.t >= 31 * 60 && k.t < 37 * 60).map((k) => k.workers);
    expect(Math.max(...plateau) - Math.min(...plateau)).toBeLessThanOrEqual(1);
    // And returns to the minimum once the night comes.
    expect(ticks.at(-1)!.workers).toBe(policy.minWorkers);
  });

  it("a formula without the dead band (scale to what the backlog needs) flaps on the same curve", () => {
    // The same replay with the naive rule: the busy workers plus the backlog's, in and out at once.
    const flapping = replay((k) => Math.max(1, Math.ceil(k.activeJobs / SLOTS) + Math.ceil(k.backlog / (2 * policy.targetAgeSeconds))), 2, 1);
    expect(reversals(flapping)).toBeGreaterThan(2 * reversals(ticks));
  });

  it("edge cases: no backlog scales to the minimum; waiting work gets at least one worker; bounds hold", () => {
    expect(desiredWorkers({ targetAgeSeconds: 30, jobsPerSecondPerWorker: 1 }, { backlog: 0, oldestAgeSeconds: 0, activeJobs: 0, currentWorkers: 3 })).toBe(2);
    expect(desiredWorkers({ targetAgeSeconds: 30, jobsPerSecondPerWorker: 1 }, { backlog: 0, oldestAgeSeconds: 0, activeJobs: 0, currentWorkers: 0 })).toBe(0);
    expect(desiredWorkers({ targetAgeSeconds: 30, jobsPerSecondPerWorker: 100 }, { backlog: 1, oldestAgeSeconds: 1, activeJobs: 0, currentWorkers: 0 })).toBe(
      1,
    );
    expect(
      desiredWorkers(
        { targetAgeSeconds: 30, jobsPerSecondPerWorker: 1, maxWorkers: 5 },
        { backlog: 10_000, oldestAgeSeconds: 900, activeJobs: 50, currentWorkers: 5 },
      ),
    ).toBe(5);
    // Lagging although the figures say the fleet suffices (a stuck or slow job): out by one anyway.
    expect(desiredWorkers({ targetAgeSeconds: 30, jobsPerSecondPerWorker: 1 }, { backlog: 1, oldestAgeSeconds: 100, activeJobs: 0, currentWorkers: 3 })).toBe(
      4,
    );
    // The dead band: age between half the target and the target holds the fleet.
    expect(desiredWorkers({ targetAgeSeconds: 30, jobsPerSecondPerWorker: 1 }, { backlog: 10, oldestAgeSeconds: 20, activeJobs: 10, currentWorkers: 4 })).toBe(
      4,
    );
    // Calm but busy: never in below the busy workers plus headroom (36 running / 10 slots × 1.2 → 5).
    expect(desiredWorkers({ targetAgeSeconds: 30, jobsPerSecondPerWorker: 1 }, { backlog: 0, oldestAgeSeconds: 0, activeJobs: 36, currentWorkers: 5 })).toBe(5);
    expect(() =>
      desiredWorkers({ targetAgeSeconds: 0, jobsPerSecondPerWorker: 1 }, { backlog: 1, oldestAgeSeconds: 1, activeJobs: 0, currentWorkers: 1 }),
    ).toThrow(/targetAgeSeconds must be a positive number/);
    expect(() =>
      desiredWorkers(
        { targetAgeSeconds: 1, jobsPerSecondPerWorker: 1, scaleInBelow: 1 },
        { backlog: 1, oldestAgeSeconds: 1, activeJobs: 0, currentWorkers: 1 },
      ),
    ).toThrow(/scaleInBelow must be between 0 and 1/);
  });
});
