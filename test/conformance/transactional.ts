import { describe, expect, it } from "vitest";
import type { CompletionProbe } from "./fixtures.js";
import { A, B, claimOne, enqueueOne, mustGet, type SuiteContext } from "./fixtures.js";

export function transactionalCompletionTests(t: SuiteContext): void {
  const declared = t.factory.capabilities.transactionalCompletion;

  function probe(): CompletionProbe {
    if (!t.factory.completionProbe) {
      throw new Error("a factory declaring transactionalCompletion must provide completionProbe");
    }
    return t.factory.completionProbe;
  }

  function begin() {
    const fn = t.b.beginCompletion?.bind(t.b);
    if (!fn) throw new Error("capabilities.transactionalCompletion is true but beginCompletion is missing");
    return fn;
  }

  describe("transactional completion", () => {
    it("beginCompletion exists exactly when capabilities.transactionalCompletion is true", () => {
      expect(typeof t.b.beginCompletion === "function").toBe(t.b.capabilities.transactionalCompletion);
    });

    it.skipIf(!declared)(
      "commit completes the job and applies the handler's writes together [needs transactionalCompletion]",
      async () => {
        await probe().setup(t.b);
        const id = await enqueueOne(t.b);
        const c = await claimOne(t.b, { worker: A });
        const tx = await begin()(c.lease);
        await probe().write(tx.client, "m-1");
        expect(await tx.commit({ saved: true })).toBe("applied");
        expect(await probe().read(t.b)).toEqual(["m-1"]);
        const job = await mustGet(t.b, id);
        expect(job).toMatchObject({ state: "completed", result: { saved: true }, finishedAt: t.clock.now(), lease: null });
        expect(job.history).toMatchObject([{ attempt: 1, workerId: A.id, outcome: "completed" }]);
      },
    );

    it.skipIf(!declared)(
      "rollback discards the handler's writes and leaves the job active under its lease [needs transactionalCompletion]",
      async () => {
        await probe().setup(t.b);
        const id = await enqueueOne(t.b);
        const c = await claimOne(t.b);
        const tx = await begin()(c.lease);
        await probe().write(tx.client, "m-rolled-back");
        await tx.rollback();
        expect(await probe().read(t.b)).toEqual([]);
        expect(await mustGet(t.b, id)).toMatchObject({ state: "active", lease: { token: c.lease.token } });
        expect(await t.b.complete([{ lease: c.lease, result: null }])).toEqual(["applied"]);
      },
    );

    it.skipIf(!declared)(
      "commit under a lease lost meanwhile is stale and rolls the handler's writes back [needs transactionalCompletion]",
      async () => {
        await probe().setup(t.b);
        const id = await enqueueOne(t.b);
        const a = await claimOne(t.b, { worker: A, leaseMs: 1_000 });
        const tx = await begin()(a.lease);
        await probe().write(tx.client, "m-stale");
        t.clock.advance(1_001);
        // Rescue and re-claim happen on another connection when there is one: the open transaction
        // must not block them for ever, nor be allowed to commit afterwards.
        const other = t.factory.openSecond ? await t.second() : t.b;
        expect(await other.rescueExpired()).toHaveLength(1);
        const b = await claimOne(other, { worker: B });
        expect(await tx.commit({ by: "A" })).toBe("stale");
        expect(await probe().read(t.b)).toEqual([]);
        expect(await mustGet(t.b, id)).toMatchObject({ state: "active", result: null, lease: { token: b.lease.token, worker: B } });
      },
    );
  });
}
