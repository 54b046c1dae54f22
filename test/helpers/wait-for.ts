/**
 * The tests use the same `waitFor` users get from `conveyor-jobs/testing` (one copy), with a
 * longer default timeout: {@link TEST_WAIT_TIMEOUT_MS} instead of its 5 s. CI runs two test files
 * at once on a loaded 2-core machine, where a claim on PostgreSQL, a worker's poll and the reply
 * took more than 5 s: two worker tests (a cancelled job's abort, a stale worker's refused
 * completion) failed that way at a load average of 30 with nothing wrong in the code. A passing
 * wait ends as soon as its condition holds, so the longer default costs nothing when green; a
 * test that needs another bound still passes `timeoutMs`.
 */
import { waitFor as pollUntil, type WaitForOptions } from "../../src/testing/index.js";

export type { WaitForOptions };

/** How long a test's `waitFor` polls when it names no `timeoutMs`, ms (below vitest's 30 s test timeout). */
export const TEST_WAIT_TIMEOUT_MS = 20_000;

/** `waitFor` of `conveyor-jobs/testing`, with {@link TEST_WAIT_TIMEOUT_MS} as the default timeout. */
export function waitFor<T>(predicate: () => T | Promise<T>, options: WaitForOptions = {}): Promise<NonNullable<T>> {
  return pollUntil(predicate, { ...options, timeoutMs: options.timeoutMs ?? TEST_WAIT_TIMEOUT_MS });
}
