/**
 * `finishedWindow`: the jobs a queue completed or lost in a time window, counted and sampled from
 * the store (the dashboard's fleet-wide charts). Time moves with the suite's FakeClock.
 */
import { describe, expect, it } from "vitest";
import { claim, enqueueMany, errorInfo, itNeeds, QUEUE, type SuiteContext } from "./fixtures.js";

export function finishedWindowTests(t: SuiteContext): void {
  if (!t.factory.capabilities.finishedWindows) {
    describe("finished windows [skipped: capabilities.finishedWindows is false]", () => {
      it("finishedWindow is refused with UnsupportedByStoreError", async () => {
        await expect(t.b.finishedWindow(QUEUE, 0, 1, 10)).rejects.toMatchObject({ name: "UnsupportedByStoreError" });
      });
    });
    return;
  }
  const test = itNeeds(t, ["finishedWindows"]);
  describe("finished windows", () => {
    test("counts completed and dead jobs by finish time, half-open, per queue, with their wait and run times", async () => {
      const t0 = t.clock.now();
      // Kept forever and kept for a while: the stores index both (Redis scores them apart).
      await enqueueMany(t.b, 5, (i) => ({ removeOnComplete: i === 0 ? false : { ageMs: 3_600_000 }, attempts: 1 }));
      await enqueueMany(t.b, 2, () => ({ queue: "other" }));
      t.clock.advance(1_000);
      const jobs = await claim(t.b, { limit: 5 });
      expect(jobs).toHaveLength(5);
      await claim(t.b, { queues: ["other"], limit: 2 }).then((others) => t.b.complete(others.map((c) => ({ lease: c.lease, result: null }))));
      t.clock.advance(250);
      await t.b.complete(jobs.slice(0, 3).map((c) => ({ lease: c.lease, result: null })));
      const firstEnd = t.clock.now();
      t.clock.advance(10_000);
      await t.b.complete([{ lease: jobs[3]!.lease, result: null }]);
      await t.b.fail([{ lease: jobs[4]!.lease, error: errorInfo("broke"), retryDelayMs: null }]);
      const secondEnd = t.clock.now();

      const all = await t.b.finishedWindow(QUEUE, t0, secondEnd + 1, 100);
      expect({ completed: all.completed, dead: all.dead }).toEqual({ completed: 4, dead: 1 });
      expect(all.samples).toHaveLength(5);
      const first = all.samples.filter((s) => s.finishedAt === firstEnd);
      expect(first).toHaveLength(3);
      for (const s of first) expect(s).toEqual({ state: "completed", runAt: t0, startedAt: t0 + 1_000, finishedAt: firstEnd });
      expect(all.samples.find((s) => s.state === "dead")).toEqual({ state: "dead", runAt: t0, startedAt: t0 + 1_000, finishedAt: secondEnd });

      // [from, until): a job finished exactly at `until` belongs to the next window.
      const early = await t.b.finishedWindow(QUEUE, t0, secondEnd, 100);
      expect({ completed: early.completed, dead: early.dead, samples: early.samples.length }).toEqual({ completed: 3, dead: 0, samples: 3 });
      const late = await t.b.finishedWindow(QUEUE, firstEnd + 1, secondEnd + 1, 100);
      expect({ completed: late.completed, dead: late.dead }).toEqual({ completed: 1, dead: 1 });
      // The sample is bounded per state; the counts are not.
      const bounded = await t.b.finishedWindow(QUEUE, t0, secondEnd + 1, 2);
      expect({ completed: bounded.completed, dead: bounded.dead }).toEqual({ completed: 4, dead: 1 });
      expect(bounded.samples.filter((s) => s.state === "completed")).toHaveLength(2);
      expect(bounded.samples.filter((s) => s.state === "dead")).toHaveLength(1);
      const countsOnly = await t.b.finishedWindow(QUEUE, t0, secondEnd + 1, 0);
      expect(countsOnly).toEqual({ completed: 4, dead: 1, samples: [] });
      expect(await t.b.finishedWindow("other", t0, secondEnd + 1, 0)).toEqual({ completed: 2, dead: 0, samples: [] });
      expect(await t.b.finishedWindow("never-used", t0, secondEnd + 1, 10)).toEqual({ completed: 0, dead: 0, samples: [] });
    });

    test("bad arguments are refused with InvalidInputError", async () => {
      await expect(t.b.finishedWindow(QUEUE, 10, 5, 1)).rejects.toMatchObject({ name: "InvalidInputError" });
      await expect(t.b.finishedWindow(QUEUE, -1, 5, 1)).rejects.toMatchObject({ name: "InvalidInputError" });
      await expect(t.b.finishedWindow(QUEUE, 0, 5, 1_001)).rejects.toMatchObject({ name: "InvalidInputError" });
      await expect(t.b.finishedWindow("", 0, 5, 1)).rejects.toMatchObject({ name: "InvalidInputError" });
    });
  });
}
