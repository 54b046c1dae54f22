/**
 * Helpers for your own tests: an in-memory store, a controllable clock, and `drain` to run a
 * worker until nothing is left to do.
 *
 * ```ts
 * const backend = createTestBackend();
 * await new Queue("email", { backend }).add("welcome", { userId: "u_1" });
 * await drain(backend, { welcome: async (job) => sent.push(job.data) }, { queues: "email" });
 * ```
 */
import type { Backend } from "../backend/contract.js";
import { SqliteBackend } from "../backend/sqlite/backend.js";
import type { Clock } from "../core/clock.js";
import { silentLogger } from "../core/logger.js";
import { Worker, type Handlers } from "../runtime/worker.js";

export { FakeClock } from "../core/clock.js";

/** A fresh SQLite `:memory:` store: fast, isolated, gone when closed. */
export function createTestBackend(options: { clock?: Clock } = {}): SqliteBackend {
  return new SqliteBackend({ path: ":memory:", ...(options.clock ? { clock: options.clock } : {}) });
}

/** Polls `predicate` every `intervalMs` (default 10) until it holds or `timeoutMs` (default 5000) passes. */
export async function waitFor(
  predicate: () => boolean | Promise<boolean>,
  options: { timeoutMs?: number; intervalMs?: number; message?: string } = {},
): Promise<void> {
  const deadline = Date.now() + (options.timeoutMs ?? 5_000);
  for (;;) {
    if (await predicate()) return;
    if (Date.now() > deadline) throw new Error(`waitFor timed out${options.message ? `: ${options.message}` : ""}`);
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 10));
  }
}

/**
 * Runs `handlers` on `queues` until no job is waiting or active in them (scheduled retries still
 * in the future are left alone), then closes the worker. Returns what the worker did.
 */
export async function drain(
  backend: Backend,
  handlers: Handlers,
  options: { queues: string | string[]; concurrency?: number; timeoutMs?: number },
): Promise<{ completed: number; failed: number; dead: number }> {
  const queues = typeof options.queues === "string" ? [options.queues] : options.queues;
  const counts = { completed: 0, failed: 0, dead: 0 };
  const worker = new Worker({
    backend,
    queues,
    handlers,
    concurrency: options.concurrency ?? 10,
    pollIntervalMs: 20,
    maintenance: false,
    logger: silentLogger,
  });
  worker.on("job:completed", () => counts.completed++);
  worker.on("job:failed", () => counts.failed++);
  worker.on("job:dead", () => counts.dead++);
  try {
    await waitFor(
      async () => {
        const stats = await backend.stats();
        return worker.activeCount === 0 && stats.filter((s) => queues.includes(s.queue)).every((s) => s.counts.waiting === 0 && s.counts.active === 0);
      },
      { timeoutMs: options.timeoutMs ?? 10_000, message: "jobs still waiting or active" },
    );
  } finally {
    await worker.close({ force: true });
  }
  return counts;
}

