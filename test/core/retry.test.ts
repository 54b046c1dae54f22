/** The pure retry policy the runtime feeds into `Backend.fail` (moved out of the conformance suite: no store involved). */
import { describe, expect, it } from "vitest";
import type { BackoffSpec } from "../../src/core/job.js";
import { backoffDelay, decideRetry } from "../../src/core/retry.js";

describe("retry policy (pure)", () => {
  const exp: BackoffSpec = { type: "exponential", delayMs: 1_000, maxDelayMs: 60_000 };

  it("backoffDelay (exponential, full jitter): integer in [0, min(max, base * 2^(attempt-1))) over many draws", () => {
    for (let attempt = 1; attempt <= 12; attempt++) {
      const cap = Math.min(exp.maxDelayMs, exp.delayMs * 2 ** (attempt - 1));
      let highest = 0;
      for (let i = 0; i < 2_000; i++) {
        const d = backoffDelay(exp, attempt);
        expect(Number.isInteger(d)).toBe(true);
        expect(d).toBeGreaterThanOrEqual(0);
        expect(d).toBeLessThan(cap);
        highest = Math.max(highest, d);
      }
      // Full jitter spreads over the whole window (the chance of missing its top tenth is 0.9^2000).
      expect(highest).toBeGreaterThan(cap * 0.9);
    }
  });

  it("backoffDelay edges: random 0 gives 0, random near 1 gives just under the cap, huge attempts stay at the cap", () => {
    expect(backoffDelay(exp, 1, () => 0)).toBe(0);
    expect(backoffDelay(exp, 3, () => 0.999_999)).toBe(3_999);
    expect(backoffDelay(exp, 10, () => 0.999_999)).toBe(59_999);
    expect(backoffDelay(exp, 5_000, () => 0.5)).toBe(30_000);
    expect(backoffDelay(exp, 0, () => 0.5)).toBe(500);
  });

  it("backoffDelay (fixed): always the fixed delay", () => {
    for (const attempt of [1, 2, 7, 100]) expect(backoffDelay({ type: "fixed", delayMs: 750 }, attempt)).toBe(750);
  });

  it("decideRetry: dead when unrecoverable or attempts are used up; otherwise a bounded retry", () => {
    const base = { backoff: exp, error: new Error("x") };
    expect(decideRetry({ ...base, attempt: 1, maxAttempts: 5, unrecoverable: true })).toEqual({ kind: "dead" });
    expect(decideRetry({ ...base, attempt: 5, maxAttempts: 5, unrecoverable: false })).toEqual({ kind: "dead" });
    expect(decideRetry({ ...base, attempt: 6, maxAttempts: 5, unrecoverable: false })).toEqual({ kind: "dead" });
    expect(decideRetry({ ...base, attempt: 1, maxAttempts: 1, unrecoverable: false })).toEqual({ kind: "dead" });
    for (let i = 0; i < 1_000; i++) {
      const attempt = 1 + Math.floor(Math.random() * 8);
      const d = decideRetry({ ...base, attempt, maxAttempts: 9, unrecoverable: false });
      if (d.kind !== "retry") throw new Error(`expected a retry at attempt ${attempt}, got dead`);
      expect(d.delayMs).toBeGreaterThanOrEqual(0);
      expect(d.delayMs).toBeLessThanOrEqual(Math.min(60_000, 1_000 * 2 ** (attempt - 1)));
    }
  });

  it("decideRetry: a requested delay wins over the backoff, a backoff function is used, bad delays become 0", () => {
    const base = { attempt: 1, maxAttempts: 3, unrecoverable: false, backoff: exp, error: new Error("x") };
    expect(decideRetry({ ...base, requestedDelayMs: 123_456 })).toEqual({ kind: "retry", delayMs: 123_456 });
    expect(decideRetry({ ...base, backoffFn: (attempt) => attempt * 1_000 + 0.7 })).toEqual({ kind: "retry", delayMs: 1_000 });
    expect(decideRetry({ ...base, backoffFn: () => -5 })).toEqual({ kind: "retry", delayMs: 0 });
    expect(decideRetry({ ...base, backoffFn: () => Number.NaN })).toEqual({ kind: "retry", delayMs: 0 });
    expect(decideRetry({ ...base, backoff: { type: "fixed", delayMs: 42 } })).toEqual({ kind: "retry", delayMs: 42 });
  });
});
