import type { Backend, CancelResult, EnqueueResult, ListFilter, Page, QueueStats, ReplayResult } from "../backend/contract.js";
import type { JobDefinition } from "../core/define.js";
import { validatePayload } from "../core/define.js";
import { ConveyorError, InvalidInputError } from "../core/errors.js";
import type { JobRecord, JobSpec } from "../core/job.js";
import type { JobTelemetry } from "../core/telemetry.js";
import type { Json } from "../core/json.js";
import { normalizeQueueLimits, type QueueFlow, type QueueLimits } from "../core/flow.js";
import { buildJobSpec, checkName, DEFAULT_MAX_PAYLOAD_BYTES, type JobDefaults, type JobOptions } from "../core/spec.js";

export interface QueueOptions {
  /** Where jobs are stored. */
  backend: Backend;
  /** Options applied to every job added through this queue, overridden per job. Default: none. */
  defaults?: JobDefaults;
  /** Largest payload accepted, in bytes of JSON. Default 262 144 (256 KiB). */
  maxPayloadBytes?: number;
  /** Counts and traces what is enqueued (see `conveyor-jobs/metrics`). Default none. */
  telemetry?: JobTelemetry;
}

/** Options of one `add`: the job's options plus, where the backend supports it, a transaction. */
export interface AddOptions extends JobOptions {
  /**
   * Your database transaction handle; the job commits or rolls back with it. Only for backends
   * whose `capabilities.transactionalEnqueue` is true.
   */
  tx?: unknown;
}

/** One job of `addBulk`. */
export interface BulkJob {
  name: string | JobDefinition<unknown, unknown, unknown>;
  data?: unknown;
  options?: JobOptions;
}

export type AddResult = EnqueueResult;

/**
 * The producer side of one named queue.
 *
 * ```ts
 * const email = new Queue("email", { backend });
 * await email.add("welcome", { userId: "u_1" }, { jobId: "welcome:u_1", attempts: 5 });
 * ```
 */
export class Queue {
  readonly name: string;
  private readonly backend: Backend;
  private readonly defaults: JobDefaults;
  private readonly maxPayloadBytes: number;
  private closed = false;
  /** Enqueues sent to the store and not yet answered: what `close()` waits for. */
  private readonly inFlight = new Set<Promise<unknown>>();
  private readonly telemetry: JobTelemetry | null;

  constructor(name: string, options: QueueOptions) {
    this.name = checkName("queue", name);
    if (!options?.backend) throw new InvalidInputError(`new Queue("${name}") needs { backend }, e.g. new SqliteBackend({ path: "jobs.db" })`);
    this.backend = options.backend;
    this.defaults = options.defaults ?? {};
    this.maxPayloadBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
    this.telemetry = options.telemetry?.enqueue ? options.telemetry : null;
  }

  /**
   * Adds one job. With a definition the payload is type-checked and validated against its schema.
   * Resolves to the job id and whether it was a duplicate of an existing `jobId`.
   */
  add<T, R, I>(job: JobDefinition<T, R, I>, data: I, options?: AddOptions): Promise<AddResult>;
  add(name: string, data?: Json, options?: AddOptions): Promise<AddResult>;
  async add(job: string | JobDefinition<unknown>, data?: unknown, options: AddOptions = {}): Promise<AddResult> {
    const { tx, ...jobOptions } = options;
    const spec = this.toSpec({ name: job, data, options: jobOptions });
    const [result] = await this.enqueue([spec], tx);
    return result!;
  }

  /** Adds many jobs in one atomic batch: all are stored, or (on invalid input) none. */
  async addBulk(jobs: readonly BulkJob[], options: { tx?: unknown } = {}): Promise<AddResult[]> {
    if (!Array.isArray(jobs)) throw new InvalidInputError("addBulk takes an array of { name, data, options }");
    const list: readonly BulkJob[] = jobs;
    if (list.length === 0) return [];
    // Validate everything before the store sees anything, so a bad job leaves nothing behind.
    const specs = list.map((j, i) => {
      try {
        return this.toSpec(j);
      } catch (error) {
        if (error instanceof Error) error.message = `job #${i} of addBulk: ${error.message}`;
        throw error;
      }
    });
    return this.enqueue(specs, options.tx);
  }

  private toSpec(job: BulkJob): JobSpec {
    if (typeof job.name === "string") {
      return buildJobSpec({ queue: this.name, name: job.name, data: job.data, options: job.options, defaults: this.defaults, maxPayloadBytes: this.maxPayloadBytes });
    }
    const def = job.name;
    // Checked here so a bad payload is refused at once, but stored as given: the worker applies
    // the schema (defaults, transforms) once, right before the handler.
    validatePayload(def.name, def.schema, job.data);
    return buildJobSpec({
      queue: this.name,
      name: def.name,
      data: job.data,
      options: job.options,
      defaults: { ...this.defaults, ...def.defaults },
      maxPayloadBytes: this.maxPayloadBytes,
    });
  }

  private enqueue(specs: JobSpec[], tx: unknown): Promise<EnqueueResult[]> {
    if (this.closed) throw new ConveyorError(`queue "${this.name}" is closed; adding needs a new Queue`);
    if (tx !== undefined && !this.backend.capabilities.transactionalEnqueue) {
      throw new InvalidInputError(
        `${this.backend.description} cannot enqueue inside your transaction (no transactionalEnqueue capability); ` +
          `drop the tx option or use the PostgreSQL backend`,
      );
    }
    const store = (s: readonly JobSpec[]) => this.backend.enqueue(s, tx === undefined ? undefined : { tx });
    const sent = this.telemetry ? this.telemetry.enqueue!(specs, store) : store(specs);
    this.inFlight.add(sent);
    const forget = () => this.inFlight.delete(sent);
    sent.then(forget, forget);
    return sent;
  }

  /**
   * Stops this queue object accepting jobs and waits until every `add` / `addBulk` already sent
   * has been answered by the store, so a process can close its backend afterwards without losing
   * an enqueue it started. Later adds are refused. It does not close the backend, which other
   * queues and workers may share: call `backend.close()` when its last user is done. Also runs
   * on `await using queue = new Queue(…)`.
   */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.allSettled([...this.inFlight]);
  }

  /** `await using` support: the same as `close()`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /** This queue's job with this id, or null when unknown, pruned, or another queue's job. */
  getJob(id: string): Promise<JobRecord | null> {
    return this.backend.get(id, this.name);
  }

  /** Jobs of this queue, newest first. */
  list(filter: Omit<ListFilter, "queue"> = {}, page?: Page): Promise<JobRecord[]> {
    return this.backend.list({ ...filter, queue: this.name }, page);
  }

  async stats(): Promise<QueueStats> {
    const [stats] = await this.backend.stats(this.name);
    return stats!;
  }

  /** Cancels this queue's job with this id; another queue's job is "not-found" and left alone. */
  cancel(id: string): Promise<CancelResult> {
    return this.backend.cancel(id, this.name);
  }

  /** Replays this queue's dead job with this id; another queue's job is "not-found" and left alone. */
  replay(id: string): Promise<ReplayResult> {
    return this.backend.replay(id, this.name);
  }

  /** Stops workers from claiming this queue's jobs; adding still works. */
  pause(): Promise<void> {
    return this.backend.pause(this.name);
  }

  resume(): Promise<void> {
    return this.backend.resume(this.name);
  }

  /**
   * Sets this queue's flow limits, enforced by the store on every claim of every worker (see
   * docs/flow-control.md). The object replaces the previous limits; `{}` removes them.
   *
   * ```ts
   * await exports.setLimits({ rate: { max: 100, durationMs: 60_000 }, maxRunning: 10, maxRunningPerName: { "export-report": 3 } });
   * ```
   */
  async setLimits(limits: QueueLimits): Promise<void> {
    await this.backend.setQueueLimits(this.name, normalizeQueueLimits(limits));
  }

  /** This queue's limits and hold as stored; `null` when it has neither. */
  getLimits(): Promise<QueueFlow | null> {
    return this.backend.getQueueFlow(this.name);
  }

  /** Lets no job of this queue start for `forMs` milliseconds, on any worker (what RetryLater with pause does). */
  hold(forMs: number): Promise<void> {
    return this.backend.holdQueue(this.name, forMs);
  }
}
