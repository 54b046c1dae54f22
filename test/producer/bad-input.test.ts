/**
 * Bad input to the producer and worker APIs gets an InvalidInputError that says what to pass,
 * when it is given: never a TypeError from deep inside, a store's driver error, a silently
 * ignored option, or a setting that turns a timer into a busy loop. (Found by a hostile probe of
 * the public API, session 20.)
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { defineJob, InvalidInputError, Queue, RetryLater, silentLogger, Worker, type Backend } from "../../src/index.js";
import { createTestBackend } from "../../src/testing/index.js";
import { waitFor } from "../helpers/wait-for.js";

let backend: Backend;
beforeEach(() => {
  backend = createTestBackend();
});
afterEach(() => backend.close());

/** Runs `make` and returns the InvalidInputError it throws (failing the test on anything else). */
async function refusal(make: () => unknown): Promise<InvalidInputError> {
  let caught: unknown = null;
  try {
    await make();
  } catch (error) {
    caught = error;
  }
  expect(caught, "an InvalidInputError").toBeInstanceOf(InvalidInputError);
  return caught as InvalidInputError;
}

describe("new Worker() options", () => {
  const worker = (extra: Record<string, unknown>) =>
    new Worker({ backend, queues: "q", handlers: { a: () => null }, autostart: false, logger: silentLogger, ...extra });

  it.each([
    [
      "leaseMs past the longest timer (a 1 ms heartbeat, every claim refused)",
      { leaseMs: 1e20 },
      /option leaseMs must be a whole number of milliseconds from 1 to 2147483647/,
    ],
    ["leaseMs whose default heartbeat (a third) is past the longest timer", { leaseMs: 7e9 }, /option leaseMs .* from 1 to 2147483647/],
    ["pollIntervalMs past the longest timer (a busy poll)", { pollIntervalMs: 3e9 }, /option pollIntervalMs .* 2147483647/],
    ["a NaN shutdownGraceMs", { shutdownGraceMs: Number.NaN }, /option shutdownGraceMs .* from 0 to/],
    ["a misspelt option", { concurency: 5 }, /unknown new Worker\(\) option key "concurency"/],
    ["queues that are not names", { queues: 5 }, /option queues must be a queue name or an array of them; got 5/],
    ["a sandbox without a module", { sandbox: {} }, /sandbox option module must be the path/],
    ["a sandbox module that is not a path", { sandbox: { module: 5 } }, /sandbox option module must be the path/],
    ["a watchdog limit that is NaN", { watchdog: { stallMs: Number.NaN } }, /watchdog option stallMs .* from 200/],
    ["maintenance as a string", { maintenance: "yes" }, /maintenance option must be an object/],
    ["a misspelt maintenance option", { maintenance: { bogus: 1 } }, /unknown maintenance option key "bogus"/],
    ["a rescue interval of 0", { maintenance: { rescueIntervalMs: 0 } }, /maintenance option rescueIntervalMs .* from 1/],
    ["a scheduler refresh of 0", { scheduler: { refreshMs: 0 } }, /scheduler option refreshMs .* from 1/],
    ["a scheduler that is a string", { scheduler: "on" }, /option scheduler must be true, false or/],
    ["an empty workerId", { workerId: "" }, /option workerId must be 1-512 characters/],
    ["a workerId with a NUL", { workerId: "w\u0000" }, /option workerId must be 1-512 characters without control characters/],
    ["a workerId that is a number", { workerId: 5 }, /option workerId must be/],
    ["random that is not a function", { random: 0.5 }, /option random must be a function/],
  ])("refuses %s", async (_what, extra, message) => {
    expect((await refusal(() => worker(extra))).message).toMatch(message);
  });

  it("runs a job whose timeoutMs is past the longest timer to its end (it timed out after 1 ms)", async () => {
    const q = new Queue("q", { backend });
    const { id } = await q.add("a", null, { timeoutMs: 3e9, attempts: 1 });
    const w = new Worker({
      backend,
      queues: "q",
      handlers: { a: () => new Promise((resolve) => setTimeout(() => resolve("slept"), 100)) },
      logger: silentLogger,
      pollIntervalMs: 20,
    });
    try {
      await waitFor(async () => ["completed", "dead"].includes((await q.getJob(id))?.state ?? ""));
      const job = (await q.getJob(id))!;
      expect({ state: job.state, result: job.result }).toEqual({ state: "completed", result: "slept" });
    } finally {
      await w.close();
    }
  });

  it("takes the longest timer and a watchdog of two stamps", async () => {
    const w = worker({ leaseMs: 2 ** 31 - 1, pollIntervalMs: 2 ** 31 - 1, watchdog: { stallMs: 200 }, maintenance: { rescueIntervalMs: 1, maxStalls: 2 } });
    await w.close();
  });
});

describe("new Queue() and defineJob() defaults", () => {
  it.each([
    ["a default jobId (every add after the first a duplicate, its data dropped)", { jobId: "same" }, /jobId names one job and cannot be a default/],
    ["a default dedup key", { dedup: { key: "k", ttlMs: 1000 } }, /dedup names one job/],
    ["a misspelt default (BullMQ's delay)", { delay: 5000 }, /unknown job option "delay"; defaults take: delayMs,/],
    ["a bad default value", { attempts: -1 }, /option attempts must be an integer from 1/],
    ["defaults that are not an object", 5, /defaults must be an object of job options; got 5/],
  ])("a Queue refuses %s", async (_what, defaults, message) => {
    const error = await refusal(() => new Queue("q", { backend, defaults: defaults as never }));
    expect(error.message).toMatch(message);
    expect(error.message).toMatch(/^new Queue\("q"\) option defaults/);
  });

  it("defineJob refuses bad defaults where they are given", async () => {
    expect((await refusal(() => defineJob("a", z.object({}), { attempts: -1 }))).message).toMatch(/defineJob\("a"\) options: option attempts/);
    expect((await refusal(() => defineJob("a", z.object({}), { jobId: "x" } as never))).message).toMatch(/jobId names one job/);
    expect((await refusal(() => defineJob("a", z.object({}), null as never))).message).toMatch(/options must be an object/);
  });

  it.each([
    ["NaN (the size check switched off)", Number.NaN],
    ["a negative limit", -1],
    ["a fraction", 1.5],
    ["a string", "1000"],
  ])("a Queue refuses maxPayloadBytes %s", async (_what, maxPayloadBytes) => {
    expect((await refusal(() => new Queue("q", { backend, maxPayloadBytes: maxPayloadBytes as number }))).message).toMatch(
      /option maxPayloadBytes must be a whole number of bytes from 1 up/,
    );
  });

  it("a Queue refuses a misspelt option", async () => {
    expect((await refusal(() => new Queue("q", { backend, maxPayload: 10 } as never))).message).toMatch(/unknown new Queue\("q"\) option key "maxPayload"/);
  });

  it("good defaults still apply", async () => {
    const q = new Queue("q", { backend, defaults: { attempts: 7, priority: 2 } });
    const { id } = await q.add("a", {});
    expect(await q.getJob(id)).toMatchObject({ maxAttempts: 7, priority: 2 });
  });
});

describe("queue.add and addBulk", () => {
  it.each([
    ["null", null],
    ["a number", 5],
    ["true", true],
    ["a string (whose repeat method would pass for options.repeat)", "x"],
    ["an array", []],
  ])("add refuses options that are %s", async (_what, options) => {
    const q = new Queue("q", { backend });
    expect((await refusal(() => q.add("a", {}, options as never))).message).toMatch(/job options must be an object/);
  });

  it("refuses a missing or non-string job name, and jobs that are not objects in a bulk", async () => {
    const q = new Queue("q", { backend });
    expect((await refusal(() => q.add(undefined as never))).message).toMatch(/a job's name must be a job name or a definition/);
    expect((await refusal(() => q.add(null as never, {}))).message).toMatch(/a job's name must be/);
    expect((await refusal(() => q.add({} as never, {}))).message).toMatch(/a job's name must be/);
    for (const entry of [null, undefined, 1]) {
      expect((await refusal(() => q.addBulk([{ name: "a", data: {} }, entry as never]))).message).toMatch(
        /^job #1 of addBulk: a job must be \{ name, data, options \}/,
      );
    }
    // Nothing of a refused batch was stored.
    expect(await backend.list({ queue: "q" })).toEqual([]);
  });

  it.each([
    ["BullMQ's { age, count } retention (the count ignored)", { removeOnComplete: { ageMs: 1000, count: 5 } }, /unknown field removeOnComplete\.count/],
    [
      "a backoff field a fixed backoff does not take",
      { backoff: { type: "fixed", delayMs: 5, maxDelayMs: 10 } },
      /unknown field backoff\.maxDelayMs; a fixed backoff takes type, delayMs/,
    ],
    ["a misspelt backoff field", { backoff: { type: "exponential", delay: 5 } }, /unknown field backoff\.delay/],
    ["BullMQ's repeat.limit (the schedule would run for ever)", { repeat: { pattern: "* * * * *", limit: 5 } }, /unknown option repeat key "limit"/],
    ["a misfire grace past ten years", { repeat: { pattern: "* * * * *", misfire: { policy: "skip", graceMs: 1e300 } } }, /graceMs 0-315360000000 ms/],
  ])("add refuses %s", async (_what, options, message) => {
    const q = new Queue("q", { backend });
    expect((await refusal(() => q.add("a", {}, options as never))).message).toMatch(message);
  });

  it("addFlow refuses a misspelt field (a childless parent would run at once)", async () => {
    const q = new Queue("q", { backend });
    expect((await refusal(() => q.addFlow({ name: "parent", chidren: [{ name: "child" }] } as never))).message).toMatch(/unknown flow key "chidren"/);
    expect((await refusal(() => q.addFlow({ name: "parent", children: [{ name: "child", opts: {} }] } as never))).message).toMatch(
      /unknown flow\.children\[0\] key "opts"/,
    );
    expect(await backend.list({ queue: "q" })).toEqual([]);
  });

  it.each([
    ["NUL", "a\u0000b"],
    ["DEL", "a\u007fb"],
    ["a C1 control (a terminal's CSI)", "a\u009b31mb"],
    ["NEL", "a\u0085b"],
  ])("refuses a job id with %s, as it refuses every control character", async (_what, jobId) => {
    const q = new Queue("q", { backend });
    const refused = await refusal(() => q.add("a", {}, { jobId }));
    expect(refused.message).toMatch(/without control characters/);
    // The message quotes the id escaped: a CSI printed as it is would run in the terminal showing it.
    expect(refused.message).not.toMatch(/[\u0000-\u001f\u007f-\u009f]/);
    expect((await refusal(() => q.add("a", {}, { group: { key: jobId, concurrency: 1 } }))).message).toMatch(/control/);
  });

  it("takes an option key set to undefined as left out, at every level (a spread of optional settings)", async () => {
    const q = new Queue("q", { backend, defaults: { jobId: undefined, attempts: undefined }, telemetry: undefined } as never);
    const { id } = await q.add("a", null, {
      removeOnComplete: { ageMs: 1_000, count: undefined },
      backoff: { type: "fixed", delayMs: 5, maxDelayMs: undefined },
      dedup: undefined,
      lifo: undefined,
    } as never);
    expect((await q.getJob(id))!.state).toBe("waiting");
    const w = new Worker({ backend, queues: "q", handlers: { a: () => null }, autostart: false, logger: silentLogger, concurency: undefined } as never);
    await w.close();
    // A key with a value is still checked.
    expect((await refusal(() => q.add("a", null, { lifo: true } as never))).message).toMatch(/unknown job option "lifo"/);
    // Nor does a key set to undefined take a default's place.
    const withDefaults = new Queue("d", { backend, defaults: { attempts: 5, priority: 7 } });
    const { id: kept } = await withDefaults.add("a", null, { attempts: undefined, priority: undefined });
    expect(await withDefaults.getJob(kept)).toMatchObject({ maxAttempts: 5, priority: 7 });
    await withDefaults.setLimits({ maxRunning: 3, maxRunningPerName: { a: undefined } as never });
  });

  it("refuses an invalid Date in the data (JSON would store it as null)", async () => {
    const q = new Queue("q", { backend });
    expect((await refusal(() => q.add("a", { d: new Date(Number.NaN) } as never))).message).toMatch(/data\.d is an invalid Date/);
    const { id } = await q.add("a", { d: new Date(0) } as never);
    expect((await q.getJob(id))!.data).toEqual({ d: "1970-01-01T00:00:00.000Z" });
  });
});

describe("lookups, events, RetryLater", () => {
  it.each(["getJob", "cancel", "replay"] as const)("%s refuses an id that is not a string (not a driver's error)", async (call) => {
    const q = new Queue("q", { backend });
    expect((await refusal(() => q[call]({} as never))).message).toMatch(new RegExp(`takes a job id \\(a string\\); got`));
  });

  it("events() refuses an unknown type, a cursor that is not an id, and a misspelt option, when called", async () => {
    const q = new Queue("q", { backend });
    expect((await refusal(() => q.events({ types: ["bogus" as never] }))).message).toMatch(/unknown event type "bogus"; the types are added,/);
    expect((await refusal(() => q.events({ after: -1 as never }))).message).toMatch(/option after must be an event id/);
    expect((await refusal(() => q.events({ type: ["completed"] } as never))).message).toMatch(/unknown events\(\) option key "type"/);
    expect((await refusal(() => q.events({ pollIntervalMs: 3e9 }))).message).toMatch(/pollIntervalMs .* 2147483647/);
  });

  it.each([Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, "100"])("RetryLater refuses the delay %s", async (delay) => {
    expect((await refusal(() => new RetryLater(delay as number))).message).toMatch(/RetryLater takes a delay in milliseconds/);
  });

  it("RetryLater takes a negative delay (a deadline just passed) as 0, with its pause", () => {
    const late = new RetryLater(-3, { pause: "queue" });
    expect(late.delayMs).toBe(0);
    expect(late.pause).toBe("queue");
    expect(late.message).toBe("retry requested in 0 ms (queue held)");
    expect(new RetryLater(250).message).toBe("retry requested in 250 ms");
  });
});

describe("ctx.progress", () => {
  it.each([
    [
      "a cycle",
      (() => {
        const v: Record<string, unknown> = {};
        v.self = v;
        return v;
      })(),
      /ctx.progress takes JSON: progress\.self contains a cycle/,
    ],
    ["a BigInt", { n: 1n }, /progress\.n is a BigInt/],
    ["NaN (stored as null otherwise)", Number.NaN, /progress is NaN/],
    ["more than 64 KiB", "x".repeat(70_000), /ctx.progress takes at most 65536 bytes of JSON/],
  ])("rejects %s with an InvalidInputError the handler can catch, and keeps the last good value", async (_what, value, message) => {
    const q = new Queue("q", { backend });
    let caught: unknown = null;
    const { id } = await q.add("a", {});
    const done = new Promise<void>((resolve) => {
      const w = new Worker({
        backend,
        queues: "q",
        logger: silentLogger,
        handlers: {
          a: async (_job, ctx) => {
            await ctx.progress({ step: 1 });
            try {
              await ctx.progress(value as never);
            } catch (error) {
              caught = error;
            }
            return null;
          },
        },
      });
      w.on("job:completed", () => void w.close().then(() => resolve()));
    });
    await done;
    expect(caught).toBeInstanceOf(InvalidInputError);
    expect((caught as Error).message).toMatch(message);
    expect((await q.getJob(id))!.progress).toEqual({ step: 1 });
  });
});
