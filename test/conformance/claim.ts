import { describe, expect, it } from "vitest";
import type { Backend, ClaimedJob } from "../../src/backend/contract.js";
import { B, LEASE_MS, QUEUE, claim, claimOne, enqueueMany, enqueueOne, errorInfo, mustGet, spec, worker, type SuiteContext, itNeeds } from "./fixtures.js";

export function claimTests(t: SuiteContext): void {
  describe("claim", () => {
    it("returns [] when nothing is due", async () => {
      await enqueueOne(t.b, { delayMs: 1_000 });
      expect(await claim(t.b, { limit: 10 })).toEqual([]);
    });

    it("respects limit", async () => {
      await enqueueMany(t.b, 5);
      expect(await claim(t.b, { limit: 3 })).toHaveLength(3);
      expect(await claim(t.b, { limit: 3 })).toHaveLength(2);
      expect(await claim(t.b, { limit: 3 })).toHaveLength(0);
    });

    itNeeds(t, ["jobRecords"])("takes only from the listed queues", async () => {
      await t.b.enqueue([
        ...["a1", "a2"].map((jobId) => spec({ jobId, queue: "alpha" })),
        ...["b1", "b2"].map((jobId) => spec({ jobId, queue: "beta" })),
        ...["g1", "g2"].map((jobId) => spec({ jobId, queue: "gamma" })),
      ]);
      const got = await claim(t.b, { queues: ["alpha", "gamma"], limit: 10 });
      expect(got.map((c) => c.job.id).sort()).toEqual(["a1", "a2", "g1", "g2"]);
      expect((await mustGet(t.b, "b1")).state).toBe("waiting");
      expect((await claim(t.b, { queues: ["beta"], limit: 10 })).map((c) => c.job.id).sort()).toEqual(["b1", "b2"]);
    });

    itNeeds(t, ["jobRecords", "priorities"])("claims only jobs whose name is in `names`; others are never claimed and stay waiting", async () => {
      await enqueueOne(t.b, { jobId: "unknown-name", name: "resize-image", priority: -5 });
      await enqueueOne(t.b, { jobId: "mine", name: "send-email" });
      const got = await claim(t.b, { names: ["send-email", "charge-card"], limit: 10 });
      expect(got.map((c) => c.job.id)).toEqual(["mine"]);
      expect(await claim(t.b, { names: ["send-email", "charge-card"], limit: 10 })).toEqual([]);
      expect(await mustGet(t.b, "unknown-name")).toMatchObject({ state: "waiting", attempt: 0, lease: null });
      expect((await claimOne(t.b, { names: ["resize-image"] })).job.id).toBe("unknown-name");
    });

    itNeeds(t, ["jobRecords", "pause"])("does not claim from a paused queue; resume makes its jobs claimable; other queues are unaffected", async () => {
      await enqueueOne(t.b, { jobId: "held" });
      await enqueueOne(t.b, { jobId: "free", queue: "other" });
      await t.b.pause(QUEUE);
      expect((await claim(t.b, { queues: [QUEUE, "other"], limit: 10 })).map((c) => c.job.id)).toEqual(["free"]);
      expect((await mustGet(t.b, "held")).state).toBe("waiting");
      await t.b.resume(QUEUE);
      expect((await claimOne(t.b)).job.id).toBe("held");
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("marks the job active with attempt 1, startedAt = now, and a lease that expires at now + leaseMs", async () => {
      const id = await enqueueOne(t.b);
      t.clock.advance(2_000);
      const now = t.clock.now();
      const c = await claimOne(t.b, { worker: B, leaseMs: 12_345 });
      expect(c.leaseExpiresAt).toBe(now + 12_345);
      expect(c.lease.jobId).toBe(id);
      expect(c.job).toMatchObject({ id, state: "active", attempt: 1, startedAt: now });
      expect(c.job.lease).toEqual({ jobId: id, token: c.lease.token, expiresAt: now + 12_345, worker: B });
      const stored = await mustGet(t.b, id);
      expect(stored).toMatchObject({ state: "active", attempt: 1, startedAt: now, finishedAt: null });
      expect(stored.lease).toEqual({ jobId: id, token: c.lease.token, expiresAt: now + 12_345, worker: B });
    });

    itNeeds(t, ["jobRecords"])("increments attempt on every claim", async () => {
      const id = await enqueueOne(t.b, { attempts: 5 });
      for (let attempt = 1; attempt <= 3; attempt++) {
        const c = await claimOne(t.b);
        expect(c.job.attempt).toBe(attempt);
        await t.b.fail([{ lease: c.lease, error: errorInfo(`fail ${attempt}`), retryDelayMs: 0 }]);
      }
      expect((await mustGet(t.b, id)).attempt).toBe(3);
    });

    itNeeds(t, ["clockDriven"])("gives a lease token greater than the last on every claim of the same job (release, retry and rescue alike)", async () => {
      await enqueueOne(t.b, { attempts: 10 });
      const first = await claimOne(t.b, { leaseMs: 1_000 });
      await t.b.release([first.lease]);
      const second = await claimOne(t.b, { leaseMs: 1_000 });
      await t.b.fail([{ lease: second.lease, error: errorInfo("x"), retryDelayMs: 0 }]);
      const third = await claimOne(t.b, { leaseMs: 1_000 });
      t.clock.advance(1_001);
      expect(await t.b.rescueExpired()).toHaveLength(1);
      const fourth = await claimOne(t.b, { leaseMs: 1_000 });
      // Greater, not "one greater": a store may fold its clock into the token (Redis does, so that
      // no token repeats after a failover lost a claim). A token handed out twice breaks fencing.
      const tokens = [first, second, third, fourth].map((c) => c.lease.token);
      for (let i = 1; i < tokens.length; i++) expect(tokens[i], `claim ${i + 1} of ${tokens.join(", ")}`).toBeGreaterThan(tokens[i - 1]!);
      expect(tokens.every((token) => Number.isSafeInteger(token))).toBe(true);
    });
  });

  describe("claim order across queues", () => {
    itNeeds(t, ["priorities"])("keeps each queue's order, and orders the queues as capabilities.claimAcrossQueues says", async () => {
      // Queue "slow" holds less urgent jobs (priority 5) than queue "urgent" (priority 0).
      await t.b.enqueue([0, 1, 2].map((i) => spec({ queue: "slow", jobId: `slow-${i}`, priority: 5 })));
      await t.b.enqueue([0, 1, 2].map((i) => spec({ queue: "urgent", jobId: `urgent-${i}` })));
      const order: string[] = [];
      for (let i = 0; i < 6; i++) {
        const [c] = await claim(t.b, { queues: ["slow", "urgent"], limit: 1 });
        order.push(c!.job.id);
      }
      expect(order.filter((id) => id.startsWith("slow"))).toEqual(["slow-0", "slow-1", "slow-2"]);
      expect(order.filter((id) => id.startsWith("urgent"))).toEqual(["urgent-0", "urgent-1", "urgent-2"]);
      if (t.factory.capabilities.claimAcrossQueues === "merged") {
        expect(order).toEqual(["urgent-0", "urgent-1", "urgent-2", "slow-0", "slow-1", "slow-2"]);
      } else {
        // Turns: every two claims serve both queues, whatever their priorities.
        for (let i = 0; i < 6; i += 2) expect(new Set(order.slice(i, i + 2).map((id) => id.split("-")[0]))).toEqual(new Set(["slow", "urgent"]));
      }
    });
  });

  describe("claim exclusivity", () => {
    it("20 interleaved claimers over 500 jobs: every job claimed exactly once", async () => {
      const ids = await enqueueMany(t.b, 500);
      const claimed = await drainConcurrently([t.b], 20, 7);
      expectEachOnce(claimed, ids);
    });

    itNeeds(
      t,
      ["jobRecords"],
      !t.factory.openSecond && "the store cannot open a second connection",
    )("claimers on two connections over 500 jobs: every job claimed exactly once [needs factory.openSecond]", async () => {
      const ids = await enqueueMany(t.b, 500);
      const other = await t.second();
      const claimed = await drainConcurrently([t.b, other], 20, 7);
      expectEachOnce(claimed, ids);
      // Both connections see the same final state.
      expect((await mustGet(other, ids[0]!)).state).toBe("active");
    });
  });
}

/** Runs rounds of `claimers` concurrent claim calls spread over `backends` until a round gets nothing. */
async function drainConcurrently(backends: readonly Backend[], claimers: number, limit: number): Promise<ClaimedJob[]> {
  const all: ClaimedJob[] = [];
  for (let round = 0; round < 1_000; round++) {
    const batches = await Promise.all(
      Array.from({ length: claimers }, (_, i) => claim(backends[i % backends.length]!, { worker: worker(`c${i}`), limit, leaseMs: LEASE_MS })),
    );
    const got = batches.flat();
    if (got.length === 0) return all;
    all.push(...got);
  }
  throw new Error("claimers did not drain the queue in 1000 rounds");
}

function expectEachOnce(claimed: readonly ClaimedJob[], ids: readonly string[]): void {
  const seen = new Map<string, number>();
  for (const c of claimed) seen.set(c.job.id, (seen.get(c.job.id) ?? 0) + 1);
  const twice = [...seen].filter(([, n]) => n > 1).map(([id]) => id);
  expect(twice, "jobs claimed more than once").toEqual([]);
  expect([...seen.keys()].sort()).toEqual([...ids].sort());
  // Every claim carries a distinct token, and one per job.
  expect(new Set(claimed.map((c) => `${c.lease.jobId}#${c.lease.token}`)).size).toBe(claimed.length);
}
