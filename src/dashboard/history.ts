/**
 * Per-minute samples for the dashboard's charts: jobs completed and failed, and wait and run time
 * percentiles, per queue.
 *
 * The stores keep jobs, not time series, so this history is kept in memory by the process that
 * serves the dashboard, from the events of the workers attached to it (`conveyor serve
 * --handlers` attaches its in-process worker). It is a bounded ring: `minutes` buckets per queue
 * (default 180, i.e. three hours), each holding counts and at most `samplesPerMinute` wait and
 * run times (a uniform reservoir sample, so percentiles stay honest under load). A restart starts
 * empty, and jobs run by workers in other processes are not counted: for fleet-wide history,
 * scrape metrics into Prometheus.
 */
import type { WorkerEvents } from "../core/events.js";

const MINUTE_MS = 60_000;

export interface HistoryOptions {
  /** Minutes kept per queue. Default 180. */
  minutes?: number;
  /** Wait and run times kept per queue and minute for percentiles. Default 256. */
  samplesPerMinute?: number;
  /** Queues tracked at most; events of further queues are ignored. Default 200. */
  maxQueues?: number;
}

/** One minute of one queue, as the dashboard receives it. */
export interface MinuteSample {
  /** Start of the minute, ms since epoch. */
  t: number;
  completed: number;
  /** Failed attempts (retried or dead). */
  failed: number;
  dead: number;
  /** Time from due to start, ms: 50th, 95th and 99th percentile, or null without samples. */
  waitMs: Percentiles | null;
  /** Handler run time, ms. */
  runMs: Percentiles | null;
}

export interface Percentiles {
  p50: number;
  p95: number;
  p99: number;
}

class Bucket {
  completed = 0;
  failed = 0;
  dead = 0;
  readonly wait: Reservoir;
  readonly run: Reservoir;
  constructor(
    readonly t: number,
    size: number,
  ) {
    this.wait = new Reservoir(size);
    this.run = new Reservoir(size);
  }
}

/** Algorithm R: every value seen has the same chance of being kept. */
class Reservoir {
  private readonly values: number[] = [];
  private seen = 0;
  constructor(private readonly size: number) {}
  add(value: number): void {
    this.seen++;
    if (this.values.length < this.size) this.values.push(value);
    else {
      const i = Math.floor(Math.random() * this.seen);
      if (i < this.size) this.values[i] = value;
    }
  }
  percentiles(): Percentiles | null {
    return percentilesOf(this.values);
  }
}

/** The nearest-rank 50th, 95th and 99th percentiles of `values`, or null when there are none. */
export function percentilesOf(values: readonly number[]): Percentiles | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
  return { p50: at(0.5), p95: at(0.95), p99: at(0.99) };
}

/** Anything with a worker's typed `on` (a `Worker`). */
export interface EventSourceLike {
  on<K extends keyof WorkerEvents>(event: K, listener: (payload: WorkerEvents[K]) => void): unknown;
}

export class MetricsHistory {
  private readonly queues = new Map<string, Bucket[]>();
  private readonly minutes: number;
  private readonly samples: number;
  private readonly maxQueues: number;
  private attachedCount = 0;

  constructor(
    options: HistoryOptions = {},
    private readonly clock: () => number = Date.now,
  ) {
    this.minutes = options.minutes ?? 180;
    this.samples = options.samplesPerMinute ?? 256;
    this.maxQueues = options.maxQueues ?? 200;
  }

  /** Workers whose events feed this history. */
  get attached(): number {
    return this.attachedCount;
  }

  /** Records the jobs `worker` runs from now on. */
  attach(worker: EventSourceLike): void {
    this.attachedCount++;
    worker.on("job:started", ({ job, waitMs }) => this.bucket(job.queue)?.wait.add(waitMs));
    worker.on("job:completed", ({ job, durationMs }) => {
      const b = this.bucket(job.queue);
      if (!b) return;
      b.completed++;
      b.run.add(durationMs);
    });
    worker.on("job:failed", ({ job, durationMs, retryDelayMs }) => {
      const b = this.bucket(job.queue);
      if (!b) return;
      b.failed++;
      if (retryDelayMs === null) b.dead++;
      b.run.add(durationMs);
    });
  }

  /**
   * The last `minutes` minutes of `queue` (default: the whole ring), oldest first, one entry per
   * minute including empty ones, ending with the current (partial) minute.
   */
  series(queue: string, minutes = this.minutes): MinuteSample[] {
    const now = Math.floor(this.clock() / MINUTE_MS) * MINUTE_MS;
    const count = Math.max(1, Math.min(minutes, this.minutes));
    const buckets = this.queues.get(queue) ?? [];
    const byTime = new Map(buckets.map((b) => [b.t, b]));
    const out: MinuteSample[] = [];
    for (let t = now - (count - 1) * MINUTE_MS; t <= now; t += MINUTE_MS) {
      const b = byTime.get(t);
      out.push({
        t,
        completed: b?.completed ?? 0,
        failed: b?.failed ?? 0,
        dead: b?.dead ?? 0,
        waitMs: b?.wait.percentiles() ?? null,
        runMs: b?.run.percentiles() ?? null,
      });
    }
    return out;
  }

  private bucket(queue: string): Bucket | null {
    let ring = this.queues.get(queue);
    if (!ring) {
      if (this.queues.size >= this.maxQueues) return null;
      ring = [];
      this.queues.set(queue, ring);
    }
    const t = Math.floor(this.clock() / MINUTE_MS) * MINUTE_MS;
    let last = ring[ring.length - 1];
    if (!last || last.t !== t) {
      last = new Bucket(t, this.samples);
      ring.push(last);
      const oldest = t - (this.minutes - 1) * MINUTE_MS;
      while (ring.length > 0 && ring[0]!.t < oldest) ring.shift();
    }
    return last;
  }
}
