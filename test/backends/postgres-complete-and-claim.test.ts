/**
 * The worker's complete-and-claim path on PostgreSQL (Backend.completeAndClaim): a worker with a
 * buffer (`prefetch`) sends its finished batch and its next claim as one statement, every job
 * still runs exactly once and ends completed with its history, and pause hands the jobs such a
 * claim brought back to the store. A claim riding with completions obeys flow control as the
 * worker's own claims do: a queue waiting for its next rate slot is left out of it.
 */
import { describe, expect, it, vi } from "vitest";
import { PostgresBackend } from "../../src/backend/postgres/index.js";
import { Queue, silentLogger, Worker } from "../../src/index.js";
import type { ClaimRequest } from "../../src/backend/contract.js";
import { postgresTestStores } from "../helpers/postgres-stores.js";
import { waitFor } from "../helpers/wait-for.js";

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

const stores = postgresTestStores();
const backend = () => stores.open();

/** A worker with a buffer (prefetch 40, 4 at a time) running jobs of 2 ms, closed after the test. */
function bufferedWorker(b: PostgresBackend, queues: string | string[]): Worker {
  const w = new Worker({ backend: b, queues, concurrency: 4, prefetch: 40, logger: silentLogger, maintenance: false, handlers: { job: () => sleep(2) } });
  stores.closeAfterTest({ close: () => w.close({ graceMs: 5_000 }) });
  return w;
}

describe("worker complete-and-claim (PostgreSQL)", () => {
  it("claims the next jobs together with completions while the buffer still holds work; each job runs once and ends completed", async () => {
    const b = await backend();
    const both = vi.spyOn(b, "completeAndClaim");
    const n = 600;
    await new Queue("q", { backend: b }).addBulk(Array.from({ length: n }, (_, i) => ({ name: "job", data: { i } })));
    const runs = new Map<number, number>();
    const w = new Worker({
      backend: b,
      queues: "q",
      concurrency: 4,
      prefetch: 40,
      logger: silentLogger,
      maintenance: false,
      // Jobs that take a little while, so the buffer still holds work when completions go out.
      handlers: {
        job: async (job) => {
          const i = (job.data as { i: number }).i;
          runs.set(i, (runs.get(i) ?? 0) + 1);
          await sleep(2);
        },
      },
    });
    stores.closeAfterTest({ close: () => w.close({ graceMs: 5_000 }) });
    let completed = 0;
    w.on("job:completed", () => void completed++);
    await waitFor(() => completed === n, { timeoutMs: 60_000 });
    expect(both).toHaveBeenCalled();
    // Claims that rode with completions brought jobs (not only empty answers).
    const brought = await Promise.all(both.mock.results.map((r) => r.value as ReturnType<PostgresBackend["completeAndClaim"]>));
    expect(brought.some((r) => r.claimed.length > 0)).toBe(true);
    expect([...runs.values()].every((count) => count === 1) && runs.size === n).toBe(true);
    const stats = await b.stats("q");
    expect(stats[0]!.counts).toMatchObject({ waiting: 0, active: 0, completed: n });
  });

  it("a claim riding with completions leaves out a queue waiting for its next rate slot (no claim of it until the slot opens)", async () => {
    const b = await backend();
    const busy = new Queue("busy", { backend: b });
    const limited = new Queue("limited", { backend: b });
    // One start a minute: after the first claim of it, the next slot opens long after this test ends.
    await limited.setLimits({ rate: { max: 1, durationMs: 60_000 } });
    await limited.addBulk(Array.from({ length: 20 }, () => ({ name: "job" })));
    await busy.addBulk(Array.from({ length: 600 }, () => ({ name: "job" })));
    // A cap that never binds: the busy queue's claims take the flow-controlled path too, which
    // visits the queues in the order asked (the limited one first), so every claim that names the
    // limited queue costs the store its lock and rate-window reads.
    await busy.setLimits({ maxRunning: 1_000 });
    const claims = vi.spyOn(b, "claim");
    const rides = vi.spyOn(b, "completeAndClaim");
    bufferedWorker(b, ["limited", "busy"]);
    await waitFor(async () => (await busy.stats()).counts.completed === 600, { timeoutMs: 60_000 });
    expect(rides.mock.calls.length).toBeGreaterThan(5);
    // Every request that named the limited queue, by the worker or riding (a ride the store splits
    // into two calls when a queue is limited counts once: the same request object).
    const named = new Set<ClaimRequest>();
    for (const [request] of claims.mock.calls) if (request.queues.includes("limited")) named.add(request);
    for (const [, request] of rides.mock.calls) if (request.queues.includes("limited")) named.add(request);
    // The claims that started its one job and met its limit (2 in test runs), and at most a few
    // sent before the worker heard of the limit; without the rule every ride names it (11 in a
    // run with the ride's request reverted to name every queue).
    expect(named.size).toBeLessThanOrEqual(4);
    expect((await limited.stats()).counts).toMatchObject({ active: 0, completed: 1, waiting: 19 });
  });

  it("pause awaits a claim riding with completions and hands its jobs back unstarted", async () => {
    const b = await backend();
    await new Queue("q", { backend: b }).addBulk(Array.from({ length: 600 }, (_, i) => ({ name: "job", data: { i } })));
    const pausing: { done: Promise<void> | null } = { done: null };
    const w = bufferedWorker(b, "q");
    // Pause from inside the ride: the moment the store answers the combined call.
    const original = b.completeAndClaim.bind(b);
    vi.spyOn(b, "completeAndClaim").mockImplementation(async (items, request) => {
      const result = await original(items, request);
      pausing.done ??= w.pause();
      return result;
    });
    await waitFor(() => pausing.done !== null, { timeoutMs: 20_000 });
    await pausing.done;
    await waitFor(async () => (await b.stats("q"))[0]!.counts.active === 0, { timeoutMs: 20_000 });
    const counts = (await b.stats("q"))[0]!.counts;
    expect(counts.active).toBe(0);
    expect(counts.completed + counts.waiting).toBe(600);
    expect(w.bufferedCount).toBe(0);
  });
});
