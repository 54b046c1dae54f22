/**
 * Dedup windows (`JobOptions.dedup`, rules in src/backend/dedup.ts): a second add with the same
 * key while the window is open is dropped, extends the window, or replaces the waiting job's data
 * and run time (debounce); enforced by the store, also for producers racing on other connections.
 */
import { describe, expect, it } from "vitest";
import type { Backend, EnqueueResult } from "../../src/backend/contract.js";
import { InvalidInputError, UnsupportedByStoreError } from "../../src/core/errors.js";
import { A, claim, claimOne, countsOf, counts, mustGet, QUEUE, spec, type SpecInput, type SuiteContext } from "./fixtures.js";

const TTL = 10_000;

async function add(b: Backend, input: SpecInput): Promise<EnqueueResult> {
  const [result] = await b.enqueue([spec(input)]);
  return result!;
}

export function dedupTests(t: SuiteContext): void {
  it.skipIf(t.factory.capabilities.dedupWindows)(
    "a store without dedup windows (capabilities.dedupWindows false) refuses options.dedup with UnsupportedByStoreError, storing nothing",
    async () => {
      await expect(t.b.enqueue([spec({ dedup: { key: "k", ttlMs: TTL } })])).rejects.toThrow(UnsupportedByStoreError);
      expect((await countsOf(t.b)).waiting).toBe(0);
    },
  );

  describe.skipIf(!t.factory.capabilities.dedupWindows)(t.factory.capabilities.dedupWindows ? "dedup windows" : "dedup windows [needs dedupWindows]", () => {
    it("drop (the default): within the window the first job is kept and returned, nothing is stored", async () => {
      const first = await add(t.b, { data: { v: 1 }, dedup: { key: "k", ttlMs: TTL } });
      expect(first).toEqual({ id: first.id, duplicate: false });
      t.clock.advance(TTL - 1);
      const second = await add(t.b, { data: { v: 2 }, dedup: { key: "k", ttlMs: TTL } });
      expect(second).toEqual({ id: first.id, duplicate: true, dedup: "dropped" });
      expect(await countsOf(t.b)).toEqual(counts({ waiting: 1 }));
      expect((await mustGet(t.b, first.id)).data).toEqual({ v: 1 });
    });

    it("drop: once the window has ended (ttlMs after the first add) the next job is stored and opens a new one", async () => {
      const first = await add(t.b, { dedup: { key: "k", ttlMs: TTL, mode: "drop" } });
      t.clock.advance(TTL);
      const second = await add(t.b, { dedup: { key: "k", ttlMs: TTL, mode: "drop" } });
      expect(second.duplicate).toBe(false);
      expect(second.id).not.toBe(first.id);
      t.clock.advance(TTL - 1);
      expect(await add(t.b, { dedup: { key: "k", ttlMs: TTL } })).toEqual({ id: second.id, duplicate: true, dedup: "dropped" });
    });

    it("drop: the window holds whatever its job's state (a finished job still closes it)", async () => {
      const first = await add(t.b, { dedup: { key: "k", ttlMs: TTL } });
      const claimed = await claimOne(t.b);
      await t.b.complete([{ lease: claimed.lease, result: null }]);
      expect(await add(t.b, { dedup: { key: "k", ttlMs: TTL } })).toEqual({ id: first.id, duplicate: true, dedup: "dropped" });
    });

    it("extend: a repeat is dropped and restarts the window from its own add", async () => {
      const first = await add(t.b, { dedup: { key: "k", ttlMs: TTL, mode: "extend" } });
      t.clock.advance(TTL - 1);
      expect(await add(t.b, { dedup: { key: "k", ttlMs: TTL, mode: "extend" } })).toEqual({ id: first.id, duplicate: true, dedup: "extended" });
      // Past the first window's end, inside the restarted one.
      t.clock.advance(TTL - 1);
      expect(await add(t.b, { dedup: { key: "k", ttlMs: TTL, mode: "extend" } })).toEqual({ id: first.id, duplicate: true, dedup: "extended" });
      t.clock.advance(TTL);
      const fresh = await add(t.b, { dedup: { key: "k", ttlMs: TTL, mode: "extend" } });
      expect(fresh.duplicate).toBe(false);
      expect(await countsOf(t.b)).toEqual(counts({ waiting: 2 }));
    });

    it("replace (debounce): the waiting job takes the new data and its run time moves to now + the new job's delay", async () => {
      const first = await add(t.b, { data: { v: 1 }, delayMs: 1_000, dedup: { key: "k", ttlMs: TTL, mode: "replace" } });
      t.clock.advance(600);
      const now = await t.b.now();
      const second = await add(t.b, { data: { v: 2 }, delayMs: 1_000, dedup: { key: "k", ttlMs: TTL, mode: "replace" } });
      expect(second).toEqual({ id: first.id, duplicate: true, dedup: "replaced" });
      const job = await mustGet(t.b, first.id);
      expect(job.data).toEqual({ v: 2 });
      expect(job.runAt).toBe(now + 1_000);
      expect(job.state).toBe("scheduled");
      // Not due at the first job's original run time any more.
      t.clock.advance(500);
      expect(await claim(t.b)).toEqual([]);
      t.clock.advance(500);
      const claimed = await claimOne(t.b);
      expect(claimed.job.id).toBe(first.id);
      expect(claimed.job.data).toEqual({ v: 2 });
      expect(await countsOf(t.b)).toEqual(counts({ active: 1 }));
    });

    it("replace: a due waiting job pushed into the future is not claimable until then; one pulled to now is", async () => {
      const first = await add(t.b, { data: { v: 1 }, dedup: { key: "k", ttlMs: TTL, mode: "replace" } });
      await add(t.b, { data: { v: 2 }, delayMs: 5_000, dedup: { key: "k", ttlMs: TTL, mode: "replace" } });
      expect(await claim(t.b)).toEqual([]);
      expect((await mustGet(t.b, first.id)).state).toBe("scheduled");
      await add(t.b, { data: { v: 3 }, dedup: { key: "k", ttlMs: TTL, mode: "replace" } });
      const claimed = await claimOne(t.b);
      expect(claimed.job).toMatchObject({ id: first.id, data: { v: 3 } });
    });

    it("replace: once the window's job has started, the new job is stored and opens a new window", async () => {
      const first = await add(t.b, { data: { v: 1 }, dedup: { key: "k", ttlMs: TTL, mode: "replace" } });
      const running = await claimOne(t.b);
      const second = await add(t.b, { data: { v: 2 }, dedup: { key: "k", ttlMs: TTL, mode: "replace" } });
      expect(second.duplicate).toBe(false);
      expect(second.id).not.toBe(first.id);
      expect(running.job.data).toEqual({ v: 1 });
      expect((await mustGet(t.b, second.id)).data).toEqual({ v: 2 });
      // The new window belongs to the new job.
      expect(await add(t.b, { data: { v: 3 }, dedup: { key: "k", ttlMs: TTL, mode: "replace" } })).toEqual({
        id: second.id,
        duplicate: true,
        dedup: "replaced",
      });
      expect((await mustGet(t.b, second.id)).data).toEqual({ v: 3 });
    });

    it("replace restarts the window", async () => {
      const first = await add(t.b, { delayMs: 60_000, dedup: { key: "k", ttlMs: TTL, mode: "replace" } });
      t.clock.advance(TTL - 1);
      await add(t.b, { delayMs: 60_000, dedup: { key: "k", ttlMs: TTL, mode: "replace" } });
      t.clock.advance(TTL - 1);
      expect(await add(t.b, { delayMs: 60_000, dedup: { key: "k", ttlMs: TTL, mode: "replace" } })).toMatchObject({ id: first.id, dedup: "replaced" });
    });

    it("keys are per queue: the same key in another queue is another window", async () => {
      const inQ = await add(t.b, { dedup: { key: "k", ttlMs: TTL } });
      const inOther = await add(t.b, { queue: "other", dedup: { key: "k", ttlMs: TTL } });
      expect(inOther.duplicate).toBe(false);
      expect(inOther.id).not.toBe(inQ.id);
    });

    it("with jobId: an open window decides first; a job it lets through is still deduplicated by id", async () => {
      const first = await add(t.b, { jobId: "order-1", dedup: { key: "k", ttlMs: TTL } });
      expect(first).toEqual({ id: "order-1", duplicate: false });
      // Another id, same key: the window drops it.
      expect(await add(t.b, { jobId: "order-2", dedup: { key: "k", ttlMs: TTL } })).toEqual({ id: "order-1", duplicate: true, dedup: "dropped" });
      expect(await t.b.get("order-2")).toBeNull();
      t.clock.advance(TTL);
      // Window over, id taken: a duplicate by id, as without dedup.
      expect(await add(t.b, { jobId: "order-1", dedup: { key: "k", ttlMs: TTL } })).toEqual({ id: "order-1", duplicate: true });
      expect(await countsOf(t.b)).toEqual(counts({ waiting: 1 }));
    });

    it("repeats of one key within a batch are decided in order: later replaces hand their data to the first job", async () => {
      const results = await t.b.enqueue([
        spec({ data: { v: 1 }, dedup: { key: "k", ttlMs: TTL, mode: "replace" } }),
        spec({ data: { v: 2 }, dedup: { key: "k", ttlMs: TTL, mode: "drop" } }),
        spec({ data: { v: 3 }, dedup: { key: "k", ttlMs: TTL, mode: "replace" } }),
        spec({ data: { other: true } }),
      ]);
      const id = results[0]!.id;
      expect(results.slice(0, 3)).toEqual([
        { id, duplicate: false },
        { id, duplicate: true, dedup: "dropped" },
        { id, duplicate: true, dedup: "replaced" },
      ]);
      expect(results[3]!.duplicate).toBe(false);
      expect((await mustGet(t.b, id)).data).toEqual({ v: 3 });
      expect(await countsOf(t.b)).toEqual(counts({ waiting: 2 }));
    });

    it("a dedup window in an all-or-nothing batch is refused with InvalidInputError, storing nothing", async () => {
      await expect(t.b.enqueue([spec({ dedup: { key: "k", ttlMs: TTL } })], { allOrNothing: true })).rejects.toThrow(InvalidInputError);
      expect(await t.b.list()).toEqual([]);
    });

    it("racing producers on two connections: one job per window, every answer names it", async () => {
      const other = t.factory.openSecond ? await t.second() : t.b;
      for (const mode of ["drop", "extend", "replace"] as const) {
        const key = `race-${mode}`;
        const adds = Array.from({ length: 24 }, (_, i) => add(i % 2 === 0 ? t.b : other, { data: { i }, delayMs: 60_000, dedup: { key, ttlMs: TTL, mode } }));
        const results = await Promise.all(adds);
        const stored = results.filter((r) => !r.duplicate);
        expect(stored, `mode ${mode}`).toHaveLength(1);
        expect(new Set(results.map((r) => r.id)), `mode ${mode}`).toEqual(new Set([stored[0]!.id]));
        const job = await mustGet(t.b, stored[0]!.id);
        expect(job.data).toMatchObject({ i: expect.any(Number) as number });
      }
      expect((await t.b.list({ queue: QUEUE })).length).toBe(3);
    });

    it("bad dedup options are refused at enqueue with InvalidInputError naming the field", () => {
      expect(() => spec({ dedup: { key: "k" } as never })).toThrow(/dedup\.ttlMs is required/);
      expect(() => spec({ dedup: { key: "", ttlMs: 1 } })).toThrow(/dedup\.key/);
      expect(() => spec({ dedup: { key: "k", ttlMs: 0 } })).toThrow(/dedup\.ttlMs must be an integer/);
      expect(() => spec({ dedup: { key: "k", ttlMs: 1, mode: "merge" as never } })).toThrow(/dedup\.mode must be/);
      expect(() => spec({ dedup: { key: "k", ttlMs: 1, window: 5 } as never })).toThrow(/unknown field dedup\.window/);
      expect(() => spec({ dedup: "k" as never })).toThrow(InvalidInputError);
    });

    it("a claimed replace target keeps the data it was claimed with", async () => {
      await add(t.b, { data: { v: 1 }, dedup: { key: "k", ttlMs: TTL, mode: "replace" } });
      const [claimed] = await claim(t.b, { worker: A });
      expect(claimed!.job.data).toEqual({ v: 1 });
      expect((await mustGet(t.b, claimed!.job.id)).data).toEqual({ v: 1 });
    });
  });
}
