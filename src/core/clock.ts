/** A source of "now" in milliseconds since the epoch. Backends use it for leases and schedules. */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/**
 * The longest a Node.js timer waits, ms (about 24.8 days): a longer one fires after 1 ms (with a
 * TimeoutOverflowWarning), which would turn a long poll or heartbeat into a busy loop and a job's
 * long timeoutMs into an instant timeout.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** A pending call of a `TimerClock`, to cancel it. */
export interface ClockTimer {
  /** Stops the call if it has not happened yet; harmless afterwards. */
  cancel(): void;
}

/**
 * A clock that can also call back later. The worker runtime runs its lease deadlines, heartbeats,
 * job timeouts, polling and shutdown grace period on one, so a `FakeClock` drives them all in
 * tests. Only differences between its readings matter to the worker, not their epoch.
 */
export interface TimerClock extends Clock {
  /** Calls `fn` once, `ms` milliseconds from now by this clock. */
  after(ms: number, fn: () => void): ClockTimer;
}

/**
 * The worker's default clock: monotonic (`performance.now()`, so a wall-clock step never expires
 * or stretches a lease) with Node's timers.
 */
export const monotonicClock: TimerClock = {
  now: () => performance.now(),
  after(ms, fn) {
    // A wait past Node's longest timer (a job's timeoutMs may be years) runs as a chain of them.
    const dueAt = performance.now() + ms;
    let timer: ReturnType<typeof setTimeout>;
    const arm = (wait: number): void => {
      timer = wait > MAX_TIMER_MS ? setTimeout(() => arm(dueAt - performance.now()), MAX_TIMER_MS) : setTimeout(fn, wait);
    };
    arm(ms);
    return { cancel: () => clearTimeout(timer) };
  },
};

/** Resolves `ms` milliseconds from now by `clock`. */
export function sleepOn(clock: TimerClock, ms: number): Promise<void> {
  return new Promise((resolve) => clock.after(ms, resolve));
}

interface FakeTimer {
  dueAt: number;
  /** Creation order: timers due at the same time fire in the order they were set. */
  seq: number;
  fn: () => void;
}

/**
 * A clock that moves only when told to, for tests of leases, delays and retention. Its `after`
 * calls fire, in due order, when `advance` or `set` moves time past them; a call set while
 * others fire (a heartbeat re-arming itself) fires in the same move when it falls due within it.
 */
export class FakeClock implements TimerClock {
  private readonly timers = new Set<FakeTimer>();
  private seq = 0;

  constructor(private current = Date.UTC(2030, 0, 1)) {}
  now(): number {
    return this.current;
  }
  /** Moves time forward by `ms` milliseconds, firing the calls that fall due on the way. */
  advance(ms: number): void {
    if (ms < 0) throw new RangeError("a clock cannot go backwards; pass a positive number of milliseconds");
    this.moveTo(this.current + ms);
  }
  /** Sets the time; moving forward fires the calls that fall due on the way. */
  set(epochMs: number): void {
    if (epochMs <= this.current) {
      this.current = epochMs;
      return;
    }
    this.moveTo(epochMs);
  }
  after(ms: number, fn: () => void): ClockTimer {
    const timer: FakeTimer = { dueAt: this.current + Math.max(0, ms), seq: this.seq++, fn };
    this.timers.add(timer);
    return { cancel: () => this.timers.delete(timer) };
  }
  /** Calls set with `after` that have not fired nor been cancelled. */
  get pendingTimers(): number {
    return this.timers.size;
  }

  private moveTo(target: number): void {
    for (;;) {
      let next: FakeTimer | null = null;
      for (const t of this.timers) {
        if (t.dueAt <= target && (next === null || t.dueAt < next.dueAt || (t.dueAt === next.dueAt && t.seq < next.seq))) next = t;
      }
      if (next === null) break;
      this.timers.delete(next);
      this.current = Math.max(this.current, next.dueAt);
      next.fn();
    }
    this.current = target;
  }
}
