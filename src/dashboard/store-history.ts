/**
 * Per-minute samples for the dashboard's charts read from the store (`Backend.finishedWindow`),
 * so a `conveyor serve` shows the jobs every worker of the fleet finished, in any process, and a
 * restart loses nothing.
 *
 * Per queue and minute: the jobs that completed and died in it (exact counts, from an index on
 * finish time), and their wait times (due to start) and run times (start to finish) as
 * percentiles over a bounded sample: at most `samplesPerMinute` jobs per state, the earliest
 * finished of the minute. The cost is bounded by caching: a minute is read once it is over (plus
 * a few seconds for late commits) and kept; only the current minute is read again, at most every
 * `refreshMs`. So a page that is open costs one small range read per queue per `refreshMs`,
 * however busy the queue, and the first view of a queue reads each minute of the window once.
 *
 * Counted from stored jobs: jobs removed as they finish (`removeOnComplete: true`) or pruned are
 * not seen, and "failed" means died (a retried attempt is not a finished job).
 */
import type { Backend } from "../backend/contract.js";
import { percentilesOf, type MinuteSample } from "./history.js";

const MINUTE_MS = 60_000;
/** How long after a minute ends it is still read again, for jobs whose commit was late. */
const SETTLE_MS = 5_000;

export interface StoreHistoryOptions {
  /** Jobs sampled per queue, state and minute for the wait and run percentiles. Default 200, at most 1000. */
  samplesPerMinute?: number;
  /** How long the current minute's figures are reused before the store is read again, ms. Default 5 000. */
  refreshMs?: number;
  /** Minutes kept per queue (the longest window a chart asks for). Default 180. */
  minutes?: number;
  /** Queues kept in the cache at most; the least recently viewed is dropped first. Default 200. */
  maxQueues?: number;
}

interface CachedMinute {
  sample: MinuteSample;
  /** When it was read (store clock). */
  readAt: number;
}

export class StoreHistory {
  private readonly cache = new Map<string, Map<number, CachedMinute>>();
  private readonly inFlight = new Map<string, Promise<CachedMinute>>();
  private readonly samples: number;
  private readonly refreshMs: number;
  private readonly minutes: number;
  private readonly maxQueues: number;

  constructor(
    private readonly backend: Pick<Backend, "finishedWindow" | "now">,
    options: StoreHistoryOptions = {},
  ) {
    this.samples = options.samplesPerMinute ?? 200;
    this.refreshMs = options.refreshMs ?? 5_000;
    this.minutes = options.minutes ?? 180;
    this.maxQueues = options.maxQueues ?? 200;
  }

  /**
   * The last `minutes` minutes of `queue`, oldest first, one entry per minute including empty
   * ones, ending with the current (partial) minute: the shape `MetricsHistory.series` returns.
   */
  async series(queue: string, minutes = this.minutes): Promise<MinuteSample[]> {
    const now = await this.backend.now();
    const current = Math.floor(now / MINUTE_MS) * MINUTE_MS;
    const count = Math.max(1, Math.min(minutes, this.minutes));
    const cached = this.queueCache(queue, current);
    const starts = Array.from({ length: count }, (_, i) => current - (count - 1 - i) * MINUTE_MS);
    const read = await Promise.all(
      starts.map((t) => {
        const hit = cached.get(t);
        // Over and settled when read: final. Otherwise fresh enough for `refreshMs`.
        if (hit && (hit.readAt >= t + MINUTE_MS + SETTLE_MS || now - hit.readAt < this.refreshMs)) return Promise.resolve(hit);
        return this.readMinute(queue, t, now, cached);
      }),
    );
    return read.map((m) => m.sample);
  }

  private queueCache(queue: string, current: number): Map<number, CachedMinute> {
    let cached = this.cache.get(queue);
    if (cached) {
      // Most recently viewed last, so the first key is the one to drop.
      this.cache.delete(queue);
    } else {
      cached = new Map();
      while (this.cache.size >= this.maxQueues) this.cache.delete(this.cache.keys().next().value!);
    }
    this.cache.set(queue, cached);
    const oldest = current - (this.minutes - 1) * MINUTE_MS;
    for (const t of cached.keys()) if (t < oldest) cached.delete(t);
    return cached;
  }

  /** Reads one minute (once at a time per queue and minute, however many pages ask). */
  private readMinute(queue: string, t: number, now: number, cached: Map<number, CachedMinute>): Promise<CachedMinute> {
    const key = `${t}\n${queue}`;
    let pending = this.inFlight.get(key);
    if (!pending) {
      pending = (async () => {
        try {
          const w = await this.backend.finishedWindow(queue, t, t + MINUTE_MS, this.samples);
          const wait: number[] = [];
          const run: number[] = [];
          for (const s of w.samples) {
            if (s.startedAt === null) continue;
            wait.push(Math.max(0, s.startedAt - s.runAt));
            run.push(Math.max(0, s.finishedAt - s.startedAt));
          }
          const minute: CachedMinute = {
            sample: { t, completed: w.completed, failed: w.dead, dead: w.dead, waitMs: percentilesOf(wait), runMs: percentilesOf(run) },
            readAt: now,
          };
          cached.set(t, minute);
          return minute;
        } finally {
          this.inFlight.delete(key);
        }
      })();
      this.inFlight.set(key, pending);
    }
    return pending;
  }
}
