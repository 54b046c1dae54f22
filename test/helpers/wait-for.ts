/** Options of `waitFor`. */
export interface WaitForOptions {
  /** Give up after this many milliseconds of real time. Default 5000. */
  timeoutMs?: number;
  /** Pause between two checks, in milliseconds of real time. Default 10. */
  intervalMs?: number;
  /** Says what was awaited, for the timeout error. Default "condition". */
  description?: string;
}

/**
 * Polls `predicate` until it returns a truthy value and returns that value. For events that happen
 * "soon" in real time (a wake-up listener, a child process); anything driven by the store's clock
 * should use a FakeClock instead.
 */
export async function waitFor<T>(
  predicate: () => T | Promise<T>,
  options: WaitForOptions = {},
): Promise<NonNullable<T>> {
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
      throw new Error(`waitFor: ${options.description ?? "condition"} not met within ${timeoutMs} ms${detail}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
