/** The shared tick arithmetic of core/schedule.ts, without a store. */
import { describe, expect, it } from "vitest";
import { buildScheduleWrite, dueTicks, nextRunAt, parseScheduleDefinition, tickJobId, type StoredSchedule } from "../../src/core/schedule.js";

const T0 = Date.parse("2030-01-01T00:00:00Z");
const MINUTE = 60_000;

function stored(cron: string, misfire: unknown, lastTickAt: number | null = null, anchorAt = T0): StoredSchedule {
  const write = buildScheduleWrite("q", "s", { cron, name: "n", misfire: misfire as never });
  return { queue: "q", id: "s", definition: parseScheduleDefinition(write.definition), anchorAt, lastTickAt, version: 1, createdAt: T0, updatedAt: T0 };
}

describe("tick job ids", () => {
  it("name queue, schedule and tick; a separator names cannot hold keeps (a:b, c) and (a, b:c) apart", () => {
    expect(tickJobId("q", "s", T0)).toBe("cron_q~s~2030-01-01T00:00:00.000Z");
    expect(tickJobId("a:b", "c", T0)).not.toBe(tickJobId("a", "b:c", T0));
  });

  it("hash queue and schedule when the plain id would pass 255 characters, and stay distinct", () => {
    const long = "x".repeat(128);
    const id = tickJobId(long, long, T0);
    expect(id.length).toBeLessThanOrEqual(255);
    expect(id).toMatch(/^cron_[A-Za-z0-9_-]{32}~2030-01-01T00:00:00.000Z$/);
    expect(tickJobId(long, `${"x".repeat(127)}y`, T0)).not.toBe(id);
  });
});

describe("due ticks and next run", () => {
  it("nothing is due before the first tick after the cursor; the next run is that tick", () => {
    const s = stored("*/5 * * * *", undefined);
    expect(dueTicks(s, T0 + 4 * MINUTE)).toBeNull();
    expect(nextRunAt(s, T0 + 4 * MINUTE)).toBe(T0 + 5 * MINUTE);
  });

  it("a week of missed every-second ticks: once is one job for the newest, all the newest 1000", () => {
    const week = 7 * 24 * 3600 * 1000;
    const once = dueTicks(stored("* * * * * *", "once"), T0 + week + 500)!;
    const all = dueTicks(stored("* * * * * *", { policy: "all", limit: 1000 }), T0 + week + 500)!;
    expect(once).toEqual({ tickAt: T0 + week, ticks: [T0 + week], since: T0 });
    expect(all.ticks).toHaveLength(1000);
    expect(all.ticks[0]).toBe(T0 + week - 999_000);
    expect(all.ticks.at(-1)).toBe(T0 + week);
  });

  it("skip: an overdue tick past its grace is not the next run; the next tick after now is", () => {
    const s = stored("0 * * * *", { policy: "skip", graceMs: 1_000 });
    const now = T0 + 90 * MINUTE;
    expect(dueTicks(s, now)).toEqual({ tickAt: T0 + 60 * MINUTE, ticks: [], since: T0 });
    expect(nextRunAt(s, now)).toBe(T0 + 120 * MINUTE);
    // Within its grace, the overdue tick is the next run.
    expect(nextRunAt(s, T0 + 60 * MINUTE + 500)).toBe(T0 + 60 * MINUTE);
  });
});
