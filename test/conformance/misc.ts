import { describe, expect, it } from "vitest";
import type { JobSpec } from "../../src/core/job.js";
import { uncheckedBackend } from "../../src/backend/checked.js";
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

    itNeeds(t, ["idempotencyKeys"])("any non-empty key: long ones, U+0000 and lone surrogates each kept apart from every other key", async () => {
      // Before: PostgreSQL failed a U+0000 key or one of about 8 KB with its own DatabaseError, and
      // "k\ud800" was "k\ufffd" in every store's UTF-8: two keys, one record.
      const long = `https://example.com/${"p".repeat(600)}`;
      const keys = [long, `${long}x`, "k".repeat(1_000_000), "k\u0000x", "k\u0000y", "k\ud800", "k\ufffd", "\udc00k", "tab\there 🚀", "k".repeat(512)];
      for (const key of keys) expect(await t.b.idempotency.once(key, 10_000), JSON.stringify(key.slice(0, 30))).toBe(true);
      for (const key of keys) expect(await t.b.idempotency.once(key, 10_000), JSON.stringify(key.slice(0, 30))).toBe(false);
      await expect(t.b.idempotency.once("", 10_000)).rejects.toThrow(/an idempotency key must be a non-empty string/);
    });

    itNeeds(t, ["idempotencyKeys"])("concurrent calls with one key: exactly one true", async () => {
      const results = await Promise.all(Array.from({ length: 10 }, () => t.b.idempotency.once("race", 10_000)));
      expect(results.filter(Boolean)).toHaveLength(1);
    });

    itNeeds(
      t,
      ["idempotencyKeys"],
      !t.factory.openSecond && "the store cannot open a second connection",
    )("calls on two connections with one key: exactly one true [needs factory.openSecond]", async () => {
      const other = await t.second();
      const results = await Promise.all([t.b.idempotency.once("race", 10_000), other.idempotency.once("race", 10_000), other.idempotency.once("race", 10_000)]);
      expect(results.filter(Boolean)).toHaveLength(1);
    });
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

  describe("invalid input reaching the store", () => {
    itNeeds(t, ["jobRecords"])("a batch with one invalid job stores nothing, and a valid enqueue afterwards is stored", async () => {
      // The store itself is called, behind no facade (which would refuse these specs before the
      // store ever saw the batch: test/conformance/checks.ts): a valid job first, then one the
      // store cannot hold. A backend that wrote its batch row by row outside one transaction (or
      // script) would keep the first job.
      const store = uncheckedBackend(t.b);
      expect(store).not.toBe(t.b);
      const valid = (id: string) => spec({ jobId: id });
      const batches: JobSpec[][] = [
        [valid("ok-1"), { ...spec(), payload: null as unknown as string }],
        [valid("ok-2"), { ...spec(), name: null as unknown as string }],
        [valid("ok-3"), { ...spec(), priority: null as unknown as number }],
      ];
      for (const batch of batches) await expect(store.enqueue(batch)).rejects.toThrow();
      expect(await totalJobs(t.b)).toBe(0);
      expect(await t.b.list()).toEqual([]);
      for (const id of ["ok-1", "ok-2", "ok-3"]) expect(await t.b.get(id)).toBeNull();
      // Control: the same store does accept the valid job alone, so the zero above is meaningful.
      await t.b.enqueue([valid("ok-1")]);
      expect(await totalJobs(t.b)).toBe(1);
    });
  });
}
