import { vi } from "vitest";

/** A day: far more than any two clocks of one host disagree, far less than anything overflows. */
export const DAY_MS = 86_400_000;

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
