import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import {
  defineJob,
  JobTimeoutError,
  LeaseLostError,
  Queue,
  RetryLater,
  silentLogger,
  UnrecoverableError,
  Worker,
  type Backend,
  type WorkerOptions,
} from "../../src/index.js";
import { cleanupRuntimeBackends, RUNTIME_BACKENDS } from "../helpers/runtime-backends.js";
import { FakeClock, sleepOn } from "../../src/core/clock.js";
import { waitFor } from "../helpers/wait-for.js";

let backend: Backend;
let queue: Queue;
const workers: Worker[] = [];

function worker(options: Partial<WorkerOptions> & Pick<WorkerOptions, "handlers">): Worker {
  const w = new Worker({ backend, queues: "q", logger: silentLogger, pollIntervalMs: 20, ...options });
  workers.push(w);
  return w;
}

async function state(id: string) {
  return (await backend.get(id))?.state;
}

/**
 * `backend` as a worker that dies sees it: after `die()` its heartbeats never answer. `marks`
 * counts its buffered marks (Backend.markBuffered): `sent` as they leave, `buffered` and `started`
 * once the store has them.
 */
function dyingBackend(): { backend: Backend; die(): void; marks: { sent: number; buffered: number; started: number } } {
  let dead = false;
  const marks = { sent: 0, buffered: 0, started: 0 };
  const proxy = new Proxy(backend, {
    get(target, prop) {
      if (prop === "heartbeat") return (...args: Parameters<Backend["heartbeat"]>) => (dead ? new Promise(() => undefined) : target.heartbeat(...args));
      if (prop === "markBuffered") {
        return async (...args: Parameters<NonNullable<Backend["markBuffered"]>>) => {
          marks.sent++;
          await target.markBuffered!(...args);
          if (args[1]) marks.buffered++;
          else marks.started++;
        };
      }
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { backend: proxy, die: () => void (dead = true), marks };
}

// Every test on every store: the worker must behave the same whatever holds its jobs.
describe.each(RUNTIME_BACKENDS)("worker runtime on $name", (store) => {
  beforeEach(async () => {
    backend = await store.open();
    queue = new Queue("q", { backend });
  });

  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.close({ force: true })));
    await backend.close();
  });
  afterAll(cleanupRuntimeBackends);

  /**
   * Reopens the test's store on a FakeClock for the workers to share: lease expiries in the store,
   * and the workers' heartbeats and deadlines, then move only when the test advances it.
   */
  async function onFakeClock(): Promise<FakeClock> {
    await backend.close();
    const clock = new FakeClock(Date.now());
    backend = await store.open({ clock });
    queue = new Queue("q", { backend });
    return clock;
  }

  /** Lets the async work that a clock step started (store calls, settles, wake-ups) run its course. */
  async function settleDown(): Promise<void> {
    for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
  }

  describe("worker runtime", () => {
    it("runs jobs, stores results, and never exceeds its concurrency", async () => {
      let running = 0;
      let peak = 0;
      const w = worker({
        concurrency: 3,
        handlers: {
          square: async (job) => {
            running++;
            peak = Math.max(peak, running);
            await new Promise((r) => setTimeout(r, 15));
            running--;
            return { square: (job.data as { n: number }).n ** 2 };
          },
        },
      });
      const ids = await queue.addBulk(Array.from({ length: 20 }, (_, n) => ({ name: "square", data: { n } })));
      await waitFor(async () => (await queue.stats()).counts.completed === 20, { description: "20 completed" });
      expect(peak).toBeLessThanOrEqual(3);
      expect(peak).toBeGreaterThan(1);
      const job = await backend.get(ids[7]!.id);
      expect(job?.result).toEqual({ square: 49 });
      expect(job?.history).toHaveLength(1);
      expect(job?.history[0]).toMatchObject({ outcome: "completed", workerId: w.id, pid: process.pid });
    });

    it("retries a failing job with backoff, then completes it", async () => {
      let calls = 0;
      worker({
        handlers: {
          flaky: () => {
            calls++;
            if (calls < 3) throw new Error(`transient ${calls}`);
            return "ok";
          },
        },
      });
      const { id } = await queue.add("flaky", {}, { attempts: 5, backoff: { type: "fixed", delayMs: 10 } });
      await waitFor(async () => (await state(id)) === "completed", { description: "completed after retries" });
      const job = (await backend.get(id))!;
      expect(job.attempt).toBe(3);
      expect(job.history.map((a) => a.outcome)).toEqual(["failed", "failed", "completed"]);
      expect(job.history[0]!.error?.message).toBe("transient 1");
    });

    it("sends UnrecoverableError straight to dead, whatever attempts remain", async () => {
      const dead: string[] = [];
      const w = worker({
        handlers: {
          charge: () => {
            throw new UnrecoverableError("card declined");
          },
        },
      });
      w.on("job:dead", ({ job, reason }) => dead.push(`${job.id}:${reason}`));
      const { id } = await queue.add("charge", { orderId: 1 }, { attempts: 5 });
      await waitFor(async () => (await state(id)) === "dead");
      const job = (await backend.get(id))!;
      expect(job.attempt).toBe(1);
      expect(job.error).toMatchObject({ name: "UnrecoverableError", message: "card declined" });
      expect(job.error?.stack).toContain("worker.test.ts");
      expect(dead).toEqual([`${id}:unrecoverable`]);
    });

    it("a result over maxResultBytes fails the job at once, saying its size; one at the limit completes", async () => {
      // 100 bytes of JSON: the string's 98 characters and its quotes; "é" is two bytes of UTF-8.
      worker({ maxResultBytes: 100, handlers: { out: (job) => (job.data as { text: string }).text } });
      const fits = await queue.add("out", { text: "a".repeat(98) }, { attempts: 3 });
      const over = await queue.add("out", { text: "é".repeat(50) }, { attempts: 3 });
      await waitFor(async () => (await state(fits.id)) === "completed" && (await state(over.id)) === "dead");
      expect((await backend.get(fits.id))!.result).toBe("a".repeat(98));
      const dead = (await backend.get(over.id))!;
      expect(dead.attempt).toBe(1);
      expect(dead.result).toBeNull();
      expect(dead.error?.name).toBe("UnrecoverableError");
      expect(dead.error?.message).toMatch(/^the handler's result is 102 bytes of JSON, over maxResultBytes \(100\): store large output elsewhere/);
      expect(() => new Worker({ backend, queues: "q", handlers: {}, maxResultBytes: 0, autostart: false })).toThrow(/maxResultBytes/);
    });

    it("a result nested deeper than 128 levels fails the job at once; one of 128 levels completes", async () => {
      // SQLite's JSON functions refuse past 1,000 levels: the job stayed active while its settle failed again and again.
      const nested = (levels: number): unknown => {
        let value: unknown = 1;
        for (let i = 0; i < levels; i++) value = [value];
        return value;
      };
      worker({ handlers: { nest: (job) => nested((job.data as { levels: number }).levels) } });
      const fits = await queue.add("nest", { levels: 128 }, { attempts: 3 });
      const over = await queue.add("nest", { levels: 129 }, { attempts: 3 });
      const far = await queue.add("nest", { levels: 3_000 }, { attempts: 3 });
      await waitFor(async () => (await state(fits.id)) === "completed" && (await state(over.id)) === "dead" && (await state(far.id)) === "dead");
      expect((await backend.get(fits.id))!.result).toEqual(nested(128));
      for (const id of [over.id, far.id]) {
        const dead = (await backend.get(id))!;
        expect(dead.attempt).toBe(1);
        expect(dead.error?.message).toBe("the handler's result nests arrays or objects more than 128 levels deep, as no payload may; return a flatter value");
      }
    });

    it("keeps an error's message up to 65,536 characters and its name up to 256, cut with a mark", async () => {
      // A message of megabytes (a handler quoting its whole input) made its batch too large to send.
      worker({
        handlers: {
          huge: () => {
            const e = new Error(`start ${"m".repeat(3_000_000)} end`);
            e.name = `N${"n".repeat(1_000)}`;
            throw e;
          },
        },
      });
      const { id } = await queue.add("huge", {}, { attempts: 1 });
      await waitFor(async () => (await state(id)) === "dead");
      const error = (await backend.get(id))!.error!;
      expect(error.message).toHaveLength(65_536);
      expect(error.message.startsWith("start mmm")).toBe(true);
      expect(error.message.endsWith("m… [truncated]")).toBe(true);
      expect(error.name).toHaveLength(256);
      expect(error.name.endsWith("… [truncated]")).toBe(true);
      expect(error.stack!.length).toBeLessThanOrEqual(16_384);
    });

    it("keeps full forensics when attempts run out", async () => {
      worker({
        handlers: {
          poison: () => {
            throw new TypeError("cannot read properties of undefined");
          },
        },
      });
      const { id } = await queue.add("poison", { orderId: 42 }, { attempts: 3, backoff: { type: "fixed", delayMs: 5 } });
      await waitFor(async () => (await state(id)) === "dead");
      const job = (await backend.get(id))!;
      expect(job.data).toEqual({ orderId: 42 });
      expect(job.attempt).toBe(3);
      expect(job.finishedAt).not.toBeNull();
      expect(job.error).toMatchObject({ name: "TypeError", message: "cannot read properties of undefined" });
      expect(job.history.map((a) => a.outcome)).toEqual(["failed", "failed", "dead"]);
      for (const a of job.history) expect(a).toMatchObject({ pid: process.pid, host: expect.any(String) as string });
    });

    it("uses the delay a handler asks for with RetryLater", async () => {
      let first = true;
      worker({
        handlers: {
          limited: () => {
            if (first) {
              first = false;
              throw new RetryLater(60_000);
            }
          },
        },
      });
      const { id } = await queue.add("limited", {});
      await waitFor(async () => (await state(id)) === "scheduled");
      const job = (await backend.get(id))!;
      const now = await backend.now();
      expect(job.runAt - now).toBeGreaterThan(50_000);
      expect(job.runAt - now).toBeLessThanOrEqual(60_000);
    });

    it("aborts a handler at its timeout and retries it", async () => {
      const reasons: unknown[] = [];
      worker({
        handlers: {
          slow: async (_job, ctx) => {
            await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve()));
            reasons.push(ctx.signal.reason);
          },
        },
      });
      const { id } = await queue.add("slow", {}, { timeoutMs: 30, attempts: 2, backoff: { type: "fixed", delayMs: 0 } });
      await waitFor(async () => (await state(id)) === "dead", { description: "dead after two timeouts" });
      const job = (await backend.get(id))!;
      expect(job.history.map((a) => a.error?.name)).toEqual(["JobTimeoutError", "JobTimeoutError"]);
      expect(reasons).toHaveLength(2);
      expect(reasons[0]).toBeInstanceOf(JobTimeoutError);
    });

    it("validates a defined job's payload at run time: invalid goes dead without retries", async () => {
      const email = defineJob("email", z.object({ to: z.string().email() }));
      let ran = 0;
      worker({ handlers: [email.handle(() => void ran++)] });
      // Bypass enqueue-time validation, as an older producer or a hand-written row would.
      const { id } = await queue.add("email", { to: "not an address" }, { attempts: 5 });
      await waitFor(async () => (await state(id)) === "dead");
      const job = (await backend.get(id))!;
      expect(ran).toBe(0);
      expect(job.attempt).toBe(1);
      expect(job.error?.name).toBe("PayloadValidationError");
      expect(job.error?.message).toContain("to:");
    });

    it("a backoff function that throws retries the job at once and reports the throw, instead of leaving the job running", async () => {
      const flaky = defineJob("flaky", z.object({}), {
        backoff: () => {
          throw new Error("backoff bug");
        },
      });
      const errors: string[] = [];
      const w = worker({
        handlers: [
          flaky.handle((job) => {
            if (job.attempt === 1) throw new Error("first attempt fails");
            return "second";
          }),
        ],
      });
      w.on("worker:error", ({ error, during }) => errors.push(`${during}: ${error.message}`));
      const { id } = await queue.add(flaky, {}, { attempts: 3 });
      await waitFor(async () => (await state(id)) === "completed", { description: "the retry to complete" });
      expect((await backend.get(id))!.history.map((a) => a.outcome)).toEqual(["failed", "completed"]);
      expect(errors).toEqual([expect.stringMatching(/backoff.*backoff bug/) as string]);
    });

    it("validates a defined job's payload at enqueue and stores nothing when invalid", async () => {
      const email = defineJob("email", z.object({ to: z.string().email() }));
      await expect(queue.add(email, { to: "nope" })).rejects.toThrow(/invalid payload for job "email": to:/);
      expect((await queue.stats()).counts.waiting).toBe(0);
    });

    it("leaves jobs it has no handler for waiting, never lost", async () => {
      worker({ handlers: { known: () => "done" } });
      const unknown = await queue.add("unknown", {});
      const known = await queue.add("known", {});
      await waitFor(async () => (await state(known.id)) === "completed");
      expect(await state(unknown.id)).toBe("waiting");
    });

    it("aborts the handler when its job is cancelled, and discards its late result", async () => {
      let reason: unknown;
      const w = worker({
        leaseMs: 300,
        handlers: {
          long: async (_job, ctx) => {
            await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve()));
            reason = ctx.signal.reason;
            return "late result";
          },
        },
      });
      const lost: string[] = [];
      w.on("job:lease-lost", ({ reason: r }) => lost.push(r));
      const { id } = await queue.add("long", {});
      await waitFor(async () => (await state(id)) === "active");
      expect(await backend.cancel(id)).toBe("cancelled");
      await waitFor(() => reason !== undefined, { description: "handler aborted at the next heartbeat" });
      expect(reason).toBeInstanceOf(LeaseLostError);
      expect(lost).toEqual(["cancelled"]);
      const job = (await backend.get(id))!;
      expect(job.state).toBe("cancelled");
      expect(job.result).toBeNull();
    });

    it("keeps a long job alive with heartbeats while the rescuer runs", async () => {
      const clock = await onFakeClock();
      let finish!: (value: string) => void;
      // Counts the renewals the worker has the answer to: a tick while one is still out sends none,
      // and with the clock moved only here the next step would then wait for a renewal for ever.
      let answered = 0;
      const counting = new Proxy(backend, {
        get(target, prop) {
          if (prop === "heartbeat") return (...args: Parameters<Backend["heartbeat"]>) => target.heartbeat(...args).finally(() => answered++);
          const value: unknown = Reflect.get(target, prop, target);
          return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      });
      worker({ backend: counting, clock, leaseMs: 150, maintenance: false, handlers: { long: () => new Promise<string>((r) => (finish = r)) } });
      const { id } = await queue.add("long", {});
      await waitFor(async () => (await state(id)) === "active" && finish !== undefined);
      // Four leases' worth of time, a heartbeat (every 50 ms) at a time, the rescuer after each.
      for (let t = 0, step = 1; t < 600; t += 50, step++) {
        clock.advance(50);
        await waitFor(async () => answered === step && (await backend.get(id))!.lease?.expiresAt === clock.now() + 150, {
          description: "the heartbeat renewed the lease",
        });
        // The worker's own bookkeeping after the answer (microtasks) before the next tick.
        await new Promise((resolve) => setImmediate(resolve));
        expect(await backend.rescueExpired()).toEqual([]);
      }
      finish("done");
      await waitFor(async () => (await state(id)) === "completed");
      expect((await backend.get(id))!.attempt).toBe(1);
    });

    it("refuses a stale worker's late acknowledgement after another took the job over", async () => {
      const clock = await onFakeClock();
      // Worker A's heartbeats never reach the store (a partition, a long GC pause): its lease runs out.
      const partitioned = new Proxy(backend, {
        get(target, prop) {
          if (prop === "heartbeat") return async () => ({ lost: [] });
          const value: unknown = Reflect.get(target, prop, target);
          return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      });
      let releaseA!: () => void;
      const gateA = new Promise<void>((r) => (releaseA = r));
      const a = worker({
        backend: partitioned,
        clock,
        workerId: "A",
        concurrency: 1, // its one slot stays busy, so A cannot take the rescued job back itself
        leaseMs: 100,
        maintenance: false,
        handlers: { job: () => gateA.then(() => "from A") },
      });
      const refused: string[] = [];
      a.on("job:settle-refused", ({ operation }) => refused.push(operation));
      const { id } = await queue.add("job", {});
      await waitFor(async () => (await state(id)) === "active");
      clock.advance(101);
      expect((await backend.rescueExpired()).map((r) => r.id)).toEqual([id]);
      worker({ clock, workerId: "B", maintenance: false, handlers: { job: () => "from B" } });
      await waitFor(async () => (await state(id)) === "completed");
      releaseA();
      await waitFor(() => refused.length === 1, { description: "A's late completion refused" });
      expect(refused).toEqual(["complete"]);
      const job = (await backend.get(id))!;
      expect(job.result).toBe("from B");
      expect(job.history.map((h) => `${h.workerId}:${h.outcome}`)).toEqual(["A:lease-expired", "B:completed"]);
    });

    it("records progress and offers an idempotency guard", async () => {
      const firsts: boolean[] = [];
      worker({
        handlers: {
          step: async (job, ctx) => {
            await ctx.progress({ pct: 50 });
            firsts.push(await ctx.once(`charge:${(job.data as { order: string }).order}`));
          },
        },
      });
      const a = await queue.add("step", { order: "o1" });
      const b = await queue.add("step", { order: "o1" });
      await waitFor(async () => (await state(a.id)) === "completed" && (await state(b.id)) === "completed");
      expect((await backend.get(a.id))!.progress).toEqual({ pct: 50 });
      expect(firsts.sort()).toEqual([false, true]);
    });

    it("starts a job promptly from an in-process wake-up, not the poll", async () => {
      const started: number[] = [];
      let claims = 0;
      const counting = new Proxy(backend, {
        get(target, prop) {
          const value: unknown = Reflect.get(target, prop, target);
          if (prop === "claim") return (...args: Parameters<Backend["claim"]>) => target.claim(...args).finally(() => claims++);
          return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      });
      worker({ backend: counting, pollIntervalMs: 60_000, handlers: { now: () => void started.push(Date.now()) } });
      await waitFor(() => claims >= 1, { description: "the worker's first (empty) claim" });
      const t0 = Date.now();
      await queue.add("now", {});
      // Woken by the add, not the 60 s poll: 10 s leaves a loaded machine room and is still far from it.
      await waitFor(() => started.length === 1, { timeoutMs: 15_000, description: "started well before the 60 s poll" });
      expect(started[0]! - t0).toBeLessThan(10_000);
    });

    describe("close()", () => {
      it("drains in-flight jobs within the grace period", async () => {
        const w = worker({ handlers: { work: () => new Promise((r) => setTimeout(() => r("done"), 100)) } });
        const ids = await queue.addBulk(Array.from({ length: 5 }, () => ({ name: "work", data: {} })));
        await waitFor(() => w.activeCount === 5);
        const result = await w.close({ graceMs: 5_000 });
        expect(result).toEqual({ drained: true, releasedJobIds: [] });
        for (const { id } of ids) expect(await state(id)).toBe("completed");
      });

      it("stops claiming at once, then aborts and releases what did not finish, without using an attempt", async () => {
        const aborted: unknown[] = [];
        const w = worker({
          concurrency: 2,
          handlers: {
            stuck: (_job, ctx) =>
              new Promise((resolve) =>
                ctx.signal.addEventListener("abort", () => {
                  aborted.push(ctx.signal.reason);
                  resolve("too late");
                }),
              ),
          },
        });
        const ids = await queue.addBulk(Array.from({ length: 4 }, () => ({ name: "stuck", data: {} })));
        await waitFor(() => w.activeCount === 2);
        const result = await w.close({ graceMs: 50 });
        expect(result.drained).toBe(false);
        expect(result.releasedJobIds).toHaveLength(2);
        expect(aborted).toHaveLength(2);
        const stats = await queue.stats();
        expect(stats.counts.waiting).toBe(4);
        expect(stats.counts.active).toBe(0);
        for (const { id } of ids) expect((await backend.get(id))!.attempt).toBe(0);
        const released = (await backend.get(result.releasedJobIds[0]!))!;
        expect(released.history.map((h) => h.outcome)).toEqual(["released"]);
      });
    });

    describe("prefetch (jobs claimed ahead of free slots)", () => {
      /** The test backend, counting claim calls. */
      function countingClaims(): { backend: Backend; claims: number[] } {
        const claims: number[] = [];
        const counted = new Proxy(backend, {
          get(target, prop) {
            if (prop === "claim") {
              return async (request: Parameters<Backend["claim"]>[0]) => {
                const out = await target.claim(request);
                claims.push(out.length);
                return out;
              };
            }
            const value: unknown = Reflect.get(target, prop, target);
            return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
          },
        });
        return { backend: counted, claims };
      }

      it("claims many jobs per call, starts them as slots free up, and never exceeds its concurrency", async () => {
        const { backend: counted, claims } = countingClaims();
        await queue.addBulk(Array.from({ length: 100 }, (_, n) => ({ name: "job", data: { n } })));
        let running = 0;
        let peak = 0;
        let peakBuffered = 0;
        const w = worker({
          backend: counted,
          concurrency: 2,
          prefetch: 20,
          handlers: {
            job: async () => {
              running++;
              peak = Math.max(peak, running);
              peakBuffered = Math.max(peakBuffered, w.bufferedCount);
              await new Promise((r) => setTimeout(r, 1));
              running--;
            },
          },
        });
        await waitFor(async () => (await queue.stats()).counts.completed === 100, { description: "100 completed" });
        expect(peak).toBe(2);
        expect(peakBuffered).toBeGreaterThan(10);
        // 100 jobs through 2 slots one claim per free slot would take ~50 claims; ahead of time, a handful.
        expect(claims.filter((n) => n > 0).length).toBeLessThanOrEqual(12);
        expect(Math.max(...claims)).toBe(22);
      });

      it("keeps buffered jobs' leases alive while they wait for a slot", async () => {
        const clock = await onFakeClock();
        // The test waits for each heartbeat's answer before it moves the clock on: on a slow store,
        // fake time must not outrun a renewal that is still on its way.
        let heartbeatsOut = 0;
        const watched = new Proxy(backend, {
          get(target, prop) {
            if (prop === "heartbeat") {
              return async (...args: Parameters<Backend["heartbeat"]>) => {
                heartbeatsOut++;
                try {
                  return await target.heartbeat(...args);
                } finally {
                  heartbeatsOut--;
                }
              };
            }
            const value: unknown = Reflect.get(target, prop, target);
            return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
          },
        });
        worker({ backend: watched, clock, concurrency: 1, prefetch: 5, leaseMs: 150, maintenance: false, handlers: { slow: () => sleepOn(clock, 100) } });
        const ids = await queue.addBulk(Array.from({ length: 6 }, () => ({ name: "slow", data: {} })));
        await waitFor(async () => (await queue.stats()).counts.active === 6, { description: "one running, five buffered" });
        // Six jobs one after another take 600 ms: four leases' worth for the last one in the buffer.
        // 25 ms at a time (half a heartbeat period), the rescuer after each step.
        const rescued: string[] = [];
        for (let step = 0; step < 80 && (await queue.stats()).counts.completed < 6; step++) {
          clock.advance(25);
          await settleDown();
          await waitFor(() => heartbeatsOut === 0, { description: "the heartbeat answered" });
          rescued.push(...(await backend.rescueExpired()).map((r) => r.id));
        }
        expect((await queue.stats()).counts.completed).toBe(6);
        expect(rescued).toEqual([]);
        for (const { id } of ids) expect((await backend.get(id))!.attempt).toBe(1);
      });

      it("hands buffered jobs back unstarted as soon as shutdown begins, while the running one drains", async () => {
        let finish!: () => void;
        const gate = new Promise<void>((r) => (finish = r));
        const w = worker({ concurrency: 1, prefetch: 4, handlers: { job: () => gate } });
        const released: string[] = [];
        w.on("job:released", ({ jobIds }) => released.push(...jobIds));
        const ids = await queue.addBulk(Array.from({ length: 5 }, () => ({ name: "job", data: {} })));
        await waitFor(() => w.activeCount === 1 && w.bufferedCount === 4);
        const closing = w.close({ graceMs: 5_000 });
        await waitFor(() => released.length === 4, { description: "buffered jobs released before the running one finished" });
        const stats = await queue.stats();
        expect(stats.counts.waiting).toBe(4);
        expect(stats.counts.active).toBe(1);
        for (const id of released) expect((await backend.get(id))!.attempt).toBe(0);
        finish();
        const result = await closing;
        expect(result).toEqual({ drained: true, releasedJobIds: [] });
        expect(ids.map((j) => j.id).filter((id) => !released.includes(id))).toHaveLength(1);
      });

      it("drops a buffered job whose lease is lost (cancelled) without running it", async () => {
        let finish!: () => void;
        const gate = new Promise<void>((r) => (finish = r));
        const ran: string[] = [];
        const w = worker({
          concurrency: 1,
          prefetch: 3,
          leaseMs: 300,
          handlers: {
            job: async (job) => {
              ran.push(job.id);
              await gate;
            },
          },
        });
        const lost: Array<{ id: string; reason: string }> = [];
        w.on("job:lease-lost", ({ job, reason }) => lost.push({ id: job.id, reason }));
        const ids = (await queue.addBulk(Array.from({ length: 4 }, () => ({ name: "job", data: {} })))).map((j) => j.id);
        await waitFor(() => w.activeCount === 1 && w.bufferedCount === 3);
        const victim = ids.find((id) => !ran.includes(id))!;
        expect(await backend.cancel(victim)).toBe("cancelled");
        await waitFor(() => lost.length === 1, { description: "the next heartbeat reports the buffered lease lost" });
        expect(lost).toEqual([{ id: victim, reason: "cancelled" }]);
        expect(w.bufferedCount).toBe(2);
        finish();
        await waitFor(async () => (await queue.stats()).counts.completed === 3);
        expect(ran).not.toContain(victim);
        expect(await state(victim)).toBe("cancelled");
      });

      it("never starts a buffered job whose lease ran out while it waited (the process was stopped, heartbeats stuck)", async () => {
        const clock = await onFakeClock();
        // Heartbeats that never answer: nothing renews or reports the buffered lease, as when the
        // whole process was SIGSTOPped past its leases.
        const stuck = new Proxy(backend, {
          get(target, prop) {
            if (prop === "heartbeat") return () => new Promise(() => undefined);
            const value: unknown = Reflect.get(target, prop, target);
            return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
          },
        });
        const runs: Array<{ id: string; attempt: number; token: number | undefined }> = [];
        let finishFirst!: () => void;
        const first = new Promise<void>((r) => (finishFirst = r));
        const w = worker({
          backend: stuck,
          clock,
          concurrency: 1,
          prefetch: 1,
          leaseMs: 100,
          maintenance: false,
          handlers: {
            job: async (job) => {
              runs.push({ id: job.id, attempt: job.attempt, token: job.lease?.token });
              if (runs.length === 1) await first;
            },
          },
        });
        const lost: string[] = [];
        const staleTokens = new Map<string, number | undefined>();
        w.on("job:lease-lost", ({ job, reason }) => {
          lost.push(`${job.id}:${reason}`);
          staleTokens.set(job.id, job.lease?.token);
        });
        const [a, b] = (
          await queue.addBulk([
            { name: "job", data: {} },
            { name: "job", data: {} },
          ])
        ).map((j) => j.id);
        await waitFor(() => runs.length === 1 && w.bufferedCount === 1);
        // Both leases run out (the store has not rescued them: no rescuer), then the slot frees up.
        clock.advance(101);
        finishFirst();
        await waitFor(() => lost.length === 1, { description: "the buffered job dropped when its slot came free" });
        expect(lost).toEqual([`${b}:expired`]);
        // Handed back unstarted (the store had not rescued it yet), so no attempt is used up: it
        // runs once, as attempt 1, under a fresh lease (a greater token), never under the stale one.
        await waitFor(async () => (await state(b!)) === "completed");
        expect(runs.map(({ id, attempt }) => ({ id, attempt }))).toEqual([
          { id: a, attempt: 1 },
          { id: b, attempt: 1 },
        ]);
        expect(runs[1]!.token).toBeGreaterThan(staleTokens.get(b!)!);
        expect((await backend.get(b!))!.history.map((h) => h.outcome)).toEqual(["released", "completed"]);
      });

      it("tells the store which jobs were only buffered: when the worker dies, only the running job is blamed (maxStalls)", async () => {
        const clock = await onFakeClock();
        // A worker whose heartbeats stop (it died), and whose buffered marks the test can see land.
        const dying = dyingBackend();
        // A store that records the buffered jobs with the claim itself (claimMarksBuffered) is sent no such mark.
        const marksExpected = backend.capabilities.claimMarksBuffered === true ? 0 : 1;
        const ran: string[] = [];
        const w = worker({
          backend: dying.backend,
          clock,
          concurrency: 1,
          prefetch: 3,
          leaseMs: 1_000,
          maintenance: false,
          handlers: { job: (job) => (ran.push(job.id), new Promise(() => undefined)) },
        });
        const ids = (await queue.addBulk(Array.from({ length: 4 }, () => ({ name: "job", data: {} })))).map((j) => j.id);
        await waitFor(() => w.activeCount === 1 && w.bufferedCount === 3 && dying.marks.buffered === marksExpected, {
          timeoutMs: 20_000,
          description: "one running, three buffered and marked",
        });
        dying.die();
        clock.advance(1_001);
        const rescued = await backend.rescueExpired({ maxStalls: 1 });
        const running = ran[0]!;
        expect(Object.fromEntries(rescued.map((r) => [r.id, r.state]))).toEqual(Object.fromEntries(ids.map((id) => [id, id === running ? "dead" : "waiting"])));
        for (const id of ids.filter((id) => id !== running)) expect((await backend.get(id))!.stalls).toBe(0);
        expect(dying.marks.sent).toBe(marksExpected);
      });

      it("a job that waited in the buffer is marked started when it starts: when the worker dies running it, it is blamed (maxStalls)", async () => {
        const clock = await onFakeClock();
        const dying = dyingBackend();
        const ran: string[] = [];
        let releaseFirst!: () => void;
        const firstDone = new Promise<void>((r) => (releaseFirst = r));
        const w = worker({
          backend: dying.backend,
          clock,
          concurrency: 1,
          prefetch: 1,
          leaseMs: 1_000,
          maintenance: false,
          // The first job finishes when told; the second (it waited in the buffer) never does.
          handlers: { job: (job) => (ran.push(job.id), ran.length === 1 ? firstDone : new Promise(() => undefined)) },
        });
        const ids = (await queue.addBulk(Array.from({ length: 2 }, () => ({ name: "job", data: {} })))).map((j) => j.id);
        await waitFor(() => w.activeCount === 1 && w.bufferedCount === 1, { timeoutMs: 20_000, description: "one running, one buffered" });
        releaseFirst();
        await waitFor(() => ran.length === 2 && dying.marks.started === 1, { timeoutMs: 20_000, description: "the buffered job started, and marked so" });
        // The first job's completion goes out in the settler's next batch: wait until the store has it.
        await waitFor(async () => (await backend.get(ids[0]!))?.state === "completed", {
          timeoutMs: 20_000,
          description: "the first job completed in the store",
        });
        dying.die();
        clock.advance(1_001);
        const rescued = await backend.rescueExpired({ maxStalls: 1 });
        expect(rescued.map((r) => [r.id, r.state])).toEqual([[ids[1], "dead"]]);
      });

      it("sends no buffered marks at concurrency 2 or more, where they could change no verdict: a dead worker's jobs are all excused", async () => {
        const clock = await onFakeClock();
        const dying = dyingBackend();
        const w = worker({
          backend: dying.backend,
          clock,
          concurrency: 2,
          prefetch: 3,
          leaseMs: 1_000,
          maintenance: false,
          handlers: { job: () => new Promise(() => undefined) },
        });
        const ids = (await queue.addBulk(Array.from({ length: 5 }, () => ({ name: "job", data: {} })))).map((j) => j.id);
        await waitFor(() => w.activeCount === 2 && w.bufferedCount === 3, { timeoutMs: 20_000, description: "two running, three buffered" });
        dying.die();
        clock.advance(1_001);
        const rescued = await backend.rescueExpired({ maxStalls: 1 });
        // Two jobs were running when it died: neither is known to be the cause, and the buffered
        // ones are not blamed either.
        expect(Object.fromEntries(rescued.map((r) => [r.id, r.state]))).toEqual(Object.fromEntries(ids.map((id) => [id, "waiting"])));
        for (const id of ids) expect((await backend.get(id))!.stalls).toBe(0);
        expect(dying.marks.sent).toBe(0);
      });

      it("never starts a buffered job reported lost in the same heartbeat that aborts the running one", async () => {
        const clock = await onFakeClock();
        let finish!: () => void;
        const gate = new Promise<void>((r) => (finish = r));
        const ran: string[] = [];
        const w = worker({
          clock,
          maintenance: false,
          concurrency: 1,
          prefetch: 2,
          leaseMs: 300,
          handlers: {
            job: async (job) => {
              ran.push(job.id);
              await gate;
            },
          },
        });
        const lost: string[] = [];
        w.on("job:lease-lost", ({ job }) => lost.push(job.id));
        const ids = (await queue.addBulk(Array.from({ length: 3 }, () => ({ name: "job", data: {} })))).map((j) => j.id);
        await waitFor(() => w.activeCount === 1 && w.bufferedCount === 2);
        const running = ran[0]!;
        const [nextBuffered, lastBuffered] = ids.filter((id) => id !== running);
        // Cancel the running job and the buffered job that would take its slot, together.
        expect(await backend.cancel(running)).toBe("cancelled");
        expect(await backend.cancel(nextBuffered!)).toBe("cancelled");
        clock.advance(100);
        await waitFor(() => lost.length === 2, { description: "one heartbeat reports both leases lost" });
        await waitFor(() => ran.length === 2, { description: "the freed slot starts the job that is still ours" });
        expect(ran).toEqual([running, lastBuffered]);
        finish();
        await waitFor(async () => (await state(lastBuffered!)) === "completed");
        expect(ran).not.toContain(nextBuffered);
      });

      it("a forced close during the release of buffered jobs cuts the grace period short", async () => {
        // A slow store answer to the release of the buffer: the force arrives while it is out.
        const slowRelease = new Proxy(backend, {
          get(target, prop) {
            if (prop === "release") {
              return async (leases: Parameters<Backend["release"]>[0]) => {
                await new Promise((r) => setTimeout(r, 300));
                return target.release(leases);
              };
            }
            const value: unknown = Reflect.get(target, prop, target);
            return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
          },
        });
        const w = worker({
          backend: slowRelease,
          concurrency: 1,
          prefetch: 2,
          handlers: { stuck: (_job, ctx) => new Promise((resolve) => ctx.signal.addEventListener("abort", () => resolve("aborted"))) },
        });
        await queue.addBulk(Array.from({ length: 3 }, () => ({ name: "stuck", data: {} })));
        await waitFor(() => w.activeCount === 1 && w.bufferedCount === 2);
        const closing = w.close({ graceMs: 60_000 });
        await new Promise((r) => setTimeout(r, 50));
        void w.close({ force: true });
        const result = await Promise.race([closing, new Promise<"still waiting">((r) => setTimeout(() => r("still waiting"), 10_000))]);
        expect(result).not.toBe("still waiting");
        expect(result).toMatchObject({ drained: false });
        expect((result as { releasedJobIds: string[] }).releasedJobIds).toHaveLength(1);
      });

      it("refuses a negative prefetch with a clear error", () => {
        expect(() => worker({ prefetch: -1, handlers: { job: () => null } })).toThrow(/prefetch/);
      });
    });
  });
});
