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

/** Options of `waitFor`. */
export interface WaitForOptions {
  /** Give up after this many milliseconds of real time. Default 5000. */
  timeoutMs?: number;
  /** Pause between two checks, in milliseconds of real time. Default 10. */
  intervalMs?: number;
  /** Says what was awaited, for the timeout error. Default "condition". */
  description?: string;
  /** The same as `description` (its earlier name). */
  message?: string;
}

/**
 * Polls `predicate` until it returns a truthy value and returns that value; a predicate that
 * throws is polled again, and its last error goes into the timeout error. For events that happen
 * "soon" in real time (a wake-up, a child process); anything driven by the store's clock should
 * use a FakeClock instead.
 */
export async function waitFor<T>(predicate: () => T | Promise<T>, options: WaitForOptions = {}): Promise<NonNullable<T>> {
  const timeoutMs = options.timeoutMs ?? 5_000;
  const intervalMs = options.intervalMs ?? 10;
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await predicate();
      if (value) return value;
      lastError = undefined;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() >= deadline) {
      const detail = lastError instanceof Error ? `; last error: ${lastError.message}` : "";
      throw new Error(`waitFor: ${options.description ?? options.message ?? "condition"} not met within ${timeoutMs} ms${detail}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
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
