import { describe, expect } from "vitest";
import type { BackoffSpec } from "../../src/core/job.js";
import { decideRetry } from "../../src/core/retry.js";
import { A, B, C, claim, claimOne, counts, countsOf, enqueueOne, errorInfo, mustGet, type SuiteContext, itNeeds } from "./fixtures.js";

export function settleTests(t: SuiteContext): void {
  describe("complete", () => {
    itNeeds(t, ["jobRecords", "clockDriven"])("marks the job completed with its result, finishedAt, no lease, and one history record", async () => {
      const id = await enqueueOne(t.b, { data: { n: 1 } });
      t.clock.advance(500);
      const startedAt = t.clock.now();
      const c = await claimOne(t.b, { worker: B });
      t.clock.advance(1_500);
      const result = { receipt: "r-1", lines: [1, 2, 3] };
      expect(await t.b.complete([{ lease: c.lease, result }])).toEqual(["applied"]);
      const job = await mustGet(t.b, id);
      expect(job).toMatchObject({
        state: "completed",
        result,
        data: { n: 1 },
        attempt: 1,
        startedAt,
        finishedAt: t.clock.now(),
        lease: null,
        error: null,
      });
      expect(job.history).toEqual([
        {
          attempt: 1,
          workerId: B.id,
          host: B.host,
          pid: B.pid,
          startedAt,
          finishedAt: t.clock.now(),
          outcome: "completed",
          error: null,
        },
      ]);
      expect(await countsOf(t.b)).toEqual(counts({ completed: 1 }));
    });

    itNeeds(t, ["jobRecords"])("stores a null result", async () => {
      const id = await enqueueOne(t.b);
      const c = await claimOne(t.b);
      await t.b.progress(c.lease, { pct: 10 });
      await t.b.complete([{ lease: c.lease, result: null }]);
      expect(await mustGet(t.b, id)).toMatchObject({ state: "completed", result: null });
    });

    itNeeds(t, ["jobRecords"])("with retainCompletedMs 0 (removeOnComplete: true) the job is gone once completed", async () => {
      const id = await enqueueOne(t.b, { removeOnComplete: true });
      const c = await claimOne(t.b);
      expect(await t.b.complete([{ lease: c.lease, result: "x" }])).toEqual(["applied"]);
      expect(await t.b.get(id)).toBeNull();
      expect(await t.b.list()).toEqual([]);
    });

    itNeeds(t, ["clockDriven"])("a completed job is never claimed again", async () => {
      await enqueueOne(t.b);
      const c = await claimOne(t.b);
      await t.b.complete([{ lease: c.lease, result: null }]);
      t.clock.advance(86_400_000);
      expect(await claim(t.b, { limit: 10 })).toEqual([]);
    });
  });

  describe("progress", () => {
    itNeeds(t, ["jobRecords"])("stores the latest progress report of a running job", async () => {
      const id = await enqueueOne(t.b);
      const c = await claimOne(t.b);
      expect(await t.b.progress(c.lease, { pct: 10 })).toBe("applied");
      expect(await t.b.progress(c.lease, { pct: 60, note: "half" })).toBe("applied");
      expect(await mustGet(t.b, id)).toMatchObject({ state: "active", progress: { pct: 60, note: "half" } });
    });
  });

  describe("fail", () => {
    itNeeds(t, ["jobRecords"])("refuses a retryDelayMs that is NaN, infinite or negative, writing nothing; a fraction is floored", async () => {
      const id = await enqueueOne(t.b, { attempts: 3 });
      const c = await claimOne(t.b, { worker: A });
      for (const retryDelayMs of [Number.NaN, Number.POSITIVE_INFINITY, -1, "5" as unknown as number]) {
        await expect(t.b.fail([{ lease: c.lease, error: errorInfo("x"), retryDelayMs }]), String(retryDelayMs)).rejects.toThrow(
          /retryDelayMs must be a number of milliseconds from 0 to/,
        );
        expect((await mustGet(t.b, id)).state).toBe("active");
      }
      expect(await t.b.fail([{ lease: c.lease, error: errorInfo("x"), retryDelayMs: 1_000.9 }])).toEqual(["applied"]);
      expect((await mustGet(t.b, id)).runAt).toBe(t.clock.now() + 1_000);
    });

    itNeeds(t, ["jobRecords", "clockDriven"])("with retryDelayMs: scheduled at now + delay, error stored, history records the failed attempt", async () => {
      const id = await enqueueOne(t.b, { attempts: 3 });
      const startedAt = t.clock.now();
      const c = await claimOne(t.b, { worker: A });
      t.clock.advance(250);
      const error = errorInfo("connection refused", "NetworkError");
      expect(await t.b.fail([{ lease: c.lease, error, retryDelayMs: 4_000 }])).toEqual(["applied"]);
      const job = await mustGet(t.b, id);
      expect(job).toMatchObject({
        state: "scheduled",
        runAt: t.clock.now() + 4_000,
        attempt: 1,
        error,
        lease: null,
        finishedAt: null,
        stalls: 0,
      });
      expect(job.history).toEqual([{ attempt: 1, workerId: A.id, host: A.host, pid: A.pid, startedAt, finishedAt: t.clock.now(), outcome: "failed", error }]);
      expect(await claim(t.b)).toEqual([]);
      t.clock.advance(4_000);
      expect((await mustGet(t.b, id)).state).toBe("waiting");
      expect((await claimOne(t.b)).job.attempt).toBe(2);
    });

    itNeeds(t, ["jobRecords", "clockDriven"])(
      "with null: dead, keeping payload, error, finishedAt, total attempts and every attempt's worker in order",
      async () => {
        const data = { orderId: "o-77", amount: 1999 };
        const id = await enqueueOne(t.b, { data, attempts: 3 });
        const workers = [A, B, C];
        const errors = [errorInfo("first", "TypeError"), errorInfo("second", "RangeError"), errorInfo("third", "PaymentDeclined")];
        const times: Array<{ startedAt: number; finishedAt: number }> = [];
        for (let i = 0; i < 3; i++) {
          const startedAt = t.clock.now();
          const c = await claimOne(t.b, { worker: workers[i] });
          expect(c.job.attempt).toBe(i + 1);
          t.clock.advance(100 * (i + 1));
          const last = i === 2;
          expect(await t.b.fail([{ lease: c.lease, error: errors[i]!, retryDelayMs: last ? null : 1_000 }])).toEqual(["applied"]);
          times.push({ startedAt, finishedAt: t.clock.now() });
          if (!last) t.clock.advance(1_000);
        }
        const job = await mustGet(t.b, id);
        expect(job).toMatchObject({
          state: "dead",
          data,
          error: errors[2],
          finishedAt: times[2]!.finishedAt,
          attempt: 3,
          maxAttempts: 3,
          lease: null,
          result: null,
        });
        expect(job.error?.stack).toContain("PaymentDeclined: third");
        expect(job.history).toEqual(
          workers.map((w, i) => ({
            attempt: i + 1,
            workerId: w.id,
            host: w.host,
            pid: w.pid,
            startedAt: times[i]!.startedAt,
            finishedAt: times[i]!.finishedAt,
            outcome: i === 2 ? "dead" : "failed",
            error: errors[i],
          })),
        );
        expect(await claim(t.b, { limit: 10 })).toEqual([]);
        expect(await countsOf(t.b)).toEqual(counts({ dead: 1 }));
      },
    );

    itNeeds(t, ["jobRecords"])("with null on the first attempt (unrecoverable): dead at once although attempts remain", async () => {
      const id = await enqueueOne(t.b, { attempts: 5 });
      const c = await claimOne(t.b);
      const error = errorInfo("user 9 not found", "UnrecoverableError");
      await t.b.fail([{ lease: c.lease, error, retryDelayMs: null }]);
      expect(await mustGet(t.b, id)).toMatchObject({ state: "dead", attempt: 1, maxAttempts: 5, error });
    });

    itNeeds(t, ["jobRecords", "clockDriven"])(
      "records an error holding U+0000 and unpaired surrogates, retried and dead: kept, or each such character U+FFFD (PostgreSQL)",
      async () => {
        // A handler's error is whatever it threw (a C library's message, binary input quoted):
        // PostgreSQL refused these characters and the settle failed for as long as it was retried.
        const odd = "a\u0000b\ud800c\udc00d";
        const replaced = "a\ufffdb\ufffdc\ufffdd";
        const error = { name: `Odd${odd}`, message: odd, stack: `Odd${odd}: ${odd}\n    at handler (app.ts:1:1)` };
        const id = await enqueueOne(t.b, { attempts: 2 });
        for (const retryDelayMs of [0, null]) {
          const c = await claimOne(t.b);
          expect(await t.b.fail([{ lease: c.lease, error, retryDelayMs }])).toEqual(["applied"]);
        }
        const job = await mustGet(t.b, id);
        expect(job.state).toBe("dead");
        const stored = [job.error!, ...job.history.map((h) => h.error!)];
        expect(stored).toHaveLength(3);
        const kept = (text: string) => (text.includes("\ufffd") ? text.replaceAll(replaced, odd) : text);
        for (const e of stored) expect({ name: kept(e.name), message: kept(e.message), stack: kept(e.stack!) }).toEqual(error);
      },
    );

    itNeeds(t, ["jobRecords", "clockDriven"])(
      "retry schedule: each run_at is now + the backoffDelay draw, within [now, now + min(max, base * 2^(attempt-1))]",
      async () => {
        const backoff: BackoffSpec = { type: "exponential", delayMs: 1_000, maxDelayMs: 5_000 };
        const id = await enqueueOne(t.b, { attempts: 6, backoff: { type: "exponential", delayMs: 1_000, maxDelayMs: 5_000 } });
        for (let attempt = 1; ; attempt++) {
          const c = await claimOne(t.b);
          expect(c.job.attempt).toBe(attempt);
          expect(c.job.backoff).toEqual(backoff);
          const decision = decideRetry({
            attempt,
            maxAttempts: c.job.maxAttempts,
            unrecoverable: false,
            backoff: c.job.backoff,
            error: new Error(`attempt ${attempt}`),
          });
          const now = t.clock.now();
          if (decision.kind === "dead") {
            expect(attempt).toBe(6);
            await t.b.fail([{ lease: c.lease, error: errorInfo(`attempt ${attempt}`), retryDelayMs: null }]);
            break;
          }
          await t.b.fail([{ lease: c.lease, error: errorInfo(`attempt ${attempt}`), retryDelayMs: decision.delayMs }]);
          const job = await mustGet(t.b, id);
          const cap = Math.min(5_000, 1_000 * 2 ** (attempt - 1));
          expect(job.runAt).toBe(now + decision.delayMs);
          expect(job.runAt).toBeGreaterThanOrEqual(now);
          expect(job.runAt).toBeLessThanOrEqual(now + cap);
          t.clock.advance(job.runAt - now);
        }
        const dead = await mustGet(t.b, id);
        expect(dead.state).toBe("dead");
        expect(dead.history.map((h) => h.outcome)).toEqual(["failed", "failed", "failed", "failed", "failed", "dead"]);
      },
    );
  });

  describe("release", () => {
    itNeeds(t, ["jobRecords"])("returns the job to waiting without using an attempt; it is claimable again at once", async () => {
      const id = await enqueueOne(t.b, { attempts: 1 });
      const first = await claimOne(t.b, { worker: A });
      expect(first.job.attempt).toBe(1);
      expect(await t.b.release([first.lease])).toEqual(["applied"]);
      expect(await mustGet(t.b, id)).toMatchObject({ state: "waiting", attempt: 0, lease: null, finishedAt: null });
      // The released attempt did not count: the next claim is attempt 1 again, by a new token.
      const again = await claimOne(t.b, { worker: B });
      expect(again.job).toMatchObject({ id, attempt: 1, maxAttempts: 1, lease: { worker: B } });
      expect(again.lease.token).toBeGreaterThan(first.lease.token);
    });

    itNeeds(t, ["jobRecords"])("releases a batch, one result per lease in input order", async () => {
      await enqueueOne(t.b, { jobId: "r1" });
      await enqueueOne(t.b, { jobId: "r2" });
      const claimed = await claim(t.b, { limit: 2 });
      const leases = claimed.map((c) => c.lease);
      expect(await t.b.release([leases[0]!, { jobId: "nope", token: 3 }, leases[1]!])).toEqual(["applied", "stale", "applied"]);
      expect(await countsOf(t.b)).toEqual(counts({ waiting: 2 }));
    });
  });
}
