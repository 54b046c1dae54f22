/**
 * The runner's own clock as evidence of a machine-wide stall: a timer that should fire every
 * TICK_MS, and fired more than STALL_MS late, means this process did not run for that long. On
 * the two-core machines the chaos runs on, that is the whole machine stalling (a paused VM, a
 * host that took its CPUs away): a CI run saw the runner's monitor, every worker's handlers and
 * Redis all stop for 5.4 s at once, after which every lease held across the gap had expired in
 * Redis' clock and was rescued, with no fault injected. The checker treats a stall like a store
 * outage (chaos/checker.ts): nothing could run, renew or rescue meanwhile.
 */
export const STALL_TICK_MS = 100;
/** Lateness of one tick that counts as a stall: well above timer jitter on a loaded machine. */
export const STALL_MS = 1_000;

export interface Stall {
  /** When the late tick was due to fire at the latest (the previous tick + TICK_MS). */
  from: number;
  /** When it fired. */
  to: number;
}

export class StallWatch {
  readonly stalls: Stall[] = [];
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly onStall: (stall: Stall) => void = () => {}) {}

  start(): void {
    if (this.timer) return;
    let last = Date.now();
    this.timer = setInterval(() => {
      const now = Date.now();
      if (now - last > STALL_TICK_MS + STALL_MS) {
        const stall = { from: last + STALL_TICK_MS, to: now };
        this.stalls.push(stall);
        this.onStall(stall);
      }
      last = now;
    }, STALL_TICK_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}
