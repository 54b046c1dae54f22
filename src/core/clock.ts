/** A source of "now" in milliseconds since the epoch. Backends use it for leases and schedules. */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** A clock that moves only when told to, for tests of leases, delays and retention. */
export class FakeClock implements Clock {
  constructor(private current = Date.UTC(2030, 0, 1)) {}
  now(): number {
    return this.current;
  }
  /** Moves time forward by `ms` milliseconds. */
  advance(ms: number): void {
    if (ms < 0) throw new RangeError("a clock cannot go backwards; pass a positive number of milliseconds");
    this.current += ms;
  }
  set(epochMs: number): void {
    this.current = epochMs;
  }
}
