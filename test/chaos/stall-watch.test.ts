/**
 * The runner's stall watch (chaos/stall-watch.ts): a tick that comes seconds late is recorded as
 * a machine stall with its span; ordinary ticks, and ticks late by timer jitter, are not.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { STALL_MS, STALL_TICK_MS, StallWatch } from "../../chaos/stall-watch.js";

afterEach(() => {
  vi.useRealTimers();
});

describe("StallWatch", () => {
  it("records a tick late by more than STALL_MS as a stall from when it was due to when it fired", () => {
    vi.useFakeTimers({ now: 1_000_000 });
    const seen: Array<{ from: number; to: number }> = [];
    const watch = new StallWatch((s) => seen.push(s));
    watch.start();
    vi.advanceTimersByTime(1_000);
    expect(watch.stalls).toEqual([]);
    // The process does not run for 5 s: the clock jumps, then the timer fires once.
    vi.setSystemTime(Date.now() + 5_000);
    vi.advanceTimersByTime(STALL_TICK_MS);
    expect(watch.stalls).toHaveLength(1);
    const [stall] = watch.stalls;
    expect(stall!.to - stall!.from).toBe(5_000);
    expect(seen).toEqual(watch.stalls);
    // Late by less than STALL_MS: jitter, not a stall.
    vi.setSystemTime(Date.now() + STALL_MS - 200);
    vi.advanceTimersByTime(STALL_TICK_MS);
    expect(watch.stalls).toHaveLength(1);
    watch.stop();
  });
});
