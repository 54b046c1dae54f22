import { describe, expect } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import type { Lease } from "../../src/core/job.js";
import { claimOne, enqueueOne, mustGet, one, worker, type SuiteContext, itNeeds } from "./fixtures.js";

/**
 * Which lease expiries count toward a job's quarantine (RescueOptions.maxStalls): only a started
 * job that was its worker's only started one is the likely cause of the worker's death. Every
 * store that counts stalls (clockDriven) keeps the buffered marks (Backend.markBuffered).
 */
export function stallBlameTests(t: SuiteContext): void {
  const mark = (b: Backend, leases: Lease[], buffered: boolean): Promise<void> => {
    expect(typeof b.markBuffered, "a store that counts stalls must implement markBuffered").toBe("function");
    return b.markBuffered!(leases, buffered);
  };

  describe("stall blame", () => {
    itNeeds(t, ["jobRecords", "clockDriven"])(
      "a job held buffered survives worker deaths without a stall, while the job running beside it each time is quarantined",
      async () => {
        const poison = await enqueueOne(t.b, { name: "poison", attempts: 100 });
        const innocent = await enqueueOne(t.b, { name: "innocent", attempts: 100 });
        const poisonStates: string[] = [];
        for (let death = 0; death < 3; death++) {
          // A fresh worker each time (a process dies once): it runs the poison job and holds the
          // innocent one in its prefetch buffer, then dies.
          const w = worker(`dying-${death}`);
          await claimOne(t.b, { worker: w, names: ["poison"], leaseMs: 1_000 });
          const held = await claimOne(t.b, { worker: w, names: ["innocent"], leaseMs: 1_000 });
          await mark(t.b, [held.lease], true);
          t.clock.advance(1_001);
          const rescued = await t.b.rescueExpired({ maxStalls: 3 });
          expect(rescued.map((r) => r.id).sort()).toEqual([innocent, poison].sort());
          poisonStates.push(rescued.find((r) => r.id === poison)!.state);
          expect((await mustGet(t.b, innocent)).stalls).toBe(0);
        }
        expect(poisonStates).toEqual(["waiting", "waiting", "dead"]);
        expect(await mustGet(t.b, poison)).toMatchObject({ state: "dead", stalls: 3 });
        expect(await mustGet(t.b, innocent)).toMatchObject({ state: "waiting", stalls: 0, attempt: 3 });
      },
    );

    itNeeds(t, ["jobRecords", "clockDriven"])("a buffered job marked started again counts like any started job", async () => {
      const id = await enqueueOne(t.b, { attempts: 100 });
      const c = await claimOne(t.b, { worker: worker("starter"), leaseMs: 1_000 });
      await mark(t.b, [c.lease], true);
      await mark(t.b, [c.lease], false);
      t.clock.advance(1_001);
      expect(one(await t.b.rescueExpired({ maxStalls: 1 }))).toMatchObject({ id, state: "dead" });
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("marks are fenced: a stale lease token marks nothing, and a new claim starts unexcused", async () => {
      const id = await enqueueOne(t.b, { attempts: 100 });
      const first = await claimOne(t.b, { worker: worker("one"), leaseMs: 1_000 });
      await mark(
        t.b,
        [
          { jobId: id, token: first.lease.token + 1 },
          { jobId: "no-such-job", token: 1 },
        ],
        true,
      );
      t.clock.advance(1_001);
      expect(one(await t.b.rescueExpired({ maxStalls: 2 }))).toMatchObject({ id, state: "waiting" });
      expect((await mustGet(t.b, id)).stalls).toBe(1);
      // Buffered under the second lease: excused. The third lease is a new claim: blamed again.
      const second = await claimOne(t.b, { worker: worker("two"), leaseMs: 1_000 });
      await mark(t.b, [second.lease], true);
      t.clock.advance(1_001);
      expect(one(await t.b.rescueExpired({ maxStalls: 2 }))).toMatchObject({ id, state: "waiting" });
      expect((await mustGet(t.b, id)).stalls).toBe(1);
      await claimOne(t.b, { worker: worker("three"), leaseMs: 1_000 });
      t.clock.advance(1_001);
      expect(one(await t.b.rescueExpired({ maxStalls: 2 }))).toMatchObject({ id, state: "dead" });
    });

    itNeeds(t, ["jobRecords", "clockDriven"])(
      "a worker that dies running two jobs stalls neither, also when their leases expire apart and are rescued one at a time",
      async () => {
        const w = worker("two-jobs");
        const first = await enqueueOne(t.b, { name: "first", attempts: 100 });
        const second = await enqueueOne(t.b, { name: "second", attempts: 100 });
        await claimOne(t.b, { worker: w, names: ["first"], leaseMs: 1_000 });
        t.clock.advance(500);
        await claimOne(t.b, { worker: w, names: ["second"], leaseMs: 1_000 });
        t.clock.advance(501);
        expect(one(await t.b.rescueExpired({ maxStalls: 1 }))).toMatchObject({ id: first, state: "waiting" });
        // Now the only active job of the dead worker: still not the likely cause.
        t.clock.advance(500);
        expect(one(await t.b.rescueExpired({ maxStalls: 1 }))).toMatchObject({ id: second, state: "waiting" });
        expect(await mustGet(t.b, first)).toMatchObject({ stalls: 0 });
        expect(await mustGet(t.b, second)).toMatchObject({ stalls: 0 });
      },
    );

    // capabilities.claimMarksBuffered: the claim itself records the jobs beyond startsAtOnce as buffered.
    itNeeds(
      t,
      ["jobRecords", "clockDriven"],
      t.factory.capabilities.claimMarksBuffered !== true && "the claim does not mark buffered jobs itself",
    )("a claim with startsAtOnce records the jobs after the first ones as buffered, and says which [claimMarksBuffered]", async () => {
      const ids = [await enqueueOne(t.b, { attempts: 100 }), await enqueueOne(t.b, { attempts: 100 }), await enqueueOne(t.b, { attempts: 100 })];
      const w = worker("prefetching");
      const claimed = await t.b.claim({ queues: ["q"], names: ["job"], worker: w, limit: 3, leaseMs: 1_000, startsAtOnce: 1 });
      expect(claimed.map((c) => [c.job.id, c.markedBuffered === true])).toEqual([
        [ids[0], false],
        [ids[1], true],
        [ids[2], true],
      ]);
      // Its worker dies: only the job it had started is blamed; the buffered ones are excused.
      t.clock.advance(1_001);
      const rescued = await t.b.rescueExpired({ maxStalls: 1 });
      expect(Object.fromEntries(rescued.map((r) => [r.id, r.state]))).toEqual({ [ids[0]!]: "dead", [ids[1]!]: "waiting", [ids[2]!]: "waiting" });
      expect((await mustGet(t.b, ids[1]!)).stalls).toBe(0);
      // A buffered job marked started counts again; startsAtOnce 0 marks every job, and a
      // startsAtOnce beyond the jobs claimed marks none.
      const again = await t.b.claim({ queues: ["q"], names: ["job"], worker: worker("second"), limit: 2, leaseMs: 1_000, startsAtOnce: 0 });
      expect(again.map((c) => c.markedBuffered === true)).toEqual([true, true]);
      await mark(t.b, [again[0]!.lease], false);
      t.clock.advance(1_001);
      const second = await t.b.rescueExpired({ maxStalls: 1 });
      expect(Object.fromEntries(second.map((r) => [r.id, r.state]))).toEqual({ [ids[1]!]: "dead", [ids[2]!]: "waiting" });
      const last = await t.b.claim({ queues: ["q"], names: ["job"], worker: worker("third"), limit: 5, leaseMs: 1_000, startsAtOnce: 5 });
      expect(last.map((c) => [c.job.id, c.markedBuffered === true])).toEqual([[ids[2], false]]);
    });

    itNeeds(
      t,
      ["jobRecords"],
      t.factory.capabilities.claimMarksBuffered === true && "the claim marks buffered jobs itself",
    )("a store without claimMarksBuffered ignores startsAtOnce: no claimed job is marked buffered", async () => {
      await enqueueOne(t.b);
      await enqueueOne(t.b);
      const claimed = await t.b.claim({ queues: ["q"], names: ["job"], worker: worker("w"), limit: 2, leaseMs: 30_000, startsAtOnce: 0 });
      expect(claimed).toHaveLength(2);
      expect(claimed.filter((c) => c.markedBuffered !== undefined)).toEqual([]);
    });
  });
}
