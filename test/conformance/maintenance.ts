import { describe, expect } from "vitest";
import type { Backend, RescuedJob } from "../../src/backend/contract.js";
import { A, B, C, claim, claimOne, counts, countsOf, enqueueMany, enqueueOne, errorInfo, mustGet, one, spec, type SuiteContext, itNeeds } from "./fixtures.js";

export function maintenanceTests(t: SuiteContext): void {
  describe("rescueExpired", () => {
    itNeeds(t, ["jobRecords", "clockDriven"])("returns an expired job to waiting, recording a lease-expired attempt and one stall", async () => {
      const id = await enqueueOne(t.b, { name: "job", attempts: 3 });
      const startedAt = t.clock.now();
      await claimOne(t.b, { worker: A, leaseMs: 1_000 });
      t.clock.advance(1_001);
      const rescued = await t.b.rescueExpired();
      expect(rescued).toEqual([{ id, queue: "q", name: "job", state: "waiting", attempt: 1, workerId: A.id }]);
      const job = await mustGet(t.b, id);
      expect(job).toMatchObject({ state: "waiting", lease: null, attempt: 1, stalls: 1 });
      expect(job.history).toHaveLength(1);
      expect(job.history[0]).toMatchObject({ attempt: 1, workerId: A.id, host: A.host, pid: A.pid, startedAt, outcome: "lease-expired" });
      expect(job.history[0]!.finishedAt).toBeGreaterThanOrEqual(startedAt + 1_000);
      expect(job.history[0]!.finishedAt).toBeLessThanOrEqual(t.clock.now());
      // The expired lease counted as an attempt.
      expect((await claimOne(t.b, { worker: B })).job.attempt).toBe(2);
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("leaves leases that have not expired alone and returns [] when nothing expired", async () => {
      await enqueueOne(t.b, { jobId: "short" });
      await enqueueOne(t.b, { jobId: "long" });
      const short = await claimOne(t.b, { leaseMs: 1_000 });
      const long = await claimOne(t.b, { leaseMs: 10_000 });
      expect(await t.b.rescueExpired()).toEqual([]);
      t.clock.advance(5_000);
      expect((await t.b.rescueExpired()).map((r) => r.id)).toEqual([short.job.id]);
      expect(await mustGet(t.b, "long")).toMatchObject({ state: "active", stalls: 0, lease: { token: long.lease.token, worker: A } });
      expect(await t.b.rescueExpired()).toEqual([]);
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("quarantines a job in dead after 3 lease expiries in a row (default maxStalls)", async () => {
      const id = await enqueueOne(t.b, { attempts: 10 });
      const states: string[] = [];
      for (let i = 0; i < 3; i++) {
        await claimOne(t.b, { leaseMs: 1_000 });
        t.clock.advance(1_001);
        states.push(one(await t.b.rescueExpired()).state);
        expect((await mustGet(t.b, id)).stalls).toBe(i + 1);
      }
      expect(states).toEqual(["waiting", "waiting", "dead"]);
      const job = await mustGet(t.b, id);
      expect(job).toMatchObject({ state: "dead", attempt: 3, finishedAt: t.clock.now(), lease: null });
      expect(job.error).not.toBeNull();
      expect(job.history.map((h) => h.outcome)).toEqual(["lease-expired", "lease-expired", "lease-expired"]);
      expect(await claim(t.b, { limit: 10 })).toEqual([]);
    });

    itNeeds(t, ["jobRecords", "clockDriven"])(
      "a worker that dies holding several jobs (running or prefetched) stalls none of them: no innocent job is quarantined",
      async () => {
        const ids = await enqueueMany(t.b, 4, () => ({ attempts: 100 }));
        for (let round = 0; round < 5; round++) {
          // The same worker takes all four (one running, three buffered) and dies.
          expect(await claim(t.b, { worker: A, limit: 4, leaseMs: 1_000 })).toHaveLength(4);
          t.clock.advance(1_001);
          const rescued = await t.b.rescueExpired({ maxStalls: 2 });
          expect(rescued.map((r) => r.state)).toEqual(["waiting", "waiting", "waiting", "waiting"]);
        }
        for (const id of ids) expect(await mustGet(t.b, id)).toMatchObject({ state: "waiting", stalls: 0, attempt: 5 });
        // Alone in its worker, a job is the likely cause: its expiries count.
        const solo = await enqueueOne(t.b, { name: "solo", attempts: 100 });
        for (const [w, state] of [
          [B, "waiting"],
          [C, "dead"],
        ] as const) {
          await claimOne(t.b, { worker: w, names: ["solo"], leaseMs: 1_000 });
          t.clock.advance(1_001);
          expect(one(await t.b.rescueExpired({ maxStalls: 2 }))).toMatchObject({ id: solo, state });
        }
        expect((await mustGet(t.b, solo)).stalls).toBe(2);
      },
    );

    itNeeds(t, ["jobRecords", "clockDriven"])("maxStalls: 1 quarantines on the first expiry", async () => {
      const id = await enqueueOne(t.b, { attempts: 10 });
      await claimOne(t.b, { leaseMs: 1_000 });
      t.clock.advance(1_001);
      expect(await t.b.rescueExpired({ maxStalls: 1 })).toMatchObject([{ id, state: "dead", attempt: 1 }]);
      expect((await mustGet(t.b, id)).state).toBe("dead");
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("a normal settle resets the stall count: only expiries in a row quarantine", async () => {
      const id = await enqueueOne(t.b, { attempts: 10 });
      for (let i = 0; i < 2; i++) {
        await claimOne(t.b, { leaseMs: 1_000 });
        t.clock.advance(1_001);
        await t.b.rescueExpired();
      }
      expect((await mustGet(t.b, id)).stalls).toBe(2);
      const c = await claimOne(t.b, { leaseMs: 1_000 });
      await t.b.fail([{ lease: c.lease, error: errorInfo("ordinary failure"), retryDelayMs: 0 }]);
      expect((await mustGet(t.b, id)).stalls).toBe(0);
      await claimOne(t.b, { leaseMs: 1_000 });
      t.clock.advance(1_001);
      expect(await t.b.rescueExpired()).toMatchObject([{ id, state: "waiting", attempt: 4 }]);
      expect((await mustGet(t.b, id)).stalls).toBe(1);
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("makes the job dead when its attempts are used up", async () => {
      const id = await enqueueOne(t.b, { attempts: 2 });
      await claimOne(t.b, { leaseMs: 1_000 });
      t.clock.advance(1_001);
      expect(await t.b.rescueExpired({ maxStalls: 100 })).toMatchObject([{ id, state: "waiting", attempt: 1 }]);
      await claimOne(t.b, { leaseMs: 1_000, worker: B });
      t.clock.advance(1_001);
      expect(await t.b.rescueExpired({ maxStalls: 100 })).toEqual([{ id, queue: "q", name: "job", state: "dead", attempt: 2, workerId: B.id }]);
      const job = await mustGet(t.b, id);
      expect(job).toMatchObject({ state: "dead", attempt: 2, lease: null, finishedAt: t.clock.now() });
      expect(job.history.map((h) => [h.attempt, h.workerId, h.outcome])).toEqual([
        [1, A.id, "lease-expired"],
        [2, B.id, "lease-expired"],
      ]);
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("rescues at most `limit` jobs per call", async () => {
      await enqueueMany(t.b, 5);
      await claim(t.b, { limit: 5, leaseMs: 1_000 });
      t.clock.advance(1_001);
      expect(await t.b.rescueExpired({ limit: 2 })).toHaveLength(2);
      expect(await t.b.rescueExpired({ limit: 2 })).toHaveLength(2);
      expect(await t.b.rescueExpired({ limit: 2 })).toHaveLength(1);
      expect(await countsOf(t.b)).toEqual(counts({ waiting: 5 }));
    });

    itNeeds(t, ["clockDriven"])("two concurrent rescuers rescue each job once in total", async () => {
      const ids = await enqueueMany(t.b, 40);
      await claim(t.b, { limit: 40, leaseMs: 1_000 });
      t.clock.advance(1_001);
      const results = await Promise.all([t.b.rescueExpired(), t.b.rescueExpired(), t.b.rescueExpired()]);
      await expectRescuedOnce(t.b, results.flat(), ids);
    });

    itNeeds(
      t,
      ["clockDriven"],
      !t.factory.openSecond && "the store cannot open a second connection",
    )("rescuers on two connections rescue each job once in total [needs factory.openSecond]", async () => {
      const ids = await enqueueMany(t.b, 40);
      await claim(t.b, { limit: 40, leaseMs: 1_000 });
      t.clock.advance(1_001);
      const other = await t.second();
      const results = await Promise.all([t.b.rescueExpired(), other.rescueExpired(), t.b.rescueExpired(), other.rescueExpired()]);
      await expectRescuedOnce(t.b, results.flat(), ids);
    });
  });

  describe("promoteDue", () => {
    itNeeds(t, ["jobRecords", "clockDriven"])("relabels due scheduled jobs as waiting and returns how many; future ones wait their turn", async () => {
      await enqueueMany(t.b, 3, (i) => ({ jobId: `soon-${i}`, delayMs: 1_000 }));
      await enqueueOne(t.b, { jobId: "later", delayMs: 5_000 });
      expect(await t.b.promoteDue()).toBe(0);
      t.clock.advance(2_000);
      expect(await t.b.promoteDue()).toBe(3);
      expect(await t.b.promoteDue()).toBe(0);
      for (let i = 0; i < 3; i++) expect((await mustGet(t.b, `soon-${i}`)).state).toBe("waiting");
      expect((await mustGet(t.b, "later")).state).toBe("scheduled");
      expect(await countsOf(t.b)).toEqual(counts({ waiting: 3, scheduled: 1 }));
      t.clock.advance(3_000);
      expect(await t.b.promoteDue()).toBe(1);
      expect((await claim(t.b, { limit: 10 })).map((c) => c.job.id).sort()).toEqual(["later", "soon-0", "soon-1", "soon-2"]);
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("promotes jobs waiting out a retry delay once it has passed", async () => {
      const id = await enqueueOne(t.b);
      const c = await claimOne(t.b);
      await t.b.fail([{ lease: c.lease, error: errorInfo("x"), retryDelayMs: 500 }]);
      expect(await t.b.promoteDue()).toBe(0);
      t.clock.advance(500);
      expect(await t.b.promoteDue()).toBe(1);
      expect(await mustGet(t.b, id)).toMatchObject({ state: "waiting", attempt: 1 });
    });
  });

  describe("prune", () => {
    /** Enqueues, claims and completes `n` jobs (one per ms so their finish times differ). */
    async function completeJobs(n: number, input: Parameters<typeof spec>[0] = {}): Promise<string[]> {
      const ids: string[] = [];
      for (let i = 0; i < n; i++) {
        const id = await enqueueOne(t.b, input);
        const c = await claimOne(t.b, { queues: [input.queue ?? "q"] });
        expect(c.job.id).toBe(id);
        await t.b.complete([{ lease: c.lease, result: i }]);
        ids.push(id);
        t.clock.advance(1);
      }
      return ids;
    }

    async function killJobs(n: number, input: Parameters<typeof spec>[0] = {}): Promise<string[]> {
      const ids: string[] = [];
      for (let i = 0; i < n; i++) {
        const id = await enqueueOne(t.b, input);
        const c = await claimOne(t.b, { queues: [input.queue ?? "q"] });
        await t.b.fail([{ lease: c.lease, error: errorInfo("x"), retryDelayMs: null }]);
        ids.push(id);
        t.clock.advance(1);
      }
      return ids;
    }

    itNeeds(t, ["jobRecords", "clockDriven"])("deletes completed jobs once their retention has passed, not before", async () => {
      const [id] = await completeJobs(1, { removeOnComplete: { ageMs: 10_000 } });
      const finishedAt = (await mustGet(t.b, id!)).finishedAt!;
      t.clock.set(finishedAt + 10_000 - 1);
      expect(await t.b.prune()).toEqual({ jobs: 0, idempotencyKeys: 0 });
      expect(await t.b.get(id!)).not.toBeNull();
      t.clock.set(finishedAt + 10_001);
      expect(await t.b.prune()).toEqual({ jobs: 1, idempotencyKeys: 0 });
      expect(await t.b.get(id!)).toBeNull();
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("deletes completed jobs after the default 24 h and dead jobs after the default 7 days", async () => {
      const [done] = await completeJobs(1);
      const [dead] = await killJobs(1);
      t.clock.advance(24 * 3_600_000 + 10);
      expect((await t.b.prune()).jobs).toBe(1);
      expect(await t.b.get(done!)).toBeNull();
      expect(await t.b.get(dead!)).not.toBeNull();
      t.clock.advance(6 * 24 * 3_600_000);
      expect((await t.b.prune()).jobs).toBe(1);
      expect(await t.b.get(dead!)).toBeNull();
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("deletes dead jobs by their own retention (removeOnFail)", async () => {
      const [dead] = await killJobs(1, { removeOnFail: { ageMs: 1_000 } });
      t.clock.advance(1_001);
      expect((await t.b.prune()).jobs).toBe(1);
      expect(await t.b.get(dead!)).toBeNull();
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("never deletes scheduled, waiting or active jobs", async () => {
      await enqueueOne(t.b, { jobId: "scheduled", delayMs: 400 * 24 * 3_600_000 });
      await enqueueOne(t.b, { jobId: "active" });
      await claimOne(t.b, { leaseMs: 500 * 24 * 3_600_000 });
      await enqueueOne(t.b, { jobId: "waiting" });
      t.clock.advance(365 * 24 * 3_600_000);
      expect(await t.b.prune({ maxCompletedPerQueue: 0, maxDeadPerQueue: 0 })).toEqual({ jobs: 0, idempotencyKeys: 0 });
      expect(await countsOf(t.b)).toEqual(counts({ scheduled: 1, waiting: 1, active: 1 }));
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("keeps at most maxCompletedPerQueue completed jobs per queue, the newest", async () => {
      const a = await completeJobs(5, { queue: "qa" });
      const b = await completeJobs(3, { queue: "qb" });
      expect((await t.b.prune({ maxCompletedPerQueue: 2 })).jobs).toBe(4);
      expect((await t.b.list({ queue: "qa" })).map((j) => j.id).sort()).toEqual(a.slice(3).sort());
      expect((await t.b.list({ queue: "qb" })).map((j) => j.id).sort()).toEqual(b.slice(1).sort());
    });

    itNeeds(t, ["jobRecords", "clockDriven", "cancel"])("counts cancelled jobs with completed ones for maxCompletedPerQueue", async () => {
      const [older] = await completeJobs(1);
      const cancelled = await enqueueOne(t.b);
      expect(await t.b.cancel(cancelled)).toBe("cancelled");
      expect((await t.b.prune({ maxCompletedPerQueue: 1 })).jobs).toBe(1);
      expect(await t.b.get(older!)).toBeNull();
      expect(await t.b.get(cancelled)).not.toBeNull();
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("keeps at most maxDeadPerQueue dead jobs per queue, the newest", async () => {
      const dead = await killJobs(3);
      expect((await t.b.prune({ maxDeadPerQueue: 1 })).jobs).toBe(2);
      expect((await t.b.list()).map((j) => j.id)).toEqual([dead[2]]);
    });

    itNeeds(t, ["jobRecords", "clockDriven"])(
      "keeps jobs with retention null (removeOnComplete/removeOnFail: false) forever, outside the count limits",
      async () => {
        const [keptDone] = await completeJobs(1, { removeOnComplete: false });
        const [keptDead] = await killJobs(1, { removeOnFail: false });
        t.clock.advance(9 * 365 * 24 * 3_600_000);
        expect(await t.b.prune({ maxCompletedPerQueue: 0, maxDeadPerQueue: 0 })).toEqual({ jobs: 0, idempotencyKeys: 0 });
        expect((await mustGet(t.b, keptDone!)).state).toBe("completed");
        expect((await mustGet(t.b, keptDead!)).state).toBe("dead");
      },
    );

    itNeeds(t, ["clockDriven"])("deletes at most `limit` rows per call", async () => {
      await completeJobs(10, { removeOnComplete: { ageMs: 1 } });
      t.clock.advance(1_000);
      expect((await t.b.prune({ limit: 4 })).jobs).toBe(4);
      expect((await t.b.prune({ limit: 4 })).jobs).toBe(4);
      expect((await t.b.prune({ limit: 4 })).jobs).toBe(2);
      expect((await t.b.prune({ limit: 4 })).jobs).toBe(0);
    });

    itNeeds(t, ["clockDriven", "idempotencyKeys"])("deletes expired idempotency keys and only those", async () => {
      expect(await t.b.idempotency.once("short", 1_000)).toBe(true);
      expect(await t.b.idempotency.once("long", 60_000)).toBe(true);
      t.clock.advance(1_001);
      expect(await t.b.prune()).toEqual({ jobs: 0, idempotencyKeys: 1 });
      expect(await t.b.idempotency.once("long", 60_000)).toBe(false);
      expect(await t.b.idempotency.once("short", 1_000)).toBe(true);
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("two concurrent prunes do not error and delete each job once in total", async () => {
      await completeJobs(20, { removeOnComplete: { ageMs: 1 } });
      t.clock.advance(1_000);
      const results = await Promise.all([t.b.prune(), t.b.prune()]);
      expect(results.reduce((sum, r) => sum + r.jobs, 0)).toBe(20);
      expect(await t.b.list()).toEqual([]);
    });

    itNeeds(
      t,
      ["jobRecords", "clockDriven"],
      !t.factory.openSecond && "the store cannot open a second connection",
    )("prunes on two connections do not error and delete each job once in total [needs factory.openSecond]", async () => {
      await completeJobs(20, { removeOnComplete: { ageMs: 1 } });
      t.clock.advance(1_000);
      const other = await t.second();
      const results = await Promise.all([t.b.prune(), other.prune(), t.b.prune(), other.prune()]);
      expect(results.reduce((sum, r) => sum + r.jobs, 0)).toBe(20);
      expect(await t.b.list()).toEqual([]);
    });
  });
}

async function expectRescuedOnce(b: Backend, rescued: readonly RescuedJob[], ids: readonly string[]): Promise<void> {
  expect(rescued.map((r) => r.id).sort()).toEqual([...ids].sort());
  for (const id of ids) {
    const job = await mustGet(b, id);
    // One worker held all of them: no stall is counted; one attempt each is.
    expect(job).toMatchObject({ state: "waiting", stalls: 0, attempt: 1 });
    expect(job.history).toHaveLength(1);
  }
}
