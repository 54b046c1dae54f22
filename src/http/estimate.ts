/**
 * `estimatedDurationSeconds` of the 202 answer: how long until the job is likely finished.
 *
 *   estimate = delay + queue wait + run time
 *
 * - delay: until the job's own `runAt` / `delayMs`;
 * - queue wait: the current head-of-line wait of the queue, i.e. how long its oldest due job has
 *   been waiting (`oldestWaitingAgeMs` of the queue's stats). In a queue that keeps up this is
 *   near 0; in a backlog it is about what a newcomer will wait too, and it grows when workers
 *   are missing or the queue is paused;
 * - run time: the median of `finishedAt - startedAt` (the last attempt's run time) over the most
 *   recently created completed jobs of the same queue and name, at most 50 of them. The median
 *   ignores the odd outlier that a mean would not.
 *
 * With no completed job of that name to learn from, the estimate is `null` ("unknown"), not a
 * guess. Both inputs are cached per queue and name for `cacheMs` (default 1000 ms), so a burst of
 * enqueues costs one listing and one stats call per second, not one per request.
 */
import type { Backend } from "../backend/contract.js";

export interface EstimatorOptions {
  /** How long a computed run time and queue wait are reused, in ms. Default 1000. */
  cacheMs?: number;
  /** Completed jobs sampled per name. Default 50, at most 1000. */
  sampleSize?: number;
}

interface Cached<T> {
  at: number;
  value: Promise<T>;
}

export class DurationEstimator {
  private readonly cacheMs: number;
  private readonly sampleSize: number;
  private readonly runTimes = new Map<string, Cached<number | null>>();
  private readonly waits = new Map<string, Cached<number>>();

  constructor(
    private readonly backend: Backend,
    options: EstimatorOptions = {},
  ) {
    this.cacheMs = options.cacheMs ?? 1_000;
    this.sampleSize = Math.min(1_000, Math.max(1, options.sampleSize ?? 50));
  }

  /** Seconds (one decimal) until a job added now is likely finished, or null when unknown. */
  async estimateSeconds(queue: string, name: string, delayMs = 0): Promise<number | null> {
    // A store without job records (RabbitMQ) keeps no completed jobs to learn run times from.
    if (this.backend.capabilities.jobRecords === false) return null;
    const [runMs, waitMs] = await Promise.all([this.runTime(queue, name), this.queueWait(queue)]);
    if (runMs === null) return null;
    return Math.round((Math.max(0, delayMs) + waitMs + runMs) / 100) / 10;
  }

  /** Median run time in ms of recent completed jobs of `name` on `queue`, or null with none. */
  runTime(queue: string, name: string): Promise<number | null> {
    return this.cached(this.runTimes, `${queue}\u0000${name}`, async () => {
      const jobs = await this.backend.list({ queue, name, state: "completed" }, { limit: this.sampleSize });
      const durations = jobs
        .filter((j) => j.startedAt !== null && j.finishedAt !== null)
        .map((j) => Math.max(0, j.finishedAt! - j.startedAt!))
        .sort((a, b) => a - b);
      if (durations.length === 0) return null;
      const mid = durations.length >> 1;
      return durations.length % 2 === 1 ? durations[mid]! : (durations[mid - 1]! + durations[mid]!) / 2;
    });
  }

  /** The queue's head-of-line wait in ms (0 when nothing waits). */
  queueWait(queue: string): Promise<number> {
    return this.cached(this.waits, queue, async () => {
      const [stats] = await this.backend.stats(queue);
      return stats?.oldestWaitingAgeMs ?? 0;
    });
  }

  private cached<T>(map: Map<string, Cached<T>>, key: string, compute: () => Promise<T>): Promise<T> {
    const now = Date.now();
    const hit = map.get(key);
    if (hit && now - hit.at < this.cacheMs) return hit.value;
    // Concurrent requests share one computation; a failure is not cached.
    const value = compute();
    map.set(key, { at: now, value });
    value.catch(() => {
      if (map.get(key)?.value === value) map.delete(key);
    });
    // Bound memory when clients invent queue and job names.
    if (map.size > 10_000) {
      for (const [k, v] of map) if (now - v.at >= this.cacheMs) map.delete(k);
    }
    return value;
  }
}
