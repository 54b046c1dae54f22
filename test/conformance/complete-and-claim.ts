import { describe, expect, it } from "vitest";
import type { ClaimedJob } from "../../src/backend/contract.js";
import { A, B, claim, enqueueMany, LEASE_MS, mustGet, NAME, QUEUE, type SuiteContext } from "./fixtures.js";

/**
 * `completeAndClaim` (capability `completeAndClaim`): a batch of completions and the next claim in
 * one call, each half exactly as its own call.
 */
export function completeAndClaimTests(t: SuiteContext): void {
  const declared = t.factory.capabilities.completeAndClaim === true;

  describe("completeAndClaim", () => {
    it("exists exactly when capabilities.completeAndClaim is true", () => {
      expect(typeof t.b.completeAndClaim === "function").toBe(declared);
    });

    it.skipIf(!declared)(
      "completes the batch (one result per item, in input order, stale leases refused) and claims the next jobs in claim order [needs capability completeAndClaim]",
      async () => {
        const ids = await enqueueMany(t.b, 6, (i) => ({ data: { i }, priority: i === 5 ? -1 : 0 }));
        const first = await claim(t.b, { limit: 2 });
        expect(first.map((c) => c.job.id)).toEqual([ids[5], ids[0]]);
        t.clock.advance(1_000);
        const stale = { ...first[1]!.lease, token: first[1]!.lease.token + 1 };
        const { settled, claimed } = await t.b.completeAndClaim!(
          [
            { lease: first[0]!.lease, result: { ok: 0 } },
            { lease: stale, result: null },
            { lease: first[1]!.lease, result: { ok: 1 } },
          ],
          { queues: [QUEUE], names: [NAME], worker: B, limit: 3, leaseMs: LEASE_MS },
        );
        expect(settled).toEqual(["applied", "stale", "applied"]);
        // The claim half: the next three in claim order, never the jobs it completed, fresh leases.
        expect(claimed.map((c) => c.job.id)).toEqual([ids[1], ids[2], ids[3]]);
        for (const c of claimed) {
          expect(c.job).toMatchObject({ state: "active", attempt: 1, startedAt: t.clock.now() });
          expect(c.job.lease?.worker).toEqual(B);
          expect(c.leaseExpiresAt).toBe(t.clock.now() + LEASE_MS);
        }
        const done = await mustGet(t.b, ids[5]!);
        expect(done).toMatchObject({ state: "completed", result: { ok: 0 }, finishedAt: t.clock.now(), lease: null });
        expect(done.history).toEqual([
          {
            attempt: 1,
            workerId: A.id,
            host: A.host,
            pid: A.pid,
            startedAt: t.clock.now() - 1_000,
            finishedAt: t.clock.now(),
            outcome: "completed",
            error: null,
          },
        ]);
        expect(await mustGet(t.b, ids[0]!)).toMatchObject({ state: "completed", result: { ok: 1 } });
        // The claimed leases settle like any other.
        expect(await t.b.complete(claimed.map((c) => ({ lease: c.lease, result: null })))).toEqual(["applied", "applied", "applied"]);
      },
    );

    it.skipIf(!declared)(
      "with nothing left to claim still completes, and with nothing to complete still claims [needs capability completeAndClaim]",
      async () => {
        const ids = await enqueueMany(t.b, 2);
        const [c0, c1] = await claim(t.b, { limit: 2 });
        const request = { queues: [QUEUE], names: [NAME], worker: A, limit: 5, leaseMs: LEASE_MS };
        const a = await t.b.completeAndClaim!([{ lease: c0!.lease, result: null }], request);
        expect(a).toEqual({ settled: ["applied"], claimed: [] });
        const b = await t.b.completeAndClaim!(
          [
            { lease: c1!.lease, result: 7 },
            { lease: c1!.lease, result: 8 },
          ],
          request,
        );
        expect(b.settled).toEqual(["applied", "stale"]);
        expect(await mustGet(t.b, ids[1]!)).toMatchObject({ state: "completed", result: 7 });
        const [more] = await enqueueMany(t.b, 1);
        const c = await t.b.completeAndClaim!([], request);
        expect(c.settled).toEqual([]);
        expect(c.claimed.map((x) => x.job.id)).toEqual([more]);
      },
    );

    it.skipIf(!declared)(
      "the claim half answers a job exactly as claim does: every field of its record, its lease and deadline [needs capability completeAndClaim]",
      async () => {
        // Two jobs alike in everything a record shows (payload, meta, options, a failed attempt
        // with its error and history), one claimed by claim and one by completeAndClaim: a store
        // that reads the claim's rows back another way for the second (JSON, say) shows here.
        const alike = {
          data: { text: 'é ✓ "quoted" \\ \u0001', big: 9_007_199_254_740_991, nested: [1, { x: null }, [true]], none: null },
          meta: { tenant: "t-1", tags: ["a", "b"] },
          priority: 3,
          attempts: 4,
          timeoutMs: 1_234,
        };
        const [filler] = await enqueueMany(t.b, 1);
        await enqueueMany(t.b, 2, () => alike);
        const [c0, c1, c2] = await claim(t.b, { limit: 3 });
        expect(c0!.job.id).toBe(filler);
        t.clock.advance(10);
        const error = { name: "TypeError", message: "it broke ✓", stack: "TypeError: it broke ✓\n    at here" };
        expect(await t.b.fail([c1!, c2!].map((c) => ({ lease: c.lease, error, retryDelayMs: 0 })))).toEqual(["applied", "applied"]);
        t.clock.advance(1_000);
        const request = { queues: [QUEUE], names: [NAME], worker: B, limit: 1, leaseMs: LEASE_MS };
        const [byClaim] = await t.b.claim(request);
        const { settled, claimed } = await t.b.completeAndClaim!([{ lease: c0!.lease, result: null }], request);
        expect(settled).toEqual(["applied"]);
        const [byRide] = claimed;
        expect(byClaim!.job.id).toBe(c1!.job.id);
        expect(byRide!.job.id).toBe(c2!.job.id);
        expect(byRide!.job).toMatchObject({ attempt: 2, error, data: alike.data, meta: alike.meta });
        // Apart from the job's id and its lease's token (a fencing token of its own per lease).
        expect(byRide!.job.lease?.token).toBe(byRide!.lease.token);
        const apart = (c: ClaimedJob) => {
          const lease = { ...c.lease, jobId: "(either)", token: 0 };
          return { ...c, job: { ...c.job, id: "(either)", lease: { ...c.job.lease!, ...lease } }, lease };
        };
        expect(apart(byRide!)).toEqual(apart(byClaim!));
      },
    );
  });
}
