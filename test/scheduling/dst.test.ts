/**
 * Daylight saving time: a schedule's ticks across spring-forward and fall-back in three time
 * zones, with a FakeClock stepped through the transition and the scheduler pass every worker
 * runs. The rules (croner's, as Vixie cron's; docs/scheduling.md):
 * - a fixed time that does not exist (spring forward) fires once, at the first valid time after
 *   the gap, on the same day;
 * - a fixed time that occurs twice (fall back) fires once, at its first occurrence;
 * - an interval pattern skips wall times in the gap and fires on both occurrences of a repeated
 *   hour, so it keeps its real-time rhythm.
 */
import { afterEach, describe, expect, it } from "vitest";
import { FakeClock } from "../../src/core/clock.js";
import { tickMetaOf } from "../../src/core/schedule.js";
import { fireDueSchedules } from "../../src/maintenance/scheduler.js";
import { Queue } from "../../src/producer/queue.js";
import { createTestBackend } from "../../src/testing/index.js";
import type { SqliteBackend } from "../../src/backend/sqlite/backend.js";

const MINUTE = 60_000;
let backend: SqliteBackend | undefined;
afterEach(async () => {
  await backend?.close();
  backend = undefined;
});

/**
 * Creates the schedule at `from`, then moves the clock in `stepMs` steps to `until`, running a
 * scheduler pass at each step; returns the fired ticks (UTC ISO) and checks none fired late.
 */
async function ticksBetween(cron: string, tz: string, from: string, until: string, stepMs = 15 * MINUTE): Promise<string[]> {
  const clock = new FakeClock(Date.parse(from));
  backend = createTestBackend({ clock });
  const queue = new Queue("dst", { backend });
  await queue.schedule("s", { cron, tz, name: "tick", misfire: "all" });
  const end = Date.parse(until);
  const firedAt = new Map<string, number>();
  while (clock.now() < end) {
    clock.advance(stepMs);
    for (const f of (await fireDueSchedules(backend)).fired) for (const j of f.jobs) firedAt.set(j.id, clock.now());
  }
  const jobs = await backend.list({ queue: "dst" }, { limit: 1000 });
  const ticks = jobs.map((j) => ({ id: j.id, tick: tickMetaOf(j)!.tick })).sort((a, b) => (a.tick < b.tick ? -1 : 1));
  for (const { id, tick } of ticks) {
    // Fired at the first pass at or after its tick: never early, never more than one step late.
    const at = firedAt.get(id)!;
    expect(at).toBeGreaterThanOrEqual(Date.parse(tick));
    expect(at - Date.parse(tick)).toBeLessThan(stepMs);
  }
  expect(new Set(ticks.map((t) => t.tick)).size).toBe(ticks.length);
  return ticks.map((t) => t.tick);
}

describe("DST: Europe/Berlin (CET/CEST; 2030-03-31 02:00 -> 03:00, 2030-10-27 03:00 -> 02:00)", () => {
  it("spring forward: 02:30 daily does not exist on the 31st and fires once at 03:00 CEST, then at 02:30 again", async () => {
    expect(await ticksBetween("30 2 * * *", "Europe/Berlin", "2030-03-30T00:00:00Z", "2030-04-01T12:00:00Z")).toEqual([
      "2030-03-30T01:30:00.000Z", // 02:30 CET
      "2030-03-31T01:00:00.000Z", // 03:00 CEST, the first valid time after the gap
      "2030-04-01T00:30:00.000Z", // 02:30 CEST
    ]);
  });

  it("fall back: 02:30 daily occurs twice on the 27th and fires once, at the first (CEST)", async () => {
    expect(await ticksBetween("30 2 * * *", "Europe/Berlin", "2030-10-26T00:00:00Z", "2030-10-28T12:00:00Z")).toEqual([
      "2030-10-26T00:30:00.000Z",
      "2030-10-27T00:30:00.000Z", // 02:30 CEST; 02:30 CET an hour later does not fire
      "2030-10-28T01:30:00.000Z", // 02:30 CET
    ]);
  });

  it("fall back: an hourly pattern fires on both 02:30s, 25 times on the long day", async () => {
    const ticks = await ticksBetween("30 * * * *", "Europe/Berlin", "2030-10-26T22:00:00Z", "2030-10-27T23:00:00Z");
    expect(ticks.filter((t) => t.startsWith("2030-10-26T22") || t.startsWith("2030-10-26T23") || t.startsWith("2030-10-27"))).toHaveLength(25);
    expect(ticks).toContain("2030-10-27T00:30:00.000Z"); // 02:30 CEST
    expect(ticks).toContain("2030-10-27T01:30:00.000Z"); // 02:30 CET
  });
});

describe("DST: America/New_York (EST/EDT; 2030-03-10 02:00 -> 03:00, 2030-11-03 02:00 -> 01:00)", () => {
  it("spring forward: every 30 minutes skips 02:00 and 02:30, which do not exist (46 ticks on the short day)", async () => {
    const ticks = await ticksBetween("*/30 * * * *", "America/New_York", "2030-03-10T05:00:00Z", "2030-03-11T04:00:00Z", 10 * MINUTE);
    expect(ticks).toHaveLength(46); // local midnight (05:00Z) .. 23:30 EDT (03:30Z)
    expect(ticks).toContain("2030-03-10T06:30:00.000Z"); // 01:30 EST
    expect(ticks).toContain("2030-03-10T07:00:00.000Z"); // 03:00 EDT, right after it
    expect(ticks).not.toContain("2030-03-10T06:45:00.000Z");
  });

  it("fall back: 01:30 daily fires once, at 01:30 EDT", async () => {
    expect(await ticksBetween("30 1 * * *", "America/New_York", "2030-11-02T12:00:00Z", "2030-11-04T12:00:00Z")).toEqual([
      "2030-11-03T05:30:00.000Z", // 01:30 EDT; 01:30 EST (06:30Z) does not fire
      "2030-11-04T06:30:00.000Z", // 01:30 EST
    ]);
  });

  it("with a seconds field: every 20 s keeps firing through the repeated hour, 2 x 180 ticks in 01:00-02:00 local", async () => {
    const ticks = await ticksBetween("*/20 * 1 * * *", "America/New_York", "2030-11-03T04:59:00Z", "2030-11-03T07:01:00Z", MINUTE);
    expect(ticks).toHaveLength(360);
    expect(ticks[0]).toBe("2030-11-03T05:00:00.000Z");
    expect(ticks.at(-1)).toBe("2030-11-03T06:59:40.000Z");
  });
});

describe("DST: Australia/Sydney (AEDT/AEST; 2030-04-07 03:00 -> 02:00, 2030-10-06 02:00 -> 03:00)", () => {
  it("fall back in April: 02:30 daily fires once, at 02:30 AEDT", async () => {
    expect(await ticksBetween("30 2 * * *", "Australia/Sydney", "2030-04-05T12:00:00Z", "2030-04-07T18:00:00Z")).toEqual([
      "2030-04-05T15:30:00.000Z", // 02:30 AEDT (UTC+11) on the 6th
      "2030-04-06T15:30:00.000Z", // 02:30 AEDT on the 7th; 02:30 AEST (16:30Z) does not fire
      "2030-04-07T16:30:00.000Z", // 02:30 AEST on the 8th
    ]);
  });

  it("spring forward in October: 02:30 daily fires at 03:00 AEDT on the 6th", async () => {
    expect(await ticksBetween("30 2 * * *", "Australia/Sydney", "2030-10-04T12:00:00Z", "2030-10-06T18:00:00Z")).toEqual([
      "2030-10-04T16:30:00.000Z", // 02:30 AEST (UTC+10) on the 5th
      "2030-10-05T16:00:00.000Z", // 03:00 AEDT on the 6th, the first valid time after the gap
      "2030-10-06T15:30:00.000Z", // 02:30 AEDT on the 7th
    ]);
  });
});
