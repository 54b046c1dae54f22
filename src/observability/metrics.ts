/**
 * Prometheus metrics for Conveyor (needs `prom-client@15`, an optional peer dependency).
 *
 * Two kinds of figures, fetched two different ways:
 * - Per process (counters and histograms): fed by the worker's typed event stream
 *   (`observe(worker)`) and by the producer hook (`telemetry` on Queue / conveyorHttp).
 * - Per store (depth by state, oldest waiting age): one `backend.stats()` call per scrape, shared
 *   by concurrent scrapes and cached for `storeCacheMs`, so a fleet of workers scraped every 15 s
 *   costs the store a handful of queries, not one per job.
 *
 * Names follow Prometheus conventions (`_total`, `_seconds`); labels are `queue` and `name` (the
 * job name) only, so cardinality is bounded by your queues and job types, never by job ids.
 * Every metric is documented in docs/observability.md.
 */
import { Counter, Gauge, Registry } from "prom-client";
import type { Backend, EnqueueResult, QueueStats } from "../backend/contract.js";
import { ConveyorError, InvalidInputError } from "../core/errors.js";
import type { WorkerEvents } from "../core/events.js";
import { JOB_STATES, type JobSpec } from "../core/job.js";
import type { JobTelemetry } from "../core/telemetry.js";
import { JobCounter, JobHistogram, type HistogramSeries } from "./series.js";
import type { LagSource } from "../kafka/lag.js";
import { KafkaLagGauge } from "./kafka-lag.js";
import { shown } from "../core/checks.js";

/** Seconds, from 1 ms to 10 min: short jobs and slow ones both land in a bucket of their own. */
export const DEFAULT_DURATION_BUCKETS: readonly number[] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

/** The part of a Worker the metrics read: its events and its slot figures. */
export interface ObservableWorker {
  on<K extends keyof WorkerEvents>(event: K, listener: (payload: WorkerEvents[K]) => void): unknown;
  off<K extends keyof WorkerEvents>(event: K, listener: (payload: WorkerEvents[K]) => void): unknown;
  readonly concurrency: number;
  readonly busySlotCount: number;
  readonly bufferedCount: number;
}

export interface MetricsOptions {
  /**
   * Registry the metrics are registered in; pass your own (or prom-client's global `register`)
   * to serve them beside your application's metrics. Default: a new, private Registry.
   */
  registry?: Registry;
  /** Store whose depth and oldest waiting age are exported. Default none (per-process figures only). */
  backend?: Backend;
  /**
   * How long one `stats()` answer of the store is reused, in milliseconds; at least 1000.
   * Default 5000.
   */
  storeCacheMs?: number;
  /**
   * How long a scrape (or `/scaling`) waits for the store's statistics, in milliseconds; past it
   * the store counts as down for that scrape (`conveyor_store_up 0`) and the per-process figures
   * are served anyway. The query itself is not repeated while it is still running. Default 5000
   * (half Prometheus's default 10 s scrape timeout).
   */
  storeTimeoutMs?: number;
  /** Buckets of the run-time histogram, seconds. Default 1 ms … 10 min (`DEFAULT_DURATION_BUCKETS`). */
  durationBuckets?: readonly number[];
  /** Buckets of the wait-time histogram, seconds. Default the same as `durationBuckets`. */
  waitBuckets?: readonly number[];
  /**
   * Most distinct (queue, job name) pairs given series of their own, pairs. Queue and job names
   * reach the metrics from whoever enqueues (over HTTP, any key with the enqueue scope), so without
   * a bound one client could make every scrape megabytes long; past the bound, new pairs are
   * counted together under `queue="_other", name="_other"` and
   * `conveyor_metrics_label_sets_overflow_total` counts the events folded there. The same bound
   * applies to the queues of the store gauges (`conveyor_queue_*`), since any key that may enqueue
   * can create queues: the first `maxLabelSets` queues this process has seen in the store keep
   * series of their own, the rest are reported together under `queue="_other"` (jobs summed,
   * oldest age and paused the maximum), and `conveyor_metrics_queues_folded` says how many.
   * The scaling endpoint keeps its last recommendation for at most this many queues too.
   * Default 1000.
   */
  maxLabelSets?: number;
}

/** True for a store or worker that reports a Kafka consumer group's lag. */
function isLagSource(value: unknown): value is LagSource {
  const v = value as Partial<LagSource> | null;
  return typeof v?.lag === "function" && typeof v.groupId === "string";
}

/** Labels shared by every (queue, job name) pair past `maxLabelSets`. */
export const OVERFLOW_LABEL = "_other";

/** Every job-labelled figure of one (queue, name), looked up once; each update is a number write. */
interface JobSeries {
  enqueued: { n: number };
  started: { n: number };
  completed: { n: number };
  failed: { n: number };
  retried: { n: number };
  dead: { n: number };
  leaseLost: { n: number };
  settleRefused: { n: number };
  leaseExpiries: { n: number };
  rescued: { n: number };
  quarantined: { n: number };
  duration: HistogramSeries;
  wait: HistogramSeries;
}

/** What a store reports per queue, as the metrics and the scaling endpoint use it. */
export interface StoreSnapshot {
  /** When the store answered, ms since epoch (this process's clock). */
  fetchedAt: number;
  /** How long the query took, ms. */
  queryMs: number;
  queues: QueueStats[];
}

/**
 * Conveyor's Prometheus metrics. Use it as the `telemetry` of your Queue / conveyorHttp (counts
 * enqueued jobs), `observe(worker)` for each Worker, and serve `registry` (see `http.ts`).
 */
export class ConveyorMetrics implements JobTelemetry {
  readonly registry: Registry;
  private readonly backend: Backend | null;
  private readonly storeCacheMs: number;
  private readonly series = new Map<string, JobSeries>();
  /** Bound on distinct label sets (see `MetricsOptions.maxLabelSets`). */
  readonly maxLabelSets: number;
  private overflowSeries: JobSeries | null = null;
  /** Queues of the store given series of their own, at most `maxLabelSets`, kept across scrapes so a series does not come and go. */
  private readonly storeQueues = new Set<string>();
  /** The latest snapshot with its queues folded to the bound, computed once per snapshot. */
  private bounded: { from: StoreSnapshot; queues: QueueStats[]; folded: number } | null = null;
  private readonly workers = new Set<ObservableWorker>();
  private snapshot: StoreSnapshot | null = null;
  /** When `snapshot` was taken, on the monotonic clock: a wall-clock step back must not freeze the cache. */
  private snapshotTakenAt = 0;
  private readonly storeTimeoutMs: number;
  /** The store query running now, shared by every scrape until it settles (even past their timeouts). */
  private inflight: { answer: Promise<StoreSnapshot>; outcome: { timedOut: boolean } } | null = null;

  private readonly enqueued: JobCounter;
  private readonly started: JobCounter;
  private readonly completed: JobCounter;
  private readonly failed: JobCounter;
  private readonly retried: JobCounter;
  private readonly dead: JobCounter;
  private readonly leaseLost: JobCounter;
  private readonly settleRefused: JobCounter;
  private readonly leaseExpiries: JobCounter;
  private readonly rescued: JobCounter;
  private readonly quarantined: JobCounter;
  private readonly duration: JobHistogram;
  private readonly wait: JobHistogram;
  private readonly workerErrors: Counter;
  private readonly leasesLapsed: Counter;
  private readonly storeErrors: Counter;
  private readonly labelOverflow: Counter;

  constructor(options: MetricsOptions = {}) {
    this.registry = options.registry ?? new Registry();
    this.backend = options.backend ?? null;
    this.storeCacheMs = options.storeCacheMs ?? 5_000;
    if (!Number.isInteger(this.storeCacheMs) || this.storeCacheMs < 1_000) {
      throw new InvalidInputError(
        `storeCacheMs must be an integer of at least 1000 (ms), so scrapes do not load the store; got ${shown(options.storeCacheMs)}`,
      );
    }
    this.maxLabelSets = options.maxLabelSets ?? 1_000;
    if (!Number.isInteger(this.maxLabelSets) || this.maxLabelSets < 1) {
      throw new InvalidInputError(`maxLabelSets must be a positive integer (distinct queue and job name pairs); got ${shown(options.maxLabelSets)}`);
    }
    this.storeTimeoutMs = options.storeTimeoutMs ?? 5_000;
    if (!Number.isInteger(this.storeTimeoutMs) || this.storeTimeoutMs < 1) {
      throw new InvalidInputError(`storeTimeoutMs must be a positive integer (ms); got ${shown(options.storeTimeoutMs)}`);
    }
    const durationBuckets = checkBuckets("durationBuckets", options.durationBuckets ?? DEFAULT_DURATION_BUCKETS);
    const waitBuckets = checkBuckets("waitBuckets", options.waitBuckets ?? durationBuckets);
    const registers = [this.registry];
    const counter = (name: string, help: string) => new JobCounter(name, help, registers);

    this.enqueued = counter("conveyor_jobs_enqueued_total", "Jobs stored by this process (duplicates of an existing job id not counted).");
    this.started = counter("conveyor_jobs_started_total", "Attempts started by this process's workers.");
    this.completed = counter("conveyor_jobs_completed_total", "Jobs completed by this process's workers (the store accepted the completion).");
    this.failed = counter("conveyor_jobs_failed_total", "Failed attempts in this process's workers (retried or dead).");
    this.retried = counter("conveyor_jobs_retried_total", "Failed attempts scheduled for a retry after a backoff.");
    this.dead = counter(
      "conveyor_jobs_dead_total",
      "Jobs this process moved to the dead-letter state (failures, and rescues whose stall limit or attempts ran out).",
    );
    this.leaseLost = counter(
      "conveyor_jobs_lease_lost_total",
      "Jobs whose lease this process's workers lost (expired, cancelled, taken over); the handler was aborted.",
    );
    this.settleRefused = counter("conveyor_jobs_settle_refused_total", "Acknowledgements the store refused because the lease token was stale.");
    this.leaseExpiries = counter("conveyor_lease_expiries_total", "Expired leases found by this process's rescuer (a worker died or stalled).");
    this.rescued = counter("conveyor_jobs_rescued_total", "Jobs with an expired lease that the rescuer put back to waiting.");
    this.quarantined = counter(
      "conveyor_jobs_quarantined_total",
      "Jobs with an expired lease that the rescuer moved to dead (stall limit or attempts ran out).",
    );
    this.duration = new JobHistogram(
      "conveyor_job_duration_seconds",
      "Handler run time of finished attempts (completed or failed), seconds.",
      durationBuckets,
      registers,
    );
    this.wait = new JobHistogram(
      "conveyor_job_wait_seconds",
      "Time from when a job became due (its enqueue time unless delayed or retried) to the start of its attempt, seconds.",
      waitBuckets,
      registers,
    );
    this.labelOverflow = new Counter({
      name: "conveyor_metrics_label_sets_overflow_total",
      help: 'Job events counted under queue="_other", name="_other" because maxLabelSets distinct (queue, name) pairs already had series.',
      registers,
    });
    this.workerErrors = new Counter({
      name: "conveyor_worker_errors_total",
      help: "Errors outside handlers in this process's workers (store unreachable, …).",
      registers,
    });
    this.leasesLapsed = new Counter({
      name: "conveyor_worker_leases_lapsed_total",
      help: "Leases that expired in this process's workers before a renewal reached the store (the process ran late, or the store answered late); those jobs may run again elsewhere.",
      registers,
    });
    // Counted where the query fails; waiting for this scrape's query makes its failure show now.
    const settleStoreQuery = async () => {
      if (this.backend) await this.storeSnapshot().catch(() => undefined);
    };
    this.storeErrors = new Counter({
      name: "conveyor_store_stats_errors_total",
      help: "Failed store statistics queries; the queue gauges are left out of that scrape.",
      registers,
      async collect() {
        await settleStoreQuery();
      },
    });

    const workers = this.workers;
    const sum = (pick: (w: ObservableWorker) => number) => [...workers].reduce((total, w) => total + pick(w), 0);
    new Gauge({
      name: "conveyor_worker_slots",
      help: "Handler slots (concurrency) of this process's workers.",
      registers,
      collect() {
        this.set(sum((w) => w.concurrency));
      },
    });
    new Gauge({
      name: "conveyor_worker_slots_busy",
      help: "Slots whose handler is running now.",
      registers,
      collect() {
        this.set(sum((w) => w.busySlotCount));
      },
    });
    new Gauge({
      name: "conveyor_worker_prefetch_buffered",
      help: "Jobs claimed ahead and waiting in this process for a free slot.",
      registers,
      collect() {
        this.set(sum((w) => w.bufferedCount));
      },
    });

    if (this.backend) this.registerStoreGauges(registers);
    // A Kafka backend reports its consumer group's lag, the scaling signal (docs/kafka.md).
    if (isLagSource(this.backend)) this.observeLag(this.backend);
  }

  private kafkaLag: KafkaLagGauge | null = null;

  /**
   * Exports the consumer lag of a Kafka consumer group (`KafkaWorker`, `KafkaBackend`) as
   * `conveyor_kafka_consumer_lag{group, topic, partition}`, read at most every `storeCacheMs`.
   * A `KafkaBackend` given as `backend` is observed already. Returns the function that stops it.
   */
  observeLag(source: LagSource): () => void {
    this.kafkaLag ??= new KafkaLagGauge([this.registry], {
      cacheMs: this.storeCacheMs,
      timeoutMs: this.storeTimeoutMs,
      maxSeries: this.maxLabelSets,
      overflowLabel: OVERFLOW_LABEL,
    });
    return this.kafkaLag.add(source);
  }

  private registerStoreGauges(registers: Registry[]): void {
    // Every gauge asks for the snapshot in its own collect (prom-client collects them
    // concurrently); the snapshot is shared and cached, so a scrape is still one store query.
    const snapshotAgeMs = () => performance.now() - this.snapshotTakenAt;
    const hasSnapshot = () => this.snapshot !== null;
    const read = async (): Promise<StoreSnapshot | null> => {
      try {
        return await this.storeSnapshot();
      } catch {
        return null;
      }
    };
    // The per-queue gauges read the queues folded to `maxLabelSets`: queue names are the clients'.
    const readQueues = async (): Promise<QueueStats[]> => {
      const snapshot = await read();
      return snapshot ? this.boundedQueues(snapshot).queues : [];
    };
    const foldedNow = async (): Promise<number | null> => {
      const snapshot = await read();
      return snapshot ? this.boundedQueues(snapshot).folded : null;
    };
    new Gauge({
      name: "conveyor_metrics_queues_folded",
      help: 'Queues of the store reported together under queue="_other" by the conveyor_queue_* gauges because maxLabelSets queues already had series.',
      registers,
      async collect() {
        const folded = await foldedNow();
        if (folded !== null) this.set(folded);
      },
    });
    new Gauge({
      name: "conveyor_queue_jobs",
      help: "Jobs in the store per queue and state (a due scheduled job counts as waiting).",
      labelNames: ["queue", "state"] as const,
      registers,
      async collect() {
        const queues = await readQueues();
        this.reset();
        for (const q of queues) for (const state of JOB_STATES) this.set({ queue: q.queue, state }, q.counts[state]);
      },
    });
    new Gauge({
      name: "conveyor_queue_oldest_waiting_age_seconds",
      help: "Age of the job that has waited longest since it became due, per queue; 0 when none waits.",
      labelNames: ["queue"] as const,
      registers,
      async collect() {
        const queues = await readQueues();
        this.reset();
        for (const q of queues) this.set({ queue: q.queue }, (q.oldestWaitingAgeMs ?? 0) / 1000);
      },
    });
    new Gauge({
      name: "conveyor_queue_paused",
      help: "1 when the queue is paused.",
      labelNames: ["queue"] as const,
      registers,
      async collect() {
        const queues = await readQueues();
        this.reset();
        for (const q of queues) this.set({ queue: q.queue }, q.paused ? 1 : 0);
      },
    });
    new Gauge({
      name: "conveyor_store_stats_duration_seconds",
      help: "How long the last store statistics query took, seconds.",
      registers,
      async collect() {
        const snapshot = await read();
        if (snapshot) this.set(snapshot.queryMs / 1000);
      },
    });
    new Gauge({
      name: "conveyor_store_stats_age_seconds",
      help: "Age of the latest store statistics this process obtained, seconds; it grows while the store does not answer.",
      registers,
      async collect() {
        await read();
        // Without an answer this scrape, the statistics last obtained only get older: say so,
        // rather than repeat the age they had when they were served.
        if (hasSnapshot()) this.set(snapshotAgeMs() / 1000);
      },
    });
    new Gauge({
      name: "conveyor_store_up",
      help: "1 when the store answered the statistics query of this scrape (or its cached one), else 0.",
      registers,
      async collect() {
        this.set((await read()) ? 1 : 0);
      },
    });
  }

  /**
   * The snapshot's queues with at most `maxLabelSets` of their own; the rest (and a store queue
   * literally named `_other`) summed into one `_other` entry (oldest age and paused: the maximum).
   * Which queues keep their own series is decided once, in the order this process first saw them.
   */
  private boundedQueues(snapshot: StoreSnapshot): { queues: QueueStats[]; folded: number } {
    if (this.bounded?.from === snapshot) return this.bounded;
    const own: QueueStats[] = [];
    let other: QueueStats | null = null;
    let folded = 0;
    for (const q of snapshot.queues) {
      if (q.queue !== OVERFLOW_LABEL && (this.storeQueues.has(q.queue) || this.storeQueues.size < this.maxLabelSets)) {
        this.storeQueues.add(q.queue);
        own.push(q);
        continue;
      }
      folded++;
      if (!other) {
        other = { queue: OVERFLOW_LABEL, paused: q.paused, counts: { ...q.counts }, oldestWaitingAgeMs: q.oldestWaitingAgeMs };
        continue;
      }
      for (const state of JOB_STATES) other.counts[state] += q.counts[state];
      other.paused ||= q.paused;
      if (q.oldestWaitingAgeMs !== null) other.oldestWaitingAgeMs = Math.max(other.oldestWaitingAgeMs ?? 0, q.oldestWaitingAgeMs);
    }
    if (other) own.push(other);
    this.bounded = { from: snapshot, queues: own, folded };
    return this.bounded;
  }

  /**
   * The store's per-queue statistics, at most `storeCacheMs` old: one `stats()` query, shared by
   * every caller while it runs. Rejects after `storeTimeoutMs` without an answer (the query goes
   * on, and later callers share it). Also what the scaling endpoint reads.
   */
  storeSnapshot(): Promise<StoreSnapshot> {
    if (!this.backend) return Promise.reject(new InvalidInputError("these metrics have no backend; pass { backend } to ConveyorMetrics"));
    if (this.snapshot && performance.now() - this.snapshotTakenAt < this.storeCacheMs) return Promise.resolve(this.snapshot);
    if (!this.inflight) {
      const backend = this.backend;
      const started = performance.now();
      const outcome = { timedOut: false };
      const answer = backend
        .stats()
        .then((queues) => {
          this.snapshotTakenAt = performance.now();
          this.snapshot = { fetchedAt: Date.now(), queryMs: this.snapshotTakenAt - started, queues };
          return this.snapshot;
        })
        .catch((error: unknown) => {
          // A query that already timed out was counted then.
          if (!outcome.timedOut) this.storeErrors.inc();
          throw error;
        })
        .finally(() => {
          if (this.inflight?.answer === answer) this.inflight = null;
        });
      // Every caller handles the answer through its own race below; this keeps a rejection that
      // comes after every caller timed out from being unhandled.
      answer.catch(() => undefined);
      this.inflight = { answer, outcome };
    }
    const query = this.inflight;
    return new Promise<StoreSnapshot>((resolve, reject) => {
      const timer = setTimeout(() => {
        if (!query.outcome.timedOut) {
          query.outcome.timedOut = true;
          this.storeErrors.inc();
        }
        reject(new ConveyorError(`the store's statistics query has not answered within ${this.storeTimeoutMs} ms (storeTimeoutMs)`));
      }, this.storeTimeoutMs);
      timer.unref();
      query.answer.then(
        (snapshot) => {
          clearTimeout(timer);
          resolve(snapshot);
        },
        (error: unknown) => {
          clearTimeout(timer);
          reject(error instanceof Error ? error : new Error(String(error)));
        },
      );
    });
  }

  /** The text exposition of every metric in the registry. */
  metrics(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  private jobSeries(queue: string, name: string): JobSeries {
    const key = `${queue}\u0000${name}`;
    let s = this.series.get(key);
    if (!s) {
      if (this.series.size >= this.maxLabelSets) {
        this.labelOverflow.inc();
        return (this.overflowSeries ??= this.newSeries(OVERFLOW_LABEL, OVERFLOW_LABEL));
      }
      s = this.newSeries(queue, name);
      this.series.set(key, s);
    }
    return s;
  }

  private newSeries(queue: string, name: string): JobSeries {
    const l = { queue, name };
    return {
      enqueued: this.enqueued.for(l),
      started: this.started.for(l),
      completed: this.completed.for(l),
      failed: this.failed.for(l),
      retried: this.retried.for(l),
      dead: this.dead.for(l),
      leaseLost: this.leaseLost.for(l),
      settleRefused: this.settleRefused.for(l),
      leaseExpiries: this.leaseExpiries.for(l),
      rescued: this.rescued.for(l),
      quarantined: this.quarantined.for(l),
      duration: this.duration.for(l),
      wait: this.wait.for(l),
    };
  }

  /** Producer hook (`telemetry` of Queue / conveyorHttp): counts the jobs the store accepted. */
  async enqueue(specs: readonly JobSpec[], store: (specs: readonly JobSpec[]) => Promise<EnqueueResult[]>): Promise<EnqueueResult[]> {
    const results = await store(specs);
    results.forEach((r, i) => {
      const spec = specs[i];
      if (!r.duplicate && spec) this.jobSeries(spec.queue, spec.name).enqueued.n++;
    });
    return results;
  }

  /** Subscribes to a worker's events and reads its slots at each scrape. Returns the function that stops it. */
  observe(worker: ObservableWorker): () => void {
    const on: { [K in keyof WorkerEvents]?: (payload: WorkerEvents[K]) => void } = {
      "job:started": ({ job, waitMs }) => {
        const s = this.jobSeries(job.queue, job.name);
        s.started.n++;
        s.wait.observe(waitMs / 1000);
      },
      "job:completed": ({ job, durationMs }) => {
        const s = this.jobSeries(job.queue, job.name);
        s.completed.n++;
        s.duration.observe(durationMs / 1000);
      },
      "job:failed": ({ job, durationMs }) => {
        const s = this.jobSeries(job.queue, job.name);
        s.failed.n++;
        s.duration.observe(durationMs / 1000);
      },
      "job:retry-scheduled": ({ job }) => this.jobSeries(job.queue, job.name).retried.n++,
      "job:dead": ({ job }) => this.jobSeries(job.queue, job.name).dead.n++,
      "job:lease-lost": ({ job }) => this.jobSeries(job.queue, job.name).leaseLost.n++,
      "job:settle-refused": ({ job }) => this.jobSeries(job.queue, job.name).settleRefused.n++,
      "job:stalled-rescued": ({ rescued }) => {
        const s = this.jobSeries(rescued.queue, rescued.name);
        s.leaseExpiries.n++;
        if (rescued.state === "dead") {
          s.quarantined.n++;
          s.dead.n++;
        } else {
          s.rescued.n++;
        }
      },
      "worker:error": () => this.workerErrors.inc(),
      "worker:leases-lapsed": ({ jobIds }) => this.leasesLapsed.inc(jobIds.length),
    };
    // Each listener was typed against its own event above; the loop only passes them through.
    const entries = Object.entries(on) as Array<[keyof WorkerEvents, (payload: WorkerEvents[keyof WorkerEvents]) => void]>;
    for (const [event, listener] of entries) worker.on(event, listener);
    this.workers.add(worker);
    return () => {
      for (const [event, listener] of entries) worker.off(event, listener);
      this.workers.delete(worker);
    };
  }
}

function checkBuckets(field: string, buckets: readonly number[]): readonly number[] {
  const list: unknown = buckets;
  const ok = Array.isArray(list) && buckets.length > 0 && buckets.every((b, i) => Number.isFinite(b) && b > 0 && (i === 0 || b > buckets[i - 1]!));
  if (!ok) throw new InvalidInputError(`${field} must be a non-empty list of increasing positive numbers of seconds; got ${shown(buckets)}`);
  return buckets;
}
