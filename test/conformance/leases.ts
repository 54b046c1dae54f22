import { describe, expect, it } from "vitest";
import { A, B, claim, claimOne, enqueueMany, enqueueOne, errorInfo, mustGet, spec, type SuiteContext, itNeeds } from "./fixtures.js";

export function leaseTests(t: SuiteContext): void {
  describe("heartbeat", () => {
    itNeeds(t, ["jobRecords", "clockDriven"])("extends held leases to now + leaseMs and reports nothing lost", async () => {
      await enqueueMany(t.b, 3);
      const claimed = await claim(t.b, { limit: 3, leaseMs: 1_000 });
      t.clock.advance(800);
      expect(
        await t.b.heartbeat(
          claimed.map((c) => c.lease),
          5_000,
        ),
      ).toEqual({ lost: [] });
      for (const c of claimed) {
        const job = await mustGet(t.b, c.job.id);
        expect(job.lease).toMatchObject({ token: c.lease.token, expiresAt: t.clock.now() + 5_000, worker: A });
        expect(job.state).toBe("active");
      }
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("a heartbeated job is not rescued after its original expiry, only after the extended one", async () => {
      const id = await enqueueOne(t.b);
      const c = await claimOne(t.b, { leaseMs: 1_000 });
      t.clock.advance(800);
      await t.b.heartbeat([c.lease], 1_000);
      t.clock.advance(800); // past the original expiry (1000), before the extended one (1800)
      expect(await t.b.rescueExpired()).toEqual([]);
      expect(await mustGet(t.b, id)).toMatchObject({ state: "active", lease: { token: c.lease.token } });
      t.clock.advance(201);
      expect((await t.b.rescueExpired()).map((r) => r.id)).toEqual([id]);
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("reports reason `expired` when the lease was rescued and the job re-claimed by another worker", async () => {
      await enqueueOne(t.b);
      const a = await claimOne(t.b, { leaseMs: 1_000, worker: A });
      t.clock.advance(1_001);
      expect(await t.b.rescueExpired()).toHaveLength(1);
      const b = await claimOne(t.b, { worker: B });
      const result = await t.b.heartbeat([a.lease, b.lease], 10_000);
      expect(result.lost).toEqual([{ lease: a.lease, reason: "expired" }]);
      // The new holder's lease was extended, not disturbed.
      expect((await mustGet(t.b, b.job.id)).lease).toMatchObject({ token: b.lease.token, worker: B, expiresAt: t.clock.now() + 10_000 });
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("reports reason `expired` when the lease was rescued and the job waits to be claimed again", async () => {
      await enqueueOne(t.b);
      const a = await claimOne(t.b, { leaseMs: 1_000 });
      t.clock.advance(1_001);
      await t.b.rescueExpired();
      expect((await t.b.heartbeat([a.lease], 10_000)).lost).toEqual([{ lease: a.lease, reason: "expired" }]);
      expect((await mustGet(t.b, a.job.id)).state).toBe("waiting");
    });

    itNeeds(t, ["cancel"])("reports reason `cancelled` when the job was cancelled while active", async () => {
      await enqueueOne(t.b);
      const c = await claimOne(t.b);
      expect(await t.b.cancel(c.job.id)).toBe("cancelled");
      expect((await t.b.heartbeat([c.lease], 10_000)).lost).toEqual([{ lease: c.lease, reason: "cancelled" }]);
    });

    itNeeds(t, ["clockDriven", "cancel"])("reports reason `gone` when the job was deleted (pruned after cancellation)", async () => {
      await enqueueOne(t.b, { removeOnComplete: { ageMs: 1_000 } });
      // A backend may keep a cancelled row until its lease would have expired (so the worker can
      // still learn "cancelled"); past both retention and lease, it must be prunable.
      const c = await claimOne(t.b, { leaseMs: 1_000 });
      await t.b.cancel(c.job.id);
      t.clock.advance(1_001);
      expect((await t.b.prune()).jobs).toBe(1);
      expect((await t.b.heartbeat([c.lease], 10_000)).lost).toEqual([{ lease: c.lease, reason: "gone" }]);
    });

    it("reports reason `gone` for a job id the store never had", async () => {
      const lease = { jobId: "never-existed", token: 1 };
      expect((await t.b.heartbeat([lease], 10_000)).lost).toEqual([{ lease, reason: "gone" }]);
    });

    itNeeds(t, ["jobRecords", "clockDriven", "cancel"])("in a mixed batch reports only the lost leases, with their reasons, and extends the rest", async () => {
      await t.b.enqueue(["keep-1", "cancel-me", "keep-2", "expire-me"].map((jobId) => spec({ jobId })));
      const byId = new Map((await claim(t.b, { limit: 3, leaseMs: 5_000 })).map((c) => [c.job.id, c]));
      const [keep1, cancelMe, keep2] = [byId.get("keep-1"), byId.get("cancel-me"), byId.get("keep-2")];
      const expireMe = await claimOne(t.b, { leaseMs: 1_000 });
      expect(expireMe.job.id).toBe("expire-me");
      await t.b.cancel(cancelMe!.job.id);
      t.clock.advance(1_001);
      await t.b.rescueExpired();
      const ghost = { jobId: "ghost", token: 7 };
      const result = await t.b.heartbeat([keep1!.lease, cancelMe!.lease, ghost, keep2!.lease, expireMe.lease], 5_000);
      expect(sortLost(result.lost)).toEqual(
        sortLost([
          { lease: cancelMe!.lease, reason: "cancelled" },
          { lease: ghost, reason: "gone" },
          { lease: expireMe.lease, reason: "expired" },
        ]),
      );
      for (const kept of [keep1!, keep2!]) {
        expect((await mustGet(t.b, kept.job.id)).lease?.expiresAt).toBe(t.clock.now() + 5_000);
      }
    });
  });

  describe("fencing", () => {
    itNeeds(t, ["jobRecords", "clockDriven"])(
      "after rescue and re-claim by B, A's late complete/fail/release/progress are stale and change nothing; B's complete applies",
      async () => {
        const id = await enqueueOne(t.b, { attempts: 5 });
        const a = await claimOne(t.b, { worker: A, leaseMs: 1_000 });
        expect(await t.b.progress(a.lease, { step: "a-1" })).toBe("applied");
        t.clock.advance(1_001);
        expect(await t.b.rescueExpired()).toHaveLength(1);
        const b = await claimOne(t.b, { worker: B });
        expect(b.lease.token).toBeGreaterThan(a.lease.token);
        const before = await mustGet(t.b, id);

        expect(await t.b.complete([{ lease: a.lease, result: { by: "A" } }])).toEqual(["stale"]);
        expect(await t.b.fail([{ lease: a.lease, error: errorInfo("late A"), retryDelayMs: 0 }])).toEqual(["stale"]);
        expect(await t.b.fail([{ lease: a.lease, error: errorInfo("late A"), retryDelayMs: null }])).toEqual(["stale"]);
        expect(await t.b.release([a.lease])).toEqual(["stale"]);
        expect(await t.b.progress(a.lease, { step: "a-late" })).toBe("stale");
        expect(await mustGet(t.b, id)).toEqual(before);

        expect(await t.b.complete([{ lease: b.lease, result: { by: "B" } }])).toEqual(["applied"]);
        const done = await mustGet(t.b, id);
        expect(done).toMatchObject({ state: "completed", result: { by: "B" }, attempt: 2 });
        expect(done.history.at(-1)).toMatchObject({ attempt: 2, workerId: B.id, outcome: "completed" });
      },
    );

    itNeeds(t, ["jobRecords", "clockDriven"])(
      "a job kept for 0 ms (removeOnComplete / removeOnFail: true) re-claimed by B is not deleted by A's late complete or fail; B's complete deletes it",
      async () => {
        const id = await enqueueOne(t.b, { attempts: 5, removeOnComplete: true, removeOnFail: true });
        const a = await claimOne(t.b, { worker: A, leaseMs: 1_000 });
        t.clock.advance(1_001);
        expect(await t.b.rescueExpired()).toHaveLength(1);
        const b = await claimOne(t.b, { worker: B });
        const before = await mustGet(t.b, id);

        expect(await t.b.complete([{ lease: a.lease, result: { by: "A" } }])).toEqual(["stale"]);
        expect(await t.b.fail([{ lease: a.lease, error: errorInfo("late A"), retryDelayMs: null }])).toEqual(["stale"]);
        expect(await mustGet(t.b, id)).toEqual(before);

        expect(await t.b.complete([{ lease: b.lease, result: { by: "B" } }])).toEqual(["applied"]);
        expect(await t.b.get(id)).toBeNull();
      },
    );

    itNeeds(t, ["jobRecords", "clockDriven"])("after rescue without a re-claim, the old holder's complete is stale and the job stays waiting", async () => {
      const id = await enqueueOne(t.b);
      const a = await claimOne(t.b, { leaseMs: 1_000 });
      t.clock.advance(1_001);
      await t.b.rescueExpired();
      const before = await mustGet(t.b, id);
      expect(await t.b.complete([{ lease: a.lease, result: 1 }])).toEqual(["stale"]);
      expect(await t.b.release([a.lease])).toEqual(["stale"]);
      expect(await mustGet(t.b, id)).toEqual(before);
      expect(before.state).toBe("waiting");
    });

    itNeeds(t, ["jobRecords"])("a token that was never issued is stale, even while the job is active", async () => {
      const id = await enqueueOne(t.b);
      const c = await claimOne(t.b);
      const forged = { jobId: id, token: c.lease.token + 1 };
      expect(await t.b.complete([{ lease: forged, result: null }])).toEqual(["stale"]);
      expect(await t.b.progress(forged, 50)).toBe("stale");
      expect(await mustGet(t.b, id)).toMatchObject({ state: "active", progress: null, lease: { token: c.lease.token } });
    });

    itNeeds(t, ["jobRecords"])("settling twice with the same lease: the second call is stale", async () => {
      const id = await enqueueOne(t.b);
      const c = await claimOne(t.b);
      expect(await t.b.complete([{ lease: c.lease, result: "first" }])).toEqual(["applied"]);
      expect(await t.b.complete([{ lease: c.lease, result: "second" }])).toEqual(["stale"]);
      expect(await t.b.fail([{ lease: c.lease, error: errorInfo("late"), retryDelayMs: null }])).toEqual(["stale"]);
      const job = await mustGet(t.b, id);
      expect(job).toMatchObject({ state: "completed", result: "first", error: null });
      expect(job.history).toHaveLength(1);
    });

    itNeeds(t, ["jobRecords"])("a batch settle returns one result per item, in input order", async () => {
      await enqueueMany(t.b, 3, (i) => ({ jobId: `s${i}` }));
      const [c0, c1, c2] = await claim(t.b, { limit: 3 });
      const stale = { jobId: c1!.job.id, token: c1!.lease.token + 100 };
      expect(
        await t.b.complete([
          { lease: stale, result: null },
          { lease: c0!.lease, result: "r0" },
          { lease: { jobId: "nope", token: 1 }, result: null },
          { lease: c2!.lease, result: "r2" },
        ]),
      ).toEqual(["stale", "applied", "stale", "applied"]);
      expect((await mustGet(t.b, c1!.job.id)).state).toBe("active");
      expect((await mustGet(t.b, c0!.job.id)).result).toBe("r0");
    });
  });
}

function sortLost<T extends { lease: { jobId: string } }>(lost: readonly T[]): T[] {
  return [...lost].sort((x, y) => x.lease.jobId.localeCompare(y.lease.jobId));
}
