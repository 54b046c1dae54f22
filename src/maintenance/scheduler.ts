/**
 * The scheduler: fires due cron ticks. It runs in every worker (and `conveyor serve`) by default,
 * and may run in any number of processes at once: there is no leader. Each firing is one
 * compare-and-set in the store (`Backend.scheduleFire`), so of several schedulers that see the
 * same tick due exactly one enqueues it; the others find the cursor moved and write nothing.
 *
 * It sleeps until the earliest next tick of the schedules it knows (on the store's clock), and
 * re-reads the schedule list at least every `refreshMs` to learn of schedules other processes
 * added or changed; a change made through a `Queue` of this process wakes it at once.
 */
import type { Backend, EnqueueResult } from "../backend/contract.js";
import { checkOptionKeys, MAX_TIMER_MS, shown, timerMs } from "../core/checks.js";
import { InvalidInputError } from "../core/errors.js";
import { checkName } from "../core/spec.js";
import { dueTicks, firingFor, nextRunAt, onSchedulesChanged, type StoredSchedule } from "../core/schedule.js";

/** What the scheduler needs of a backend: its clock, the schedules, and the firing step. */
export type ScheduleStore = Pick<Backend, "now" | "scheduleList" | "scheduleFire">;

export interface SchedulerOptions {
  /**
   * Re-read the schedules at least this often, in ms, to see ones added, changed or removed by
   * other processes (changes through a Queue of this process are seen at once). Default 10 000.
   */
  refreshMs?: number;
  /** Only fire the schedules of these queues. Default: every queue's. */
  queues?: readonly string[];
  /** After a store error, wait this long before trying again, in ms (doubling up to refreshMs). Default 1 000. */
  retryMs?: number;
}

const SCHEDULER_OPTION_KEYS: Record<keyof SchedulerOptions, true> = { refreshMs: true, queues: true, retryMs: true };

export interface SchedulerCallbacks {
  /** A firing this process won: the tick, and the jobs it enqueued (none when the policy dropped the ticks). */
  onFired?: (fired: FiredTick) => void;
  onError?: (error: unknown, during: string) => void;
}

export interface FiredTick {
  queue: string;
  id: string;
  tickAt: number;
  jobs: EnqueueResult[];
}

export const DEFAULT_SCHEDULER_REFRESH_MS = 10_000;
const DEFAULT_RETRY_MS = 1_000;
/** After a failed firing, try that schedule again this much later, in ms. */
const FIRE_RETRY_MS = 1_000;

/** The result of one pass: what this process fired, and when the next tick falls (store clock). */
export interface SchedulerPass {
  fired: FiredTick[];
  /** The earliest next run of the schedules seen, ms since the epoch; null when none has one. */
  nextAt: number | null;
  /** Store time the pass ran at. */
  now: number;
}

/**
 * One pass over the schedules: fires every due one (each in its own atomic step) and returns the
 * earliest next run. Exported for tools and tests that drive time themselves.
 */
export async function fireDueSchedules(
  backend: ScheduleStore,
  options: { queues?: readonly string[] } = {},
  callbacks: SchedulerCallbacks = {},
): Promise<SchedulerPass> {
  const now = await backend.now();
  const all = await backend.scheduleList();
  const wanted = options.queues === undefined ? all : all.filter((s) => options.queues!.includes(s.queue));
  const fired: FiredTick[] = [];
  let nextAt: number | null = null;
  const consider = (at: number | null) => {
    if (at !== null && (nextAt === null || at < nextAt)) nextAt = at;
  };
  for (const schedule of wanted) {
    let current: StoredSchedule = schedule;
    const due = dueTicks(current, now);
    if (due !== null) {
      try {
        const result = await backend.scheduleFire(firingFor(current, due));
        if (result.fired) {
          const tick: FiredTick = { queue: current.queue, id: current.id, tickAt: due.tickAt, jobs: result.jobs };
          fired.push(tick);
          callbacks.onFired?.(tick);
          current = { ...current, lastTickAt: due.tickAt };
        } else {
          // Another process fired it, or it changed meanwhile: look again soon with fresh state.
          consider(now);
          continue;
        }
      } catch (error) {
        callbacks.onError?.(error, `firing schedule ${current.id} of queue ${current.queue}`);
        consider(now + FIRE_RETRY_MS);
        continue;
      }
    }
    consider(nextRunAt(current, now));
  }
  return { fired, nextAt, now };
}

/** The loop that runs `fireDueSchedules` at each next tick. */
export class Scheduler {
  private readonly refreshMs: number;
  private readonly retryMs: number;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = true;
  private failures = 0;
  private unlisten: (() => void) | null = null;
  private rerun = false;

  constructor(
    private readonly backend: ScheduleStore,
    private readonly options: SchedulerOptions = {},
    private readonly callbacks: SchedulerCallbacks = {},
  ) {
    checkOptionKeys("scheduler option", options, SCHEDULER_OPTION_KEYS);
    this.refreshMs = timerMs("scheduler option refreshMs", options.refreshMs ?? DEFAULT_SCHEDULER_REFRESH_MS);
    this.retryMs = timerMs("scheduler option retryMs", options.retryMs ?? DEFAULT_RETRY_MS);
    if (options.queues !== undefined) {
      if (!Array.isArray(options.queues)) throw new InvalidInputError(`scheduler option queues must be an array of queue names; got ${shown(options.queues)}`);
      for (const queue of options.queues) checkName("queue", queue);
    }
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.unlisten = onSchedulesChanged(this.backend, () => this.wake());
    this.wake();
  }

  /** Stops the loop and waits for a pass in progress (its firing is one store step: it completes or not). */
  async stop(): Promise<void> {
    this.stopped = true;
    this.unlisten?.();
    this.unlisten = null;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }

  /** Runs a pass now (or right after the one in progress). */
  wake(): void {
    if (this.stopped) return;
    if (this.running !== null) {
      this.rerun = true;
      return;
    }
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.running = this.pass().finally(() => {
      this.running = null;
      if (this.rerun) {
        this.rerun = false;
        this.wake();
      }
    });
  }

  private async pass(): Promise<void> {
    let delay: number;
    try {
      const { nextAt, now } = await fireDueSchedules(this.backend, this.options, this.callbacks);
      this.failures = 0;
      delay = nextAt === null ? this.refreshMs : Math.min(this.refreshMs, Math.max(0, nextAt - now));
    } catch (error) {
      this.callbacks.onError?.(error, "reading schedules");
      delay = Math.min(this.refreshMs, this.retryMs * 2 ** Math.min(this.failures, 20));
      this.failures++;
    }
    if (this.stopped || this.rerun) return;
    this.timer = setTimeout(
      () => {
        this.timer = null;
        this.wake();
      },
      Math.min(delay, MAX_TIMER_MS),
    );
    // The scheduler alone never keeps a process alive.
    this.timer.unref();
  }
}
