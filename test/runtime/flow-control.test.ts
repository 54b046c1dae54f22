/**
 * The worker's side of flow control: a rate-limited queue is not polled while limited (the
 * claim names the time the next slot opens and the worker sleeps until then), and RetryLater
 * with pause "queue" holds the whole queue in the store. Limits are checked from the store's
 * own records (start times), the query count from a wrapper around the backend.
 */
import { afterAll, afterEach, expect, it } from "vitest";
import { Queue, RetryLater, silentLogger, Worker, type Backend, type Handlers } from "../../src/index.js";
import { SqliteBackend } from "../../src/backend/sqlite/backend.js";
import { cleanupRuntimeBackends, RUNTIME_BACKENDS } from "../helpers/runtime-backends.js";
import { waitFor } from "../helpers/wait-for.js";

let store: Backend | null = null;
let worker: Worker | null = null;
afterEach(async () => {
  await worker?.close();
  await store?.close();
  worker = null;
  store = null;
});
afterAll(cleanupRuntimeBackends);

/** A worker on queue "q" running one job at a time, polling every 5 ms. */
function oneAtATime(backend: Backend, handlers: Handlers): Worker {
  return new Worker({ backend, queues: "q", concurrency: 1, pollIntervalMs: 5, logger: silentLogger, handlers });
}

/** The backend with every claim counted. */
function counted(backend: Backend): { backend: Backend; claims: () => number } {
  let claims = 0;
  const wrapped = Object.create(backend) as Backend;
  wrapped.claim = (request) => {
    claims++;
    return backend.claim(request);
  };
  return { backend: wrapped, claims: () => claims };
}

it("a rate-limited worker sleeps until the next slot instead of polling, and never starts more than the rate", async () => {
  store = new SqliteBackend({ path: ":memory:" });
  const queue = new Queue("q", { backend: store });
  await queue.setLimits({ rate: { max: 2, durationMs: 300 } });
  await queue.addBulk(Array.from({ length: 6 }, () => ({ name: "job" })));
  const probe = counted(store);
  // A poll every 5 ms would be ~180 claims over the ~0.9 s the rate needs for six jobs.
  worker = new Worker({ backend: probe.backend, queues: "q", concurrency: 10, pollIntervalMs: 5, logger: silentLogger, handlers: { job: () => null } });
  await waitFor(async () => (await queue.stats()).counts.completed === 6, { timeoutMs: 20_000 });
  const starts = (await queue.list({}, { limit: 10 })).map((j) => j.startedAt!).sort((a, b) => a - b);
  for (let i = 2; i < starts.length; i++) expect(starts[i]! - starts[i - 2]!).toBeGreaterThanOrEqual(300);
  // Three windows: a claim that starts jobs, one that meets the limit, a few coalesced wake-ups.
  expect(probe.claims()).toBeLessThanOrEqual(12);
});

it("RetryLater with pause 'queue' holds the queue in the store: no job starts on any worker before the hold ends", async () => {
  store = new SqliteBackend({ path: ":memory:" });
  const queue = new Queue("q", { backend: store });
  await queue.add("limited", {}, { jobId: "first", attempts: 2 });
  let calls = 0;
  worker = oneAtATime(store, {
    limited: () => {
      if (calls++ === 0) throw new RetryLater(400, { pause: "queue" });
      return null;
    },
    other: () => null,
  });
  await waitFor(async () => (await queue.getLimits())?.heldUntil != null);
  const heldUntil = (await queue.getLimits())!.heldUntil!;
  await queue.add("other", {}, { jobId: "second" });
  await waitFor(async () => (await queue.stats()).counts.completed === 2, { timeoutMs: 20_000 });
  const second = await queue.getJob("second");
  const first = await queue.getJob("first");
  expect(second!.startedAt!).toBeGreaterThanOrEqual(heldUntil);
  expect(first!.startedAt!).toBeGreaterThanOrEqual(heldUntil);
  expect(first!.history[0]).toMatchObject({ outcome: "failed", error: { name: "RetryLater" } });
});

it("RetryLater with pause 'key' holds the job's limiter key only: another key's jobs start meanwhile", async () => {
  // Long enough that y, added after the hold began, starts inside it on a loaded machine (1.5 s was not always).
  const HOLD_MS = 5_000;
  store = new SqliteBackend({ path: ":memory:" });
  const queue = new Queue("q", { backend: store });
  const limiter = (key: string) => ({ key, max: 100, durationMs: 1_000 });
  await queue.add("call", { first: true }, { jobId: "x-first", limiter: limiter("x"), attempts: 2 });
  let failed = false;
  let thrownAt = 0;
  worker = oneAtATime(store, {
    call: (job) => {
      if ((job.data as { first?: boolean }).first && !failed) {
        failed = true;
        // Before the hold is stored (store clock = this process's clock on SQLite).
        thrownAt = Date.now();
        throw new RetryLater(HOLD_MS, { pause: "key" });
      }
      return null;
    },
  });
  await waitFor(async () => (await queue.getJob("x-first"))!.history.length === 1);
  const failedAt = thrownAt;
  await queue.add("call", {}, { jobId: "x-second", limiter: limiter("x") });
  await queue.add("call", {}, { jobId: "y", limiter: limiter("y") });
  await waitFor(async () => (await queue.stats()).counts.completed === 3, { timeoutMs: 20_000 });
  const startOf = async (id: string) => (await queue.getJob(id))!.startedAt!;
  expect(await startOf("x-second")).toBeGreaterThanOrEqual(failedAt + HOLD_MS);
  expect(await startOf("x-first")).toBeGreaterThanOrEqual(failedAt + HOLD_MS);
  // y is not held: it starts while x waits (the hold is long enough for a loaded machine).
  expect(await startOf("y")).toBeLessThan(failedAt + HOLD_MS);
});

it.each(RUNTIME_BACKENDS)("on $name, a worker whose own jobs hold a group's slots claims again as they finish, not at its next poll", async (kind) => {
  store = await kind.open();
  const queue = new Queue("q", { backend: store });
  await queue.addBulk(Array.from({ length: 12 }, () => ({ name: "job", options: { group: { key: "tenant", concurrency: 2 } } })));
  let running = 0;
  let most = 0;
  // No poll within the test: every claim after the first must come from this worker's own completions.
  worker = new Worker({
    backend: store,
    queues: "q",
    concurrency: 10,
    pollIntervalMs: 60_000,
    logger: silentLogger,
    handlers: {
      job: async () => {
        most = Math.max(most, ++running);
        await new Promise((resolve) => setTimeout(resolve, 20));
        running--;
      },
    },
  });
  await waitFor(async () => (await queue.stats()).counts.completed === 12, { timeoutMs: 10_000, description: "all twelve jobs, two at a time" });
  expect(most).toBe(2);
});
