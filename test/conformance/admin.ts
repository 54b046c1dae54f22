import { describe, expect } from "vitest";
import type { QueueStats } from "../../src/backend/contract.js";
import { AmbiguousJobIdError } from "../../src/core/errors.js";
import { B, claim, claimOne, counts, countsOf, enqueueMany, enqueueOne, errorInfo, mustGet, one, spec, type SuiteContext, itNeeds } from "./fixtures.js";

export function adminTests(t: SuiteContext): void {
  /** Enqueues a job with one attempt and fails it dead; returns its id. */
  async function deadJob(input: { jobId?: string; data?: unknown } = {}): Promise<string> {
    const id = await enqueueOne(t.b, { ...input, attempts: 1 });
    const c = await claimOne(t.b);
    expect(c.job.id).toBe(id);
    await t.b.fail([{ lease: c.lease, error: errorInfo("it broke"), retryDelayMs: null }]);
    return id;
  }

  describe("replay", () => {
    itNeeds(t, ["jobRecords", "clockDriven"])(
      "moves a dead job to waiting with a fresh set of attempts, keeping its history and counting the replay",
      async () => {
        const id = await deadJob({ data: { keep: "me" } });
        const before = await mustGet(t.b, id);
        expect(before.state).toBe("dead");
        t.clock.advance(5_000);
        expect(await t.b.replay(id)).toBe("replayed");
        const job = await mustGet(t.b, id);
        expect(job).toMatchObject({ state: "waiting", attempt: 0, replays: 1, data: { keep: "me" }, lease: null, maxAttempts: 1 });
        expect(job.history.length).toBeGreaterThanOrEqual(before.history.length);
        expect(job.history.slice(0, before.history.length)).toEqual(before.history);

        const c = await claimOne(t.b, { worker: B });
        expect(c.job).toMatchObject({ id, attempt: 1 });
        await t.b.fail([{ lease: c.lease, error: errorInfo("again"), retryDelayMs: null }]);
        const dead = await mustGet(t.b, id);
        expect(dead).toMatchObject({ state: "dead", attempt: 1, replays: 1 });
        expect(dead.history.length).toBeGreaterThan(job.history.length);
        expect(dead.history.at(-1)).toMatchObject({ attempt: 1, workerId: B.id, error: errorInfo("again") });
        expect(await t.b.replay(id)).toBe("replayed");
        expect((await mustGet(t.b, id)).replays).toBe(2);
      },
    );

    itNeeds(t, ["jobRecords", "cancel"])("refuses jobs that are not dead, and reports unknown ids", async () => {
      const active = await enqueueOne(t.b);
      await claimOne(t.b);
      const completed = await enqueueOne(t.b);
      await t.b.complete([{ lease: (await claimOne(t.b)).lease, result: "ok" }]);
      const waiting = await enqueueOne(t.b);
      const scheduled = await enqueueOne(t.b, { delayMs: 60_000 });
      const cancelled = await enqueueOne(t.b, { delayMs: 60_000 });
      await t.b.cancel(cancelled);
      for (const id of [active, completed, waiting, scheduled, cancelled]) expect(await t.b.replay(id)).toBe("not-dead");
      expect(await t.b.replay("no-such-job")).toBe("not-found");
      expect(await mustGet(t.b, completed)).toMatchObject({ state: "completed", result: "ok", replays: 0 });
      expect(await mustGet(t.b, active)).toMatchObject({ state: "active", attempt: 1, replays: 0 });
      expect((await mustGet(t.b, cancelled)).state).toBe("cancelled");
    });
  });

  describe("by-id calls with a queue", () => {
    itNeeds(t, ["jobRecords", "cancel"])("act only on that queue's job: another queue's is not found and left alone", async () => {
      const id = await deadJob({ jobId: "scoped" });
      expect(await t.b.get(id, "other")).toBeNull();
      expect(await t.b.get(id, "q")).toMatchObject({ id, queue: "q", state: "dead" });
      expect(await t.b.replay(id, "other")).toBe("not-found");
      expect(await t.b.remove(id, "other")).toBe("not-found");
      expect(await t.b.cancel(id, "other")).toBe("not-found");
      expect((await mustGet(t.b, id)).state).toBe("dead");
      expect(await t.b.replay(id, "q")).toBe("replayed");
      expect(await t.b.cancel(id, "other")).toBe("not-found");
      expect((await mustGet(t.b, id)).state).toBe("waiting");
      expect(await t.b.cancel(id, "q")).toBe("cancelled");
      expect(await t.b.remove(id, "q")).toBe("removed");
      expect(await t.b.get(id)).toBeNull();
    });
  });

  describe("the same id in two queues", () => {
    itNeeds(t, ["jobRecords", "cancel", "uniqueIds"])(
      "is one job (a duplicate), or two where capabilities.jobIdsPerQueue; by-id calls never act on the job of a queue they did not name",
      async () => {
        const perQueue = t.factory.capabilities.jobIdsPerQueue === true;
        expect(t.b.capabilities.jobIdsPerQueue === true, "the backend declares what the suite was told").toBe(perQueue);
        const first = await enqueueOne(t.b, { queue: "first", jobId: "twin", data: { n: 1 } });
        const [second] = await t.b.enqueue([spec({ queue: "second", jobId: "twin", data: { n: 2 } })]);
        expect(second).toMatchObject({ id: first, duplicate: !perQueue });
        expect(await t.b.get("twin", "first")).toMatchObject({ queue: "first", data: { n: 1 } });
        if (!perQueue) {
          // One job: the other queue holds nothing under the id, and every call reaches the first.
          expect(await t.b.get("twin", "second")).toBeNull();
          expect(await t.b.get("twin")).toMatchObject({ queue: "first" });
          expect(await t.b.cancel("twin", "second")).toBe("not-found");
          expect(await t.b.remove("twin", "second")).toBe("not-found");
          expect(await t.b.cancel("twin")).toBe("cancelled");
          expect(await t.b.list({ queue: "second" })).toEqual([]);
          return;
        }
        // Two jobs: each queue's call reaches its own; without a queue nothing is guessed.
        expect(await t.b.get("twin", "second")).toMatchObject({ queue: "second", data: { n: 2 } });
        await expect(t.b.get("twin")).rejects.toBeInstanceOf(AmbiguousJobIdError);
        await expect(t.b.cancel("twin")).rejects.toBeInstanceOf(AmbiguousJobIdError);
        await expect(t.b.remove("twin")).rejects.toBeInstanceOf(AmbiguousJobIdError);
        expect(await t.b.cancel("twin", "second")).toBe("cancelled");
        expect(await t.b.get("twin", "first")).toMatchObject({ state: "waiting", data: { n: 1 } });
        expect(await t.b.remove("twin", "second")).toBe("removed");
        // Once one queue holds it again, the id needs no queue.
        expect(await t.b.get("twin")).toMatchObject({ queue: "first", state: "waiting" });
      },
    );
  });

  describe("remove", () => {
    itNeeds(t, ["jobRecords", "cancel"])("deletes finished jobs of every kind: dead, completed, cancelled", async () => {
      const dead = await deadJob();
      const done = await enqueueOne(t.b);
      const c = await claimOne(t.b);
      await t.b.complete([{ lease: c.lease, result: null }]);
      const cancelled = await enqueueOne(t.b);
      expect(await t.b.cancel(cancelled)).toBe("cancelled");
      for (const id of [dead, done, cancelled]) {
        expect(await t.b.remove(id)).toBe("removed");
        expect(await t.b.get(id)).toBeNull();
        expect(await t.b.remove(id)).toBe("not-found");
      }
      expect(await countsOf(t.b)).toEqual(counts());
    });

    itNeeds(t, ["jobRecords"])("refuses unfinished jobs and leaves them alone", async () => {
      const waiting = await enqueueOne(t.b);
      const active = await enqueueOne(t.b);
      const c = await claimOne(t.b);
      expect(c.job.id).toBe(waiting);
      expect(await t.b.remove(waiting)).toBe("not-finished");
      expect(await t.b.remove(active)).toBe("not-finished");
      expect((await mustGet(t.b, waiting)).state).toBe("active");
      expect((await mustGet(t.b, active)).state).toBe("waiting");
      expect(await t.b.complete([{ lease: c.lease, result: null }])).toEqual(["applied"]);
    });
  });

  describe("cancel", () => {
    itNeeds(t, ["jobRecords", "clockDriven", "cancel"])("cancels a waiting job: cancelled, finishedAt = now, never claimed", async () => {
      const id = await enqueueOne(t.b);
      t.clock.advance(700);
      expect(await t.b.cancel(id)).toBe("cancelled");
      expect(await mustGet(t.b, id)).toMatchObject({ state: "cancelled", finishedAt: t.clock.now(), lease: null });
      expect(await claim(t.b, { limit: 10 })).toEqual([]);
    });

    itNeeds(t, ["jobRecords", "clockDriven", "cancel"])("cancels a scheduled job: it never runs, even once due", async () => {
      const id = await enqueueOne(t.b, { delayMs: 1_000 });
      expect(await t.b.cancel(id)).toBe("cancelled");
      t.clock.advance(2_000);
      expect(await t.b.promoteDue()).toBe(0);
      expect(await claim(t.b, { limit: 10 })).toEqual([]);
      expect((await mustGet(t.b, id)).state).toBe("cancelled");
    });

    itNeeds(t, ["jobRecords", "clockDriven", "cancel"])("cancels an active job: its heartbeat reports cancelled and its late complete is stale", async () => {
      const id = await enqueueOne(t.b);
      const c = await claimOne(t.b);
      expect(await t.b.cancel(id)).toBe("cancelled");
      expect((await mustGet(t.b, id)).state).toBe("cancelled");
      expect((await t.b.heartbeat([c.lease], 10_000)).lost).toEqual([{ lease: c.lease, reason: "cancelled" }]);
      expect(await t.b.complete([{ lease: c.lease, result: "late" }])).toEqual(["stale"]);
      expect(await t.b.fail([{ lease: c.lease, error: errorInfo("late"), retryDelayMs: 0 }])).toEqual(["stale"]);
      expect(await mustGet(t.b, id)).toMatchObject({ state: "cancelled", result: null });
      t.clock.advance(60_000);
      expect(await t.b.rescueExpired()).toEqual([]);
      expect((await mustGet(t.b, id)).state).toBe("cancelled");
    });

    itNeeds(t, ["jobRecords", "cancel"])("reports already-finished for completed, dead and cancelled jobs and changes nothing", async () => {
      const done = await enqueueOne(t.b);
      const c = await claimOne(t.b);
      await t.b.complete([{ lease: c.lease, result: "ok" }]);
      const dead = await deadJob();
      const cancelled = await enqueueOne(t.b);
      await t.b.cancel(cancelled);
      expect(await t.b.cancel(done)).toBe("already-finished");
      expect(await t.b.cancel(dead)).toBe("already-finished");
      expect(await t.b.cancel(cancelled)).toBe("already-finished");
      expect(await mustGet(t.b, done)).toMatchObject({ state: "completed", result: "ok" });
      expect((await mustGet(t.b, dead)).state).toBe("dead");
    });

    itNeeds(t, ["cancel"])("reports not-found for an unknown id", async () => {
      expect(await t.b.cancel("no-such-job")).toBe("not-found");
    });
  });

  describe("pause, resume and stats", () => {
    itNeeds(t, ["jobRecords", "cancel"])("counts jobs per state", async () => {
      await enqueueOne(t.b, { jobId: "active" });
      await claimOne(t.b);
      await enqueueOne(t.b, { jobId: "completed" });
      await t.b.complete([{ lease: (await claimOne(t.b)).lease, result: null }]);
      await deadJob({ jobId: "dead" });
      await enqueueOne(t.b, { jobId: "cancelled" });
      await t.b.cancel("cancelled");
      await enqueueOne(t.b, { jobId: "scheduled", delayMs: 60_000 });
      await enqueueMany(t.b, 2, (i) => ({ jobId: `waiting-${i}` }));
      await enqueueOne(t.b, { jobId: "elsewhere", queue: "other" });
      const stats = one(await t.b.stats("q"));
      expect(stats).toMatchObject({ queue: "q", paused: false });
      expect(stats.counts).toEqual(counts({ active: 1, completed: 1, dead: 1, cancelled: 1, scheduled: 1, waiting: 2 }));
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("counts a scheduled job whose run_at has passed as waiting", async () => {
      await enqueueOne(t.b, { delayMs: 1_000 });
      expect(one(await t.b.stats("q")).counts).toEqual(counts({ scheduled: 1 }));
      t.clock.advance(1_000);
      expect(one(await t.b.stats("q")).counts).toEqual(counts({ waiting: 1 }));
    });

    itNeeds(t, ["jobRecords", "pause"])("reports the paused flag, and pause/resume are idempotent", async () => {
      await enqueueOne(t.b);
      await t.b.pause("q");
      await t.b.pause("q");
      expect(one(await t.b.stats("q")).paused).toBe(true);
      expect(await claim(t.b)).toEqual([]);
      await t.b.resume("q");
      await t.b.resume("q");
      expect(one(await t.b.stats("q")).paused).toBe(false);
      expect(await claim(t.b)).toHaveLength(1);
    });

    itNeeds(t, ["jobRecords", "pause"])("pausing a queue keeps its jobs waiting and counted", async () => {
      await enqueueMany(t.b, 3);
      await t.b.pause("q");
      expect(one(await t.b.stats("q"))).toMatchObject({ paused: true, counts: counts({ waiting: 3 }) });
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("oldestWaitingAgeMs: age of the longest-waiting job since it became due; null when none waits", async () => {
      await enqueueOne(t.b, { jobId: "future", delayMs: 60_000 });
      expect(one(await t.b.stats("q")).oldestWaitingAgeMs).toBeNull();
      await enqueueOne(t.b, { jobId: "old" });
      t.clock.advance(2_000);
      await enqueueOne(t.b, { jobId: "young" });
      t.clock.advance(3_000);
      expect(one(await t.b.stats("q")).oldestWaitingAgeMs).toBe(5_000);
      await claim(t.b, { limit: 2 });
      expect(one(await t.b.stats("q")).oldestWaitingAgeMs).toBeNull();
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("oldestWaitingAgeMs counts a delayed job from its run_at, not its creation", async () => {
      await enqueueOne(t.b, { delayMs: 1_000 });
      expect(one(await t.b.stats("q")).oldestWaitingAgeMs).toBeNull();
      t.clock.advance(6_000);
      expect(one(await t.b.stats("q")).oldestWaitingAgeMs).toBe(5_000);
    });

    itNeeds(t, ["jobRecords", "pause"])("stats() without a queue lists every queue that has been used", async () => {
      await enqueueOne(t.b, { queue: "emails" });
      await enqueueOne(t.b, { queue: "images", delayMs: 10_000 });
      await enqueueOne(t.b, { queue: "reports" });
      await claimOne(t.b, { queues: ["reports"] });
      await t.b.pause("emails");
      const all = await t.b.stats();
      const byQueue = new Map<string, QueueStats>(all.map((s) => [s.queue, s]));
      expect([...byQueue.keys()].sort()).toEqual(["emails", "images", "reports"]);
      expect(byQueue.get("emails")).toMatchObject({ paused: true, counts: counts({ waiting: 1 }) });
      expect(byQueue.get("images")).toMatchObject({ paused: false, counts: counts({ scheduled: 1 }), oldestWaitingAgeMs: null });
      expect(byQueue.get("reports")).toMatchObject({ paused: false, counts: counts({ active: 1 }) });
    });

    itNeeds(t, ["jobRecords"])("stats(queue) reports only that queue", async () => {
      await enqueueOne(t.b, { queue: "one" });
      await enqueueMany(t.b, 2, () => ({ queue: "two" }));
      expect(await t.b.stats("two")).toEqual([{ queue: "two", paused: false, counts: counts({ waiting: 2 }), oldestWaitingAgeMs: 0 }]);
    });
  });

  describe("list", () => {
    /** Jobs across two queues and two names, one ms apart so "newest first" is well defined. */
    async function fixture(): Promise<void> {
      const plan: Array<[string, string, string]> = [
        ["q1-n1-a", "q1", "n1"],
        ["q1-n2-a", "q1", "n2"],
        ["q2-n1-a", "q2", "n1"],
        ["q1-n1-b", "q1", "n1"],
        ["q2-n2-a", "q2", "n2"],
        ["q1-n2-b", "q1", "n2"],
      ];
      for (const [jobId, queue, name] of plan) {
        await enqueueOne(t.b, { jobId, queue, name });
        t.clock.advance(1);
      }
    }

    itNeeds(t, ["jobRecords"])("lists every job, newest first", async () => {
      await fixture();
      expect((await t.b.list()).map((j) => j.id)).toEqual(["q1-n2-b", "q2-n2-a", "q1-n1-b", "q2-n1-a", "q1-n2-a", "q1-n1-a"]);
    });

    itNeeds(t, ["jobRecords"])("filters by queue, by name, by state, and by several at once", async () => {
      await fixture();
      const c = await claimOne(t.b, { queues: ["q1"], names: ["n1"] });
      expect(c.job.id).toBe("q1-n1-a");
      expect((await t.b.list({ queue: "q2" })).map((j) => j.id)).toEqual(["q2-n2-a", "q2-n1-a"]);
      expect((await t.b.list({ name: "n2" })).map((j) => j.id)).toEqual(["q1-n2-b", "q2-n2-a", "q1-n2-a"]);
      expect((await t.b.list({ state: "active" })).map((j) => j.id)).toEqual(["q1-n1-a"]);
      expect((await t.b.list({ queue: "q1", name: "n1", state: "waiting" })).map((j) => j.id)).toEqual(["q1-n1-b"]);
      expect(await t.b.list({ queue: "q3" })).toEqual([]);
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("state waiting includes due scheduled jobs (reported as waiting); state scheduled only future ones", async () => {
      await enqueueOne(t.b, { jobId: "due", delayMs: 1_000 });
      t.clock.advance(1);
      await enqueueOne(t.b, { jobId: "future", delayMs: 60_000 });
      t.clock.advance(1_000);
      const waiting = await t.b.list({ state: "waiting" });
      expect(waiting.map((j) => [j.id, j.state])).toEqual([["due", "waiting"]]);
      expect((await t.b.list({ state: "scheduled" })).map((j) => j.id)).toEqual(["future"]);
    });

    itNeeds(t, ["jobRecords"])("pages with limit and offset", async () => {
      await fixture();
      const all = (await t.b.list()).map((j) => j.id);
      expect((await t.b.list({}, { limit: 2 })).map((j) => j.id)).toEqual(all.slice(0, 2));
      expect((await t.b.list({}, { limit: 2, offset: 2 })).map((j) => j.id)).toEqual(all.slice(2, 4));
      expect((await t.b.list({}, { limit: 4, offset: 4 })).map((j) => j.id)).toEqual(all.slice(4));
      expect(await t.b.list({}, { offset: 6 })).toEqual([]);
      expect((await t.b.list({ queue: "q1" }, { limit: 1, offset: 1 })).map((j) => j.id)).toEqual(["q1-n1-b"]);
    });

    itNeeds(t, ["jobRecords"])("pages by cursor within a queue: the same pages as offsets, with filters kept", async () => {
      await enqueueMany(t.b, 7, () => ({ queue: "deep", name: "n" }));
      await enqueueOne(t.b, { queue: "other", name: "n" });
      const all = (await t.b.list({ queue: "deep" })).map((j) => j.id);
      expect(all).toHaveLength(7);
      const seen: string[] = [];
      let after: string | undefined;
      // Bounded: a cursor that does not advance must fail the test, not hang it.
      for (let pages = 0; pages < 5; pages++) {
        const page = (await t.b.list({ queue: "deep" }, { limit: 3, ...(after ? { after } : {}) })).map((j) => j.id);
        if (page.length === 0) break;
        seen.push(...page);
        after = page.at(-1);
      }
      expect(seen).toEqual(all);
      expect((await t.b.list({ queue: "deep" }, { after: all[1]!, offset: 1, limit: 2 })).map((j) => j.id)).toEqual(all.slice(3, 5));
      // Filters apply after the cursor too.
      const c = await claimOne(t.b, { queues: ["deep"], names: ["n"] });
      const waiting = (await t.b.list({ queue: "deep", state: "waiting" }, { after: all[0]! })).map((j) => j.id);
      expect(waiting).toEqual(all.slice(1).filter((id) => id !== c.job.id));
    });

    itNeeds(t, ["jobRecords"])("refuses a cursor without a queue, or whose job is gone or in another queue", async () => {
      const id = await enqueueOne(t.b, { queue: "q1" });
      const other = await enqueueOne(t.b, { queue: "q2" });
      await expect(t.b.list({}, { after: id })).rejects.toThrow(/needs filter.queue/);
      await expect(t.b.list({ queue: "q1" }, { after: other })).rejects.toThrow(/start again from the first page/);
      await expect(t.b.list({ queue: "q1" }, { after: "never-there" })).rejects.toThrow(/start again from the first page/);
    });

    itNeeds(t, ["jobRecords"])("filters by creation time: from (inclusive) and until (exclusive)", async () => {
      await fixture();
      const byId = new Map((await t.b.list()).map((j) => [j.id, j.createdAt]));
      const from = byId.get("q2-n1-a")!;
      const until = byId.get("q2-n2-a")!;
      expect((await t.b.list({ createdFrom: from, createdUntil: until })).map((j) => j.id)).toEqual(["q1-n1-b", "q2-n1-a"]);
      expect((await t.b.list({ queue: "q1", createdFrom: from })).map((j) => j.id)).toEqual(["q1-n2-b", "q1-n1-b"]);
      expect((await t.b.list({ createdUntil: from })).map((j) => j.id)).toEqual(["q1-n2-a", "q1-n1-a"]);
      await expect(t.b.list({ createdFrom: -1 })).rejects.toThrow(/createdFrom must be a time/);
    });

    itNeeds(t, ["jobRecords"])("returns at most 50 jobs by default", async () => {
      await enqueueMany(t.b, 60);
      expect(await t.b.list()).toHaveLength(50);
      expect(await t.b.list({}, { limit: 60 })).toHaveLength(60);
    });

    itNeeds(t, ["jobRecords", "priorities"])("returns full records, the same as get", async () => {
      const id = await enqueueOne(t.b, { data: { x: [1, 2] }, priority: 3 });
      expect(one(await t.b.list())).toEqual(await mustGet(t.b, id));
    });
  });
}
