import { expect, vi } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { buildJobSpec } from "../../src/core/spec.js";

/** A day: far more than any two clocks of one host disagree, far less than anything overflows. */
export const DAY_MS = 86_400_000;
/** How far the backend's times may be from the server's: a loaded machine, not a timing test. */
const MARGIN_MS = 60_000;

/**
 * Shifts this process's `Date.now()` by `offsetMs` (the store's server keeps the machine's time),
 * so a test can tell a backend that reads its store's clock from one that reads the process's:
 * the first stays near the server's time, the second lands a day off. `restore()` undoes it.
 */
export function skewProcessClock(offsetMs: number = DAY_MS): { restore(): void } {
  const real = Date.now.bind(Date);
  const spy = vi.spyOn(Date, "now").mockImplementation(() => real() + offsetMs);
  return { restore: () => spy.mockRestore() };
}

/**
 * With this process's clock a day ahead, the backend's `now()`, a job's `createdAt` and its claim's
 * `startedAt` and lease must all be the server's time (`serverNow`, read by the test itself).
 * The backend must have no injected clock and queue "q" to itself.
 */
export async function expectServerClock(b: Backend, serverNow: () => Promise<number>): Promise<void> {
  const skew = skewProcessClock(DAY_MS);
  try {
    const now = await b.now();
    expect(Math.abs(now - (await serverNow()))).toBeLessThan(MARGIN_MS);
    await b.enqueue([buildJobSpec({ queue: "q", name: "job", data: null })]);
    const [claimed] = await b.claim({ queues: ["q"], names: ["job"], worker: { id: "w", host: "h", pid: 1 }, limit: 1, leaseMs: 12_345 });
    expect(claimed!.leaseExpiresAt - claimed!.job.startedAt!).toBe(12_345);
    expect(claimed!.job.startedAt!).toBeGreaterThanOrEqual(now);
    expect(Math.abs(claimed!.job.startedAt! - (await serverNow()))).toBeLessThan(MARGIN_MS);
    expect(Math.abs(claimed!.job.createdAt - (await serverNow()))).toBeLessThan(MARGIN_MS);
  } finally {
    skew.restore();
  }
}
