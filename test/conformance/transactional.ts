import { describe, expect, it } from "vitest";
import { InvalidInputError } from "../../src/core/errors.js";
import { silentLogger, Worker } from "../../src/index.js";
import { waitFor } from "../helpers/wait-for.js";
import type { CompletionProbe } from "./fixtures.js";
import { A, B, claimOne, enqueueOne, mustGet, NAME, QUEUE, spec, totalJobs, type SuiteContext, itNeeds } from "./fixtures.js";

/**
 * A backend that declares no transactional enqueue or completion must refuse `{ tx }` and
 * `ctx.tx()` loudly: one that ignored the caller's transaction would store a job the caller's
 * rollback was meant to take back, and a handler's writes would commit apart from its completion.
 */
export function transactionRefusalTests(t: SuiteContext): void {
  const { transactionalEnqueue, transactionalCompletion } = t.factory.capabilities;

  describe("transactions a backend does not declare", () => {
    itNeeds(
      t,
      ["jobRecords"],
      transactionalEnqueue && "the store has transactional enqueue",
    )("enqueue(…, { tx }) is refused and stores nothing [no transactionalEnqueue]", async () => {
      // A client that would take any statement: a backend that ignored it would just enqueue.
      const tx = { query: async () => ({ rows: [], rowCount: 0 }) };
      await expect(t.b.enqueue([spec({ jobId: "in-tx" })], { tx })).rejects.toThrow(InvalidInputError);
      await expect(t.b.enqueue([spec({ jobId: "in-tx" })], { tx })).rejects.toThrow(/transaction/);
      expect(await t.b.get("in-tx")).toBeNull();
      expect(await totalJobs(t.b)).toBe(0);
    });

    itNeeds(
      t,
      ["jobRecords"],
      transactionalCompletion && "the store has transactional completion",
    )("ctx.tx() throws in the handler, and the attempt fails instead of completing [no transactionalCompletion]", async () => {
      const errors: unknown[] = [];
      const w = new Worker({
        backend: t.b,
        queues: QUEUE,
        logger: silentLogger,
        pollIntervalMs: 20,
        handlers: {
          [NAME]: async (_job, ctx) => {
            try {
              await ctx.tx();
            } catch (error) {
              errors.push(error);
              throw error;
            }
            return "committed outside any transaction";
          },
        },
      });
      try {
        const id = await enqueueOne(t.b, { attempts: 1 });
        await waitFor(async () => (await mustGet(t.b, id)).state === "dead", { timeoutMs: 10_000, description: "the attempt failed" });
        expect(errors).toHaveLength(1);
        expect(errors[0]).toBeInstanceOf(InvalidInputError);
        expect((await mustGet(t.b, id)).error?.message).toMatch(/ctx\.tx\(\) needs a backend with transactional completion/);
      } finally {
        await w.close({ force: true });
      }
    });
  });
}

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

    itNeeds(
      t,
      ["jobRecords"],
      !declared && "the store has no transactional completion",
    )("commit completes the job and applies the handler's writes together [needs transactionalCompletion]", async () => {
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
    });

    itNeeds(
      t,
      ["jobRecords"],
      !declared && "the store has no transactional completion",
    )("rollback discards the handler's writes and leaves the job active under its lease [needs transactionalCompletion]", async () => {
      await probe().setup(t.b);
      const id = await enqueueOne(t.b);
      const c = await claimOne(t.b);
      const tx = await begin()(c.lease);
      await probe().write(tx.client, "m-rolled-back");
      await tx.rollback();
      expect(await probe().read(t.b)).toEqual([]);
      expect(await mustGet(t.b, id)).toMatchObject({ state: "active", lease: { token: c.lease.token } });
      expect(await t.b.complete([{ lease: c.lease, result: null }])).toEqual(["applied"]);
    });

    itNeeds(
      t,
      ["jobRecords", "clockDriven"],
      !declared && "the store has no transactional completion",
    )("commit under a lease lost meanwhile is stale and rolls the handler's writes back [needs transactionalCompletion]", async () => {
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
    });
  });
}
