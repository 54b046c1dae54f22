import { RetryLater, UnrecoverableError } from "./errors.js";
import { MAX_DELAY, toError } from "./checks.js";
import type { BackoffSpec } from "./job.js";

/** The default backoff: full jitter over 1 s doubling up to 60 s. */
export const DEFAULT_BACKOFF: BackoffSpec = Object.freeze({ type: "exponential", delayMs: 1_000, maxDelayMs: 60_000 });

/** A backoff computed in code; lives with the handler because functions cannot be stored. */
export type BackoffFunction = (attempt: number, error: Error) => number;

/**
 * Delay before the next attempt after attempt number `attempt` (1-based) failed.
 *
 * Exponential uses full jitter, random(0, min(max, base * 2^retryIndex)) with retryIndex = attempt-1,
 * so 1,000 workers failing together spread their retries over the whole window instead of
 * returning in lock-step.
 */
export function backoffDelay(spec: BackoffSpec, attempt: number, random: () => number = Math.random): number {
  if (spec.type === "fixed") return spec.delayMs;
  const retryIndex = Math.max(0, attempt - 1);
  // 2^retryIndex overflows to Infinity past ~1000; min() with the cap keeps it finite.
  const cap = Math.min(spec.maxDelayMs, spec.delayMs * 2 ** retryIndex);
  return Math.floor(random() * cap);
}

/**
 * What a failed attempt leads to. `backoffError`: the handler's backoff function threw, so the
 * retry comes at once; the runtime reports it (a bug in the function, not in the job).
 */
export type RetryDecision = { kind: "retry"; delayMs: number; backoffError?: Error } | { kind: "dead" };

/**
 * Pure decision: retry after a delay, or dead. `unrecoverable` errors and exhausted attempts are dead.
 */
export function decideRetry(input: {
  attempt: number;
  maxAttempts: number;
  unrecoverable: boolean;
  backoff: BackoffSpec;
  backoffFn?: BackoffFunction | undefined;
  error: Error;
  /** A delay the handler asked for (RetryLater), which wins over the backoff. */
  requestedDelayMs?: number | undefined;
  random?: () => number;
}): RetryDecision {
  if (input.unrecoverable || input.attempt >= input.maxAttempts) return { kind: "dead" };
  let delayMs: number;
  let backoffError: Error | undefined;
  if (input.requestedDelayMs !== undefined) delayMs = input.requestedDelayMs;
  else if (input.backoffFn) {
    // A throw here must not escape: the attempt would never be settled, and its job would stay
    // active under a lease its worker renews for ever. It is treated as a delay it cannot use.
    try {
      delayMs = input.backoffFn(input.attempt, input.error);
    } catch (error) {
      backoffError = toError(error);
      delayMs = 0;
    }
  } else delayMs = backoffDelay(input.backoff, input.attempt, input.random);
  if (!Number.isFinite(delayMs) || delayMs < 0) delayMs = 0;
  // The stores take delays up to MAX_DELAY (ten years) and refuse longer ones.
  return { kind: "retry", delayMs: Math.floor(Math.min(delayMs, MAX_DELAY)), ...(backoffError && { backoffError }) };
}

/**
 * The decision after `error` failed attempt `attempt`, with the error classes read once for every
 * runtime (the Worker, the Kafka transport): `UnrecoverableError` is dead at once, `RetryLater`
 * sets the delay, anything else follows the backoff.
 */
export function decideRetryAfter(
  error: Error,
  input: { attempt: number; maxAttempts: number; backoff: BackoffSpec; backoffFn?: BackoffFunction | undefined; random?: () => number },
): RetryDecision & { unrecoverable: boolean } {
  const unrecoverable = error instanceof UnrecoverableError;
  const requestedDelayMs = error instanceof RetryLater ? error.delayMs : undefined;
  return { ...decideRetry({ ...input, unrecoverable, error, requestedDelayMs }), unrecoverable };
}
