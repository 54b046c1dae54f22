import { describe, expect, it } from "vitest";
import { InvalidInputError } from "../../src/core/errors.js";
import { buildJobSpec, DEFAULT_MAX_PAYLOAD_BYTES, type JobOptions } from "../../src/core/spec.js";
import type { JobSpec } from "../../src/core/job.js";
import { waitFor } from "../helpers/wait-for.js";
import { A, enqueueOne, mustGet, spec, totalJobs, type SuiteContext, itNeeds } from "./fixtures.js";

export function miscTests(t: SuiteContext): void {
  describe("backend identity", () => {
    it("has a non-empty description", () => {
      expect(typeof t.b.description).toBe("string");
      expect(t.b.description.length).toBeGreaterThan(0);
    });

    it("reports the capabilities the factory declares", () => {
      expect(t.b.capabilities).toEqual(t.factory.capabilities);
    });

    itNeeds(t, ["jobRecords"])("migrate() is safe to call again and keeps the data", async () => {
      const id = await enqueueOne(t.b, { data: { survive: true } });
      await t.b.migrate();
      await t.b.migrate();
      expect((await mustGet(t.b, id)).data).toEqual({ survive: true });
    });

    itNeeds(t, ["clockDriven"])("now() is the store clock (the injected fake clock), not the wall clock", async () => {
      expect(await t.b.now()).toBe(t.clock.now());
      t.clock.advance(123_456);
      expect(await t.b.now()).toBe(t.clock.now());
      t.clock.set(Date.UTC(2041, 5, 7));
      expect(await t.b.now()).toBe(Date.UTC(2041, 5, 7));
    });
  });

  describe("idempotency.once", () => {
    itNeeds(t, ["clockDriven", "idempotencyKeys"])("true the first time, false while recorded, true again after the ttl has passed", async () => {
      expect(await t.b.idempotency.once("charge:42", 10_000)).toBe(true);
      expect(await t.b.idempotency.once("charge:42", 10_000)).toBe(false);
      t.clock.advance(9_999);
      expect(await t.b.idempotency.once("charge:42", 10_000)).toBe(false);
      t.clock.advance(2);
      expect(await t.b.idempotency.once("charge:42", 10_000)).toBe(true);
      // Recorded afresh: the new ttl counts from now.
      t.clock.advance(9_999);
      expect(await t.b.idempotency.once("charge:42", 10_000)).toBe(false);
    });

    itNeeds(t, ["idempotencyKeys"])("keys are independent", async () => {
      expect(await t.b.idempotency.once("a", 10_000)).toBe(true);
      expect(await t.b.idempotency.once("b", 10_000)).toBe(true);
      expect(await t.b.idempotency.once("a", 10_000)).toBe(false);
    });

    itNeeds(t, ["idempotencyKeys"])("concurrent calls with one key: exactly one true", async () => {
      const results = await Promise.all(Array.from({ length: 10 }, () => t.b.idempotency.once("race", 10_000)));
      expect(results.filter(Boolean)).toHaveLength(1);
    });

    itNeeds(t, ["idempotencyKeys"], !t.factory.openSecond)(
      "calls on two connections with one key: exactly one true [needs factory.openSecond]",
      async () => {
        const other = await t.second();
        const results = await Promise.all([
          t.b.idempotency.once("race", 10_000),
          other.idempotency.once("race", 10_000),
          other.idempotency.once("race", 10_000),
        ]);
        expect(results.filter(Boolean)).toHaveLength(1);
      },
    );
  });

  describe("subscribe", () => {
    it("calls listeners with the queue after an enqueue to it; unsubscribe stops the calls", async () => {
      const kept: string[] = [];
      const dropped: string[] = [];
      const stopKept = t.b.subscribe((queue) => kept.push(queue));
      const stopDropped = t.b.subscribe((queue) => dropped.push(queue));
      await enqueueOne(t.b, { queue: "wake-me" });
      await waitFor(() => kept.includes("wake-me") && dropped.includes("wake-me"), { description: "both listeners woken" });

      stopDropped();
      const droppedBefore = dropped.length;
      await enqueueOne(t.b, { queue: "second" });
      await waitFor(() => kept.includes("second"), { description: "the remaining listener woken" });
      expect(dropped).toHaveLength(droppedBefore);
      expect(dropped).not.toContain("second");
      stopKept();
    });

    it.skipIf(!t.factory.openSecond || !t.factory.capabilities.crossProcessWakeups)(
      "a listener on a second connection is woken by an enqueue on the first [needs crossProcessWakeups and openSecond]",
      async () => {
        const other = await t.second();
        const woken: string[] = [];
        const stop = other.subscribe((queue) => woken.push(queue));
        // A worker has claimed from its queues before it waits for a wake-up (on RabbitMQ the
        // first claim of a queue starts the consumer whose deliveries are the wake-ups).
        expect(await other.claim({ queues: ["remote"], names: ["job"], worker: A, limit: 1, leaseMs: 30_000 })).toEqual([]);
        await enqueueOne(t.b, { queue: "remote" });
        await waitFor(() => woken.includes("remote"), { timeoutMs: 10_000, description: "cross-connection wake-up" });
        stop();
      },
    );
  });

  describe("invalid input is refused by buildJobSpec and nothing is stored", () => {
    class Money {
      constructor(readonly cents: number) {}
    }
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;

    const badOptions: Array<[string, JobOptions, RegExp]> = [
      ["an unknown option", { retries: 3 } as unknown as JobOptions, /unknown job option "retries"/],
      ["attempts 0", { attempts: 0 }, /option attempts must be an integer from 1/],
      ["fractional attempts", { attempts: 1.5 }, /option attempts must be an integer/],
      ["a negative delay", { delayMs: -1 }, /option delayMs must be an integer from 0/],
      ["a bad backoff type", { backoff: { type: "linear", delayMs: 5 } } as unknown as JobOptions, /backoff\.type must be "exponential" or "fixed"/],
      ["a backoff function", { backoff: (() => 5) as unknown as JobOptions["backoff"] }, /backoff cannot be a function/],
      ["a fractional priority", { priority: 0.5 }, /option priority must be an integer/],
      ["an empty jobId", { jobId: "" }, /option jobId must be a non-empty string/],
      ["a NaN runAt", { runAt: Number.NaN }, /option runAt must be a Date or milliseconds/],
      ["a bad removeOnComplete", { removeOnComplete: "yes" } as unknown as JobOptions, /option removeOnComplete must be true, false or \{ ageMs \}/],
      ["meta that is an array", { meta: [1, 2] } as unknown as JobOptions, /option meta must be a plain JSON object/],
      ["meta holding a BigInt", { meta: { id: 1n } } as unknown as JobOptions, /meta of job "job" is not JSON: meta\.id is a BigInt/],
    ];
    for (const [what, options, message] of badOptions) {
      it(`refuses ${what}`, () => {
        expect(() => buildJobSpec({ queue: "q", name: "job", data: {}, options })).toThrow(InvalidInputError);
        expect(() => buildJobSpec({ queue: "q", name: "job", data: {}, options })).toThrow(message);
      });
    }

    const badNames: Array<[string, { queue: string; name: string }, RegExp]> = [
      ["an empty queue name", { queue: "", name: "job" }, /^queue name must be/],
      ["a queue name with a space", { queue: "my queue", name: "job" }, /^queue name must be/],
      ["a job name starting with a dash", { queue: "q", name: "-job" }, /^job name must be/],
      ["a job name over 128 characters", { queue: "q", name: "j".repeat(129) }, /^job name must be/],
    ];
    for (const [what, names, message] of badNames) {
      it(`refuses ${what}`, () => {
        expect(() => buildJobSpec({ ...names, data: {} })).toThrow(InvalidInputError);
        expect(() => buildJobSpec({ ...names, data: {} })).toThrow(message);
      });
    }

    const badPayloads: Array<[string, unknown, RegExp]> = [
      ["a BigInt", { amount: 10n }, /data\.amount is a BigInt/],
      ["a function", { cb: () => 1 }, /data\.cb is a function/],
      ["NaN", { n: Number.NaN }, /data\.n is NaN/],
      ["Infinity", [1, Number.POSITIVE_INFINITY], /data\[1\] is Infinity/],
      ["a cycle", cyclic, /contains a cycle/],
      ["a class instance", { price: new Money(5) }, /data\.price is an instance of Money/],
      ["undefined inside an array", [1, undefined, 3], /data\[1\] is undefined/],
      ["a symbol", { s: Symbol("x") }, /data\.s is a symbol/],
    ];
    for (const [what, data, message] of badPayloads) {
      it(`refuses a payload holding ${what}`, () => {
        expect(() => spec({ data })).toThrow(InvalidInputError);
        expect(() => spec({ data })).toThrow(message);
        expect(() => spec({ data })).toThrow(/is not JSON/);
      });
    }

    it(`refuses a payload over ${DEFAULT_MAX_PAYLOAD_BYTES} bytes and accepts one exactly at the limit`, () => {
      // A JSON string is its characters plus two quotes.
      const atLimit = "x".repeat(DEFAULT_MAX_PAYLOAD_BYTES - 2);
      expect(spec({ data: atLimit }).payload).toHaveLength(DEFAULT_MAX_PAYLOAD_BYTES);
      expect(() => spec({ data: atLimit + "x" })).toThrow(InvalidInputError);
      expect(() => spec({ data: atLimit + "x" })).toThrow(/is 262145 bytes, over the limit of 262144/);
      // Bytes, not characters: 2-byte characters reach the limit at half the length.
      expect(() => spec({ data: "é".repeat(DEFAULT_MAX_PAYLOAD_BYTES / 2) })).toThrow(/over the limit/);
    });

    itNeeds(t, ["jobRecords"])("a batch with one invalid job stores nothing, and a valid enqueue afterwards is stored", async () => {
      // Each batch is built before the call: a valid job first, then one the store must refuse,
      // made by hand (buildJobSpec would refuse it before the backend is ever called). A backend
      // that wrote its batch row by row outside one transaction would keep the first job.
      const valid = (id: string) => spec({ jobId: id });
      const batches: JobSpec[][] = [
        [valid("ok-1"), { ...spec(), payload: null as unknown as string }],
        [valid("ok-2"), { ...spec(), maxAttempts: Number.NaN }],
        [valid("ok-3"), { ...spec(), queue: null as unknown as string }],
      ];
      for (const batch of batches) await expect(t.b.enqueue(batch)).rejects.toThrow();
      expect(await totalJobs(t.b)).toBe(0);
      expect(await t.b.list()).toEqual([]);
      for (const id of ["ok-1", "ok-2", "ok-3"]) expect(await t.b.get(id)).toBeNull();
      // Control: the same store does accept the valid job alone, so the zero above is meaningful.
      await t.b.enqueue([valid("ok-1")]);
      expect(await totalJobs(t.b)).toBe(1);
    });
  });
}
