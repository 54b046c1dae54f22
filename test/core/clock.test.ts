import { describe, expect, it, vi } from "vitest";
import { FakeClock, MAX_TIMER_MS, monotonicClock, sleepOn } from "../../src/core/clock.js";

describe("FakeClock timers", () => {
  it("fires after() calls in due order as time advances, at their due time, and not before", () => {
    const clock = new FakeClock(1_000);
    const fired: Array<[string, number]> = [];
    clock.after(30, () => fired.push(["b", clock.now()]));
    clock.after(10, () => fired.push(["a", clock.now()]));
    clock.after(30, () => fired.push(["c", clock.now()]));
    clock.advance(9);
    expect(fired).toEqual([]);
    clock.advance(100);
    expect(fired).toEqual([
      ["a", 1_010],
      ["b", 1_030],
      ["c", 1_030],
    ]);
    expect(clock.now()).toBe(1_109);
    expect(clock.pendingTimers).toBe(0);
  });

  it("fires a call set by a firing one within the same advance (a re-arming heartbeat), and none cancelled", () => {
    const clock = new FakeClock(0);
    const beats: number[] = [];
    const beat = (): void => {
      beats.push(clock.now());
      clock.after(50, beat);
    };
    clock.after(50, beat);
    const cancelled = clock.after(120, () => beats.push(-1));
    cancelled.cancel();
    clock.advance(175);
    expect(beats).toEqual([50, 100, 150]);
    expect(clock.pendingTimers).toBe(1);
  });

  it("set() forward fires what falls due; backward fires nothing; sleepOn resolves on the clock", async () => {
    const clock = new FakeClock(0);
    let slept = false;
    const sleeping = sleepOn(clock, 500).then(() => (slept = true));
    clock.set(-100);
    await Promise.resolve();
    expect(slept).toBe(false);
    clock.set(600);
    await sleeping;
    expect(slept).toBe(true);
  });
});

describe("monotonicClock", () => {
  it("waits past Node's longest timer as a chain of timers, not 1 ms (a job's timeoutMs of years), and cancels any link of the chain", () => {
    // Fake timers as Node runs them: a delay over 2^31-1 ms fires after 1 ms.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "performance"] });
    try {
      let fired = 0;
      monotonicClock.after(MAX_TIMER_MS + 5_000, () => fired++);
      vi.advanceTimersByTime(1);
      expect(fired).toBe(0);
      vi.advanceTimersByTime(MAX_TIMER_MS);
      expect(fired).toBe(0);
      vi.advanceTimersByTime(5_000);
      expect(fired).toBe(1);
      const cancelled = monotonicClock.after(3 * MAX_TIMER_MS, () => fired++);
      vi.advanceTimersByTime(MAX_TIMER_MS + 10);
      cancelled.cancel();
      vi.advanceTimersByTime(3 * MAX_TIMER_MS);
      expect(fired).toBe(1);
      expect(vi.getTimerCount()).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });
});
