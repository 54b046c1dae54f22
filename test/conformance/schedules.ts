/**
 * Cron schedules: the store half (upsert, list, remove, the compare-and-set firing) and the rules
 * the shared scheduler builds on it. Time moves with the suite's FakeClock; "schedulers" are
 * passes of `fireDueSchedules`, the function every scheduler loop runs, called directly so the
 * races are exact rather than timed.
 */
import { describe, expect, it } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import {
  buildScheduleWrite,
  dueTicks,
  firingFor,
  tickJobId,
  tickMetaOf,
  type ScheduleOptions,
  type StoredSchedule,
  type TickMeta,
} from "../../src/core/schedule.js";
import { fireDueSchedules } from "../../src/maintenance/scheduler.js";
import { claim, mustGet, one, QUEUE, totalJobs, type SuiteContext } from "./fixtures.js";

const MINUTE = 60_000;
const EVERY_MINUTE: ScheduleOptions = { cron: "* * * * *", name: "job", data: { report: "daily" } };

async function upsert(b: Backend, id: string, options: ScheduleOptions = EVERY_MINUTE, queue = QUEUE) {
  return b.scheduleUpsert(buildScheduleWrite(queue, id, options));
}

async function only(b: Backend, id: string, queue = QUEUE): Promise<StoredSchedule> {
  return one((await b.scheduleList(queue)).filter((s) => s.id === id));
}

/** Every job of the store, oldest tick first, as (id, tick) pairs read from the job's meta. */
async function tickJobs(b: Backend, queue = QUEUE): Promise<Array<{ id: string; meta: TickMeta }>> {
  const jobs = await b.list({ queue }, { limit: 1000 });
  return jobs.map((j) => ({ id: j.id, meta: tickMetaOf(j)! })).sort((a, b) => (a.meta.tick < b.meta.tick ? -1 : 1));
}

const iso = (ms: number) => new Date(ms).toISOString();

export function scheduleTests(t: SuiteContext): void {
  if (!t.factory.capabilities.schedules) {
    describe("cron schedules [skipped: capabilities.schedules is false]", () => {
      it("every schedule call is refused with UnsupportedByStoreError", async () => {
        await expect(t.b.scheduleList()).rejects.toMatchObject({ name: "UnsupportedByStoreError" });
        await expect(t.b.scheduleUpsert(buildScheduleWrite(QUEUE, "s", EVERY_MINUTE))).rejects.toMatchObject({ name: "UnsupportedByStoreError" });
      });
    });
    return;
  }
  describe("cron schedules: storage", () => {
    it("an upsert creates the schedule anchored at now; another replaces it, keeping the anchor and bumping the version", async () => {
      const start = t.clock.now();
      const first = await upsert(t.b, "digest");
      expect(first.created).toBe(true);
      expect(first.schedule).toMatchObject({ queue: QUEUE, id: "digest", anchorAt: start, lastTickAt: null, version: 1, createdAt: start });
      expect(first.schedule.definition).toMatchObject({ cron: "* * * * *", tz: "UTC", name: "job", data: { report: "daily" }, misfire: { policy: "once" } });

      t.clock.advance(5_000);
      const second = await upsert(t.b, "digest", { ...EVERY_MINUTE, data: { report: "weekly" } });
      expect(second.created).toBe(false);
      expect(second.schedule).toMatchObject({ anchorAt: start, version: 2, createdAt: start, updatedAt: start + 5_000 });
      expect((await only(t.b, "digest")).definition.data).toEqual({ report: "weekly" });
    });

    it("lists by queue then id; the same id in two queues is two schedules", async () => {
      await upsert(t.b, "b");
      await upsert(t.b, "a");
      await upsert(t.b, "a", EVERY_MINUTE, "other");
      expect((await t.b.scheduleList()).map((s) => `${s.queue}/${s.id}`)).toEqual(["other/a", "q/a", "q/b"]);
      expect((await t.b.scheduleList(QUEUE)).map((s) => s.id)).toEqual(["a", "b"]);
      expect(await t.b.scheduleList("nobody")).toEqual([]);
    });

    it("remove deletes one schedule and says whether there was one", async () => {
      await upsert(t.b, "a");
      await upsert(t.b, "a", EVERY_MINUTE, "other");
      expect(await t.b.scheduleRemove(QUEUE, "a")).toBe(true);
      expect(await t.b.scheduleRemove(QUEUE, "a")).toBe(false);
      expect((await t.b.scheduleList()).map((s) => `${s.queue}/${s.id}`)).toEqual(["other/a"]);
    });
  });

  describe("cron schedules: exactly one job per tick", () => {
    it("a tick fires once, as a real job: the schedule's name, data and options, run_at = the tick, a derived id", async () => {
      await upsert(t.b, "digest", { ...EVERY_MINUTE, options: { attempts: 7, priority: 3 } });
      const tick = t.clock.now() + MINUTE;
      expect((await fireDueSchedules(t.b)).fired).toEqual([]);
      t.clock.set(tick + 250);
      const pass = await fireDueSchedules(t.b);
      expect(pass.fired).toEqual([{ queue: QUEUE, id: "digest", tickAt: tick, jobs: [{ id: tickJobId(QUEUE, "digest", tick), duplicate: false }] }]);
      expect(pass.nextAt).toBe(tick + MINUTE);
      const job = await mustGet(t.b, tickJobId(QUEUE, "digest", tick));
      expect(job).toMatchObject({ queue: QUEUE, name: "job", data: { report: "daily" }, maxAttempts: 7, priority: 3, runAt: tick, state: "waiting" });
      expect(job.meta).toEqual({ schedule: { id: "digest", tick: iso(tick), since: iso(tick - MINUTE) } });
      expect((await only(t.b, "digest")).lastTickAt).toBe(tick);
      expect(await fireDueSchedules(t.b)).toMatchObject({ fired: [] });
      expect(await totalJobs(t.b)).toBe(1);
      expect((await claim(t.b)).map((c) => c.job.id)).toEqual([job.id]);
    });

    it("eight schedulers racing over ten ticks: one job per tick, each tick fired by exactly one of them", async () => {
      await upsert(t.b, "race");
      const start = t.clock.now();
      let firedTotal = 0;
      for (let n = 1; n <= 10; n++) {
        t.clock.set(start + n * MINUTE + 10);
        const passes = await Promise.all(Array.from({ length: 8 }, () => fireDueSchedules(t.b)));
        const fired = passes.flatMap((p) => p.fired);
        expect(fired).toHaveLength(1);
        firedTotal += fired.length;
      }
      expect(firedTotal).toBe(10);
      const ticks = (await tickJobs(t.b)).map((j) => j.meta.tick);
      expect(ticks).toEqual(Array.from({ length: 10 }, (_, i) => iso(start + (i + 1) * MINUTE)));
    });

    it.skipIf(!t.factory.openSecond)("schedulers on two connections racing: still one job per tick [needs factory.openSecond]", async () => {
      const other = await t.second();
      await upsert(t.b, "race");
      const start = t.clock.now();
      for (let n = 1; n <= 5; n++) {
        t.clock.set(start + n * MINUTE);
        const passes = await Promise.all([0, 1, 2, 3].map((i) => fireDueSchedules(i % 2 === 0 ? t.b : other)));
        expect(passes.flatMap((p) => p.fired)).toHaveLength(1);
      }
      expect(await totalJobs(t.b)).toBe(5);
    });

    it("a firing is a compare-and-set: the same firing again is refused, even after the tick's job was deleted", async () => {
      await upsert(t.b, "cas");
      t.clock.advance(MINUTE);
      const schedule = await only(t.b, "cas");
      const firing = firingFor(schedule, dueTicks(schedule, t.clock.now())!);
      expect((await t.b.scheduleFire(firing)).fired).toBe(true);
      const jobId = firing.jobs[0]!.id;
      // The job ran and was removed (or pruned): a stale scheduler must not bring it back.
      expect(await t.b.cancel(jobId)).toBe("cancelled");
      expect(await t.b.remove(jobId)).toBe("removed");
      expect(await t.b.scheduleFire(firing)).toEqual({ fired: false, jobs: [] });
      expect(await fireDueSchedules(t.b)).toMatchObject({ fired: [] });
      expect(await totalJobs(t.b)).toBe(0);
    });

    it("a firing never moves the cursor backwards, and one computed from an older version is refused", async () => {
      await upsert(t.b, "v");
      t.clock.advance(2 * MINUTE);
      const before = await only(t.b, "v");
      const stale = firingFor(before, dueTicks(before, t.clock.now())!);
      await upsert(t.b, "v", { ...EVERY_MINUTE, data: { changed: true } });
      expect((await t.b.scheduleFire(stale)).fired).toBe(false);
      const fresh = await only(t.b, "v");
      expect(fresh.version).toBe(2);
      const firing = firingFor(fresh, dueTicks(fresh, t.clock.now())!);
      expect((await t.b.scheduleFire(firing)).fired).toBe(true);
      // The same expected value but an earlier tick: refused.
      expect((await t.b.scheduleFire({ ...firing, expectedTickAt: firing.tickAt, tickAt: firing.tickAt - MINUTE })).fired).toBe(false);
      expect((await mustGet(t.b, firing.jobs[0]!.id)).data).toEqual({ changed: true });
    });
  });

  describe("cron schedules: misfire policy after downtime (ticks of every minute, ten missed)", () => {
    const downtime = 10 * MINUTE + 30_000;

    it('"once" (the default): one job, for the newest tick, standing for every missed one', async () => {
      await upsert(t.b, "m");
      const start = t.clock.now();
      t.clock.advance(downtime);
      const [fired] = (await fireDueSchedules(t.b)).fired;
      expect(fired?.jobs).toHaveLength(1);
      const [job] = await tickJobs(t.b);
      expect(job!.meta).toEqual({ id: "m", tick: iso(start + 10 * MINUTE), since: iso(start) });
      expect(await totalJobs(t.b)).toBe(1);
    });

    it('"all": one job per missed tick, oldest first; with a limit, only the newest ones', async () => {
      await upsert(t.b, "all", { ...EVERY_MINUTE, misfire: "all" });
      await upsert(t.b, "three", { ...EVERY_MINUTE, misfire: { policy: "all", limit: 3 } }, "other");
      const start = t.clock.now();
      t.clock.advance(downtime);
      await fireDueSchedules(t.b);
      expect((await tickJobs(t.b)).map((j) => j.meta.tick)).toEqual(Array.from({ length: 10 }, (_, i) => iso(start + (i + 1) * MINUTE)));
      expect((await tickJobs(t.b, "other")).map((j) => j.meta.tick)).toEqual([8, 9, 10].map((i) => iso(start + i * MINUTE)));
      expect((await only(t.b, "three", "other")).lastTickAt).toBe(start + 10 * MINUTE);
    });

    it('"skip": missed ticks are dropped; a tick within graceMs still fires, the next one fires on time', async () => {
      await upsert(t.b, "late", { ...EVERY_MINUTE, misfire: "skip" }); // grace 60 s: 30 s late still fires
      await upsert(t.b, "strict", { ...EVERY_MINUTE, misfire: { policy: "skip", graceMs: 10_000 } });
      const start = t.clock.now();
      t.clock.advance(downtime);
      await fireDueSchedules(t.b);
      const jobs = await tickJobs(t.b);
      expect(jobs.map((j) => `${j.meta.id}@${j.meta.tick}`)).toEqual([`late@${iso(start + 10 * MINUTE)}`]);
      expect((await only(t.b, "strict")).lastTickAt).toBe(start + 10 * MINUTE);
      t.clock.set(start + 11 * MINUTE + 1);
      await fireDueSchedules(t.b);
      expect((await tickJobs(t.b)).filter((j) => j.meta.id === "strict").map((j) => j.meta.tick)).toEqual([iso(start + 11 * MINUTE)]);
    });
  });

  describe("cron schedules: changes", () => {
    it("a pattern change takes effect from the new pattern's next tick, without a duplicate or a replay", async () => {
      await upsert(t.b, "p");
      const start = t.clock.now(); // 00:00:00
      t.clock.set(start + MINUTE + 1); // 00:01 fires under "every minute"
      await fireDueSchedules(t.b);
      t.clock.set(start + MINUTE + 30_000);
      await upsert(t.b, "p", { ...EVERY_MINUTE, cron: "*/5 * * * *" });
      for (let s = 2; s <= 10; s++) {
        t.clock.set(start + s * MINUTE + 1);
        await fireDueSchedules(t.b);
      }
      expect((await tickJobs(t.b)).map((j) => j.meta.tick)).toEqual([1, 5, 10].map((m) => iso(start + m * MINUTE)));
    });

    it("changing an hourly schedule to every minute at half past does not replay the minutes since the hour", async () => {
      await upsert(t.b, "h", { ...EVERY_MINUTE, cron: "0 * * * *", misfire: "all" });
      const start = t.clock.now();
      t.clock.set(start + 30 * MINUTE);
      expect((await fireDueSchedules(t.b)).fired).toEqual([]);
      await upsert(t.b, "h", { ...EVERY_MINUTE, cron: "* * * * *", misfire: "all" });
      t.clock.set(start + 31 * MINUTE);
      await fireDueSchedules(t.b);
      expect((await tickJobs(t.b)).map((j) => j.meta.tick)).toEqual([iso(start + 31 * MINUTE)]);
    });

    it("keeping the pattern (only data changed) keeps the schedule's place: a missed tick still fires", async () => {
      await upsert(t.b, "d");
      const start = t.clock.now();
      t.clock.set(start + MINUTE + 5_000);
      await upsert(t.b, "d", { ...EVERY_MINUTE, data: { v: 2 } });
      await fireDueSchedules(t.b);
      expect((await tickJobs(t.b)).map((j) => j.meta.tick)).toEqual([iso(start + MINUTE)]);
    });

    it("unschedule: no tick fires afterwards, and a firing computed before is refused", async () => {
      await upsert(t.b, "gone");
      t.clock.advance(MINUTE);
      const schedule = await only(t.b, "gone");
      const firing = firingFor(schedule, dueTicks(schedule, t.clock.now())!);
      expect(await t.b.scheduleRemove(QUEUE, "gone")).toBe(true);
      expect((await t.b.scheduleFire(firing)).fired).toBe(false);
      t.clock.advance(10 * MINUTE);
      expect((await fireDueSchedules(t.b)).fired).toEqual([]);
      expect(await totalJobs(t.b)).toBe(0);
    });
  });
}
