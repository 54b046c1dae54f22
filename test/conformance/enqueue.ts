import { describe, expect, it } from "vitest";
import { DEFAULT_BACKOFF } from "../../src/core/retry.js";
import {
  A,
  B,
  LEASE_MS,
  NAME,
  QUEUE,
  claim,
  claimOne,
  counts,
  countsOf,
  enqueueOne,
  errorInfo,
  mustGet,
  spec,
  type SuiteContext,
  itNeeds,
} from "./fixtures.js";

export function enqueueTests(t: SuiteContext): void {
  describe("enqueue", () => {
    it("returns one result per spec, in input order", async () => {
      const specs = ["e-3", "e-1", "e-2"].map((jobId) => spec({ jobId }));
      expect(await t.b.enqueue(specs)).toEqual([
        { id: "e-3", duplicate: false },
        { id: "e-1", duplicate: false },
        { id: "e-2", duplicate: false },
      ]);
    });

    it("returns generated ids in input order", async () => {
      const specs = [spec(), spec(), spec()];
      const results = await t.b.enqueue(specs);
      expect(results.map((r) => r.id)).toEqual(specs.map((s) => s.id));
      expect(results.map((r) => r.duplicate)).toEqual([false, false, false]);
    });

    itNeeds(t, ["jobRecords"])("returns [] for an empty batch and stores nothing", async () => {
      expect(await t.b.enqueue([])).toEqual([]);
      expect(await t.b.list()).toEqual([]);
    });

    itNeeds(t, ["jobRecords", "clockDriven", "priorities"])(
      "get returns the stored record: data parsed, state waiting, attempt 0, options, createdAt = store now",
      async () => {
        const data = { orderId: 42, items: ["a", "b"], nested: { ok: true, none: null }, text: "héllo 😀" };
        t.clock.advance(12_345);
        await t.b.enqueue([
          spec({
            jobId: "j1",
            name: "send-email",
            data,
            priority: 7,
            attempts: 5,
            backoff: { type: "fixed", delayMs: 250 },
            timeoutMs: 9_000,
          }),
        ]);
        const job = await mustGet(t.b, "j1");
        expect(job).toEqual({
          id: "j1",
          queue: QUEUE,
          name: "send-email",
          data,
          state: "waiting",
          priority: 7,
          attempt: 0,
          maxAttempts: 5,
          backoff: { type: "fixed", delayMs: 250 },
          timeoutMs: 9_000,
          runAt: t.clock.now(),
          createdAt: t.clock.now(),
          startedAt: null,
          finishedAt: null,
          lease: null,
          progress: null,
          result: null,
          error: null,
          history: [],
          stalls: 0,
          replays: 0,
          meta: null,
        });
      },
    );

    itNeeds(t, ["jobRecords", "uniqueIds"])("stores meta beside the payload and returns it parsed; a duplicate does not replace it", async () => {
      const meta = { traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", callbackUrl: "https://example.test/cb", n: [1, null] };
      await enqueueOne(t.b, { jobId: "m", data: { x: 1 }, meta });
      expect(await mustGet(t.b, "m")).toMatchObject({ data: { x: 1 }, meta });
      expect(await t.b.enqueue([spec({ jobId: "m", meta: { other: true } })])).toEqual([{ id: "m", duplicate: true }]);
      expect((await mustGet(t.b, "m")).meta).toEqual(meta);
      const c = await claimOne(t.b);
      expect(c.job.meta).toEqual(meta);
    });

    itNeeds(t, ["jobRecords"])("stores the default options: priority 0, 3 attempts, default exponential backoff, no timeout", async () => {
      const id = await enqueueOne(t.b);
      const job = await mustGet(t.b, id);
      expect(job.priority).toBe(0);
      expect(job.maxAttempts).toBe(3);
      expect(job.backoff).toEqual(DEFAULT_BACKOFF);
      expect(job.timeoutMs).toBeNull();
    });

    itNeeds(t, ["jobRecords"])("round-trips payloads that are not objects (null, string, number, array)", async () => {
      const payloads = [null, "text", 3.5, [1, "two", { three: 3 }], false];
      const ids = (await t.b.enqueue(payloads.map((data) => spec({ data })))).map((r) => r.id);
      for (const [i, id] of ids.entries()) expect((await mustGet(t.b, id)).data).toEqual(payloads[i]);
    });

    itNeeds(t, ["jobRecords"])("get of an unknown id returns null", async () => {
      await enqueueOne(t.b, { jobId: "exists" });
      expect(await t.b.get("does-not-exist")).toBeNull();
    });

    itNeeds(t, ["jobRecords"])("accepts a batch of 1000 in one call", async () => {
      const specs = Array.from({ length: 1000 }, (_, i) => spec({ data: { i } }));
      const results = await t.b.enqueue(specs);
      expect(results).toHaveLength(1000);
      expect(results.map((r) => r.id)).toEqual(specs.map((s) => s.id));
      expect(results.every((r) => !r.duplicate)).toBe(true);
      expect(await countsOf(t.b)).toEqual(counts({ waiting: 1000 }));
      expect((await mustGet(t.b, specs[999]!.id)).data).toEqual({ i: 999 });
    });
  });

  describe("dedup by id", () => {
    itNeeds(t, ["jobRecords", "clockDriven", "priorities", "uniqueIds"])(
      "a second enqueue of the same id is a duplicate: stored once, original data kept",
      async () => {
        expect(await t.b.enqueue([spec({ jobId: "d", data: { v: 1 } })])).toEqual([{ id: "d", duplicate: false }]);
        t.clock.advance(1_000);
        expect(await t.b.enqueue([spec({ jobId: "d", data: { v: 2 }, priority: 9 })])).toEqual([{ id: "d", duplicate: true }]);
        const job = await mustGet(t.b, "d");
        expect(job.data).toEqual({ v: 1 });
        expect(job.priority).toBe(0);
        expect(job.createdAt).toBe(t.clock.now() - 1_000);
        expect(await countsOf(t.b)).toEqual(counts({ waiting: 1 }));
      },
    );

    itNeeds(t, ["jobRecords", "uniqueIds"])("the same id twice in one batch: the second is the duplicate, the rest of the batch is stored", async () => {
      const results = await t.b.enqueue([spec({ jobId: "d", data: { v: 1 } }), spec({ jobId: "other" }), spec({ jobId: "d", data: { v: 2 } })]);
      expect(results).toEqual([
        { id: "d", duplicate: false },
        { id: "other", duplicate: false },
        { id: "d", duplicate: true },
      ]);
      expect((await mustGet(t.b, "d")).data).toEqual({ v: 1 });
      expect(await countsOf(t.b)).toEqual(counts({ waiting: 2 }));
    });

    itNeeds(t, ["jobRecords", "cancel"])("an id is a duplicate while its job exists in any state (active, completed, dead, cancelled)", async () => {
      await t.b.enqueue([spec({ jobId: "act" }), spec({ jobId: "done" }), spec({ jobId: "dead", attempts: 1 })]);
      await enqueueOne(t.b, { jobId: "gone", delayMs: 60_000 });
      const [first, second, third] = await claim(t.b, { limit: 3 });
      const byId = new Map([first, second, third].map((c) => [c!.job.id, c!]));
      expect(await t.b.complete([{ lease: byId.get("done")!.lease, result: null }])).toEqual(["applied"]);
      expect(await t.b.fail([{ lease: byId.get("dead")!.lease, error: errorInfo("x"), retryDelayMs: null }])).toEqual(["applied"]);
      expect(await t.b.cancel("gone")).toBe("cancelled");

      const results = await t.b.enqueue(["act", "done", "dead", "gone"].map((jobId) => spec({ jobId, data: { again: true } })));
      expect(results.map((r) => r.duplicate)).toEqual([true, true, true, true]);
      expect((await mustGet(t.b, "act")).state).toBe("active");
      expect((await mustGet(t.b, "done")).state).toBe("completed");
      expect((await mustGet(t.b, "dead")).state).toBe("dead");
      expect((await mustGet(t.b, "gone")).state).toBe("cancelled");
      expect((await mustGet(t.b, "act")).data).toEqual({});
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("after the job is pruned its id can be used again", async () => {
      await enqueueOne(t.b, { jobId: "reuse", data: { v: 1 }, removeOnComplete: { ageMs: 1_000 } });
      const c = await claimOne(t.b);
      await t.b.complete([{ lease: c.lease, result: { ok: true } }]);
      t.clock.advance(1_001);
      expect((await t.b.prune()).jobs).toBe(1);
      expect(await t.b.get("reuse")).toBeNull();

      expect(await t.b.enqueue([spec({ jobId: "reuse", data: { v: 2 } })])).toEqual([{ id: "reuse", duplicate: false }]);
      const job = await mustGet(t.b, "reuse");
      expect(job).toMatchObject({ data: { v: 2 }, state: "waiting", attempt: 0, result: null, history: [], createdAt: t.clock.now() });
    });

    itNeeds(t, ["jobRecords"])("a job deleted on completion (removeOnComplete: true) frees its id at once", async () => {
      await enqueueOne(t.b, { jobId: "once", removeOnComplete: true });
      const c = await claimOne(t.b);
      await t.b.complete([{ lease: c.lease, result: null }]);
      expect(await t.b.enqueue([spec({ jobId: "once", data: { second: true } })])).toEqual([{ id: "once", duplicate: false }]);
      expect((await mustGet(t.b, "once")).data).toEqual({ second: true });
    });
  });

  describe("all or nothing", () => {
    itNeeds(t, ["jobRecords", "uniqueIds"])("a batch with a duplicate stores none of its jobs; the results flag the duplicate", async () => {
      await enqueueOne(t.b, { jobId: "taken" });
      const results = await t.b.enqueue([spec({ jobId: "new-1" }), spec({ jobId: "taken" }), spec({ jobId: "new-2" })], { allOrNothing: true });
      expect(results).toEqual([
        { id: "new-1", duplicate: false },
        { id: "taken", duplicate: true },
        { id: "new-2", duplicate: false },
      ]);
      expect(await t.b.get("new-1")).toBeNull();
      expect(await t.b.get("new-2")).toBeNull();
      expect(await countsOf(t.b)).toEqual(counts({ waiting: 1 }));
    });

    itNeeds(t, ["jobRecords"])("an id repeated within the batch is a duplicate too: nothing is stored", async () => {
      const results = await t.b.enqueue([spec({ jobId: "a" }), spec({ jobId: "a" })], { allOrNothing: true });
      expect(results.map((r) => r.duplicate)).toEqual([false, true]);
      expect(await t.b.get("a")).toBeNull();
    });

    itNeeds(t, ["jobRecords"])("a batch without duplicates is stored whole; one over several queues is refused", async () => {
      const results = await t.b.enqueue([spec({ jobId: "x" }), spec({ jobId: "y" })], { allOrNothing: true });
      expect(results).toEqual([
        { id: "x", duplicate: false },
        { id: "y", duplicate: false },
      ]);
      expect(await countsOf(t.b)).toEqual(counts({ waiting: 2 }));
      await expect(t.b.enqueue([spec({ jobId: "p" }), spec({ jobId: "r", queue: "other" })], { allOrNothing: true })).rejects.toThrow(/one queue/);
      expect(await t.b.get("p")).toBeNull();
    });

    itNeeds(t, ["jobRecords"])("of two racing batches that share an id, one is stored whole and the other not at all", async () => {
      const other = t.factory.openSecond ? await t.second() : t.b;
      const ids = (n: number, k: number) => Array.from({ length: n }, (_, i) => spec({ jobId: `race-${k}-${i}` }));
      for (let round = 0; round < 5; round++) {
        const shared = spec({ jobId: `shared-${round}` });
        const [first, second] = await Promise.all([
          t.b.enqueue([shared, ...ids(2, round * 2)], { allOrNothing: true }),
          other.enqueue([...ids(3, round * 2 + 1), shared], { allOrNothing: true }),
        ]);
        const stored = [first, second].filter((r) => !r.some((x) => x.duplicate));
        expect(stored).toHaveLength(1);
        const refused = first === stored[0] ? second : first;
        for (const r of refused) {
          if (r.id !== shared.id) expect(await t.b.get(r.id), `${r.id} of the refused batch`).toBeNull();
        }
      }
    });
  });

  describe("delayed jobs", () => {
    itNeeds(t, ["jobRecords", "clockDriven"])("delayMs: scheduled at now + delay, not claimable before, claimable and reported waiting from then", async () => {
      const t0 = t.clock.now();
      const id = await enqueueOne(t.b, { delayMs: 1_000 });
      expect(await mustGet(t.b, id)).toMatchObject({ state: "scheduled", runAt: t0 + 1_000, createdAt: t0 });
      expect(await claim(t.b)).toEqual([]);

      t.clock.advance(999);
      expect(await claim(t.b)).toEqual([]);
      expect((await mustGet(t.b, id)).state).toBe("scheduled");

      t.clock.advance(1);
      expect((await mustGet(t.b, id)).state).toBe("waiting");
      expect((await claimOne(t.b)).job.id).toBe(id);
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("runAt (absolute): scheduled until that time, then claimable; it overrides delayMs", async () => {
      const runAt = t.clock.now() + 5_000;
      const id = await enqueueOne(t.b, { runAt: new Date(runAt), delayMs: 60_000 });
      expect(await mustGet(t.b, id)).toMatchObject({ state: "scheduled", runAt });
      t.clock.advance(4_999);
      expect(await claim(t.b)).toEqual([]);
      t.clock.advance(1);
      expect((await mustGet(t.b, id)).state).toBe("waiting");
      expect((await claimOne(t.b)).job.id).toBe(id);
    });

    itNeeds(t, ["jobRecords"])("runAt in the past: waiting and claimable at once, runAt kept as given", async () => {
      const runAt = t.clock.now() - 10_000;
      const id = await enqueueOne(t.b, { runAt });
      expect(await mustGet(t.b, id)).toMatchObject({ state: "waiting", runAt });
      expect((await claimOne(t.b)).job.id).toBe(id);
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("delayMs is measured on the store clock at enqueue time", async () => {
      t.clock.advance(3_600_000);
      const id = await enqueueOne(t.b, { delayMs: 500 });
      expect((await mustGet(t.b, id)).runAt).toBe(t.clock.now() + 500);
    });
  });

  describe("claim order", () => {
    itNeeds(t, ["clockDriven", "priorities"])("lowest priority number first, then earliest run_at, then insertion order (FIFO among equals)", async () => {
      const t0 = t.clock.now();
      // Ids sort alphabetically in the reverse of insertion order, so "by id" and "by insertion"
      // orders differ.
      await t.b.enqueue([
        spec({ jobId: "z-prio5", priority: 5 }),
        spec({ jobId: "y-prio1-fifo1", priority: 1 }),
        spec({ jobId: "x-prio1-early", priority: 1, runAt: t0 - 2_000 }),
      ]);
      await t.b.enqueue([spec({ jobId: "w-prio1-fifo2", priority: 1 })]);
      await t.b.enqueue([
        spec({ jobId: "v-prio0-delayed", priority: 0, delayMs: 1_000 }),
        spec({ jobId: "u-prio-1", priority: -1 }),
        spec({ jobId: "t-prio1-fifo3", priority: 1 }),
        spec({ jobId: "s-prio1-earliest", priority: 1, runAt: t0 - 3_000 }),
        spec({ jobId: "r-prio5-fifo2", priority: 5 }),
      ]);
      // The delayed job becomes due; its later run_at must not outrank its better priority.
      t.clock.advance(1_000);
      const order: string[] = [];
      for (;;) {
        const got = await claim(t.b);
        if (got.length === 0) break;
        order.push(got[0]!.job.id);
      }
      expect(order).toEqual([
        "u-prio-1",
        "v-prio0-delayed",
        "s-prio1-earliest",
        "x-prio1-early",
        "y-prio1-fifo1",
        "w-prio1-fifo2",
        "t-prio1-fifo3",
        "z-prio5",
        "r-prio5-fifo2",
      ]);
    });

    itNeeds(t, ["priorities"])("a batch claim takes the best jobs by that order", async () => {
      await t.b.enqueue([
        spec({ jobId: "p9", priority: 9 }),
        spec({ jobId: "p3", priority: 3 }),
        spec({ jobId: "p7", priority: 7 }),
        spec({ jobId: "p1", priority: 1 }),
        spec({ jobId: "p5", priority: 5 }),
      ]);
      const got = await claim(t.b, { limit: 3 });
      expect(got.map((c) => c.job.id).sort()).toEqual(["p1", "p3", "p5"]);
    });

    it("FIFO among equals holds across 50 jobs enqueued one call at a time", async () => {
      const ids: string[] = [];
      for (let i = 0; i < 50; i++) ids.push(await enqueueOne(t.b, { jobId: `fifo-${String(99 - i).padStart(2, "0")}` }));
      const claimed = [];
      for (let i = 0; i < 50; i++) claimed.push((await claimOne(t.b, { worker: i % 2 ? A : B })).job.id);
      expect(claimed).toEqual(ids);
    });

    itNeeds(t, ["clockDriven"])("a retried job waits for its run_at behind jobs that are already due", async () => {
      await enqueueOne(t.b, { jobId: "first" });
      const c = await claimOne(t.b);
      await enqueueOne(t.b, { jobId: "second" });
      await t.b.fail([{ lease: c.lease, error: errorInfo("boom"), retryDelayMs: 100 }]);
      expect((await claimOne(t.b, { leaseMs: LEASE_MS })).job.id).toBe("second");
      expect(await claim(t.b)).toEqual([]);
      t.clock.advance(100);
      expect((await claimOne(t.b)).job).toMatchObject({ id: "first", name: NAME, attempt: 2 });
    });
  });
}
