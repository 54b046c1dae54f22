import type { Backend, CancelResult, EnqueueResult, ListFilter, Page, QueueStats, ReplayResult } from "../backend/contract.js";
import type { JobDefinition } from "../core/define.js";
import { validatePayload } from "../core/define.js";
import { ConveyorError, InvalidInputError } from "../core/errors.js";
import type { ChildFailurePolicy, FlowNodeSpec, JobRecord, JobSpec } from "../core/job.js";
import type { JobTelemetry } from "../core/telemetry.js";
import type { Json } from "../core/json.js";
import type { QueueEvent } from "../core/queue-events.js";
import { checkFollowEventsOptions, followEvents, type FollowEventsOptions } from "./events.js";
import { normalizeQueueLimits, type QueueFlow, type QueueLimits } from "../core/flow.js";
import { buildJobSpec, checkJobDefaults, checkMaxPayloadBytes, checkName, type JobDefaults, type JobOptions } from "../core/spec.js";
import {
  buildScheduleWrite,
  checkScheduleId,
  nextRunAt,
  notifySchedulesChanged,
  scheduleInfos,
  type MisfireOption,
  type ScheduleInfo,
  type ScheduleOptions,
} from "../core/schedule.js";
import { createHash } from "node:crypto";
import { checkOptionKeys, shown, withoutUndefined } from "../core/checks.js";

export interface QueueOptions {
  /** Where jobs are stored. */
  backend: Backend;
  /**
   * Options applied to every job added through this queue, overridden per job (not `jobId`, `runAt`
   * or `dedup`, which name one job). Checked here, as a job's own options are. Default: none.
   */
  defaults?: JobDefaults;
  /** Largest payload accepted, in bytes of JSON (a whole number from 1 up). Default 262 144 (256 KiB). */
  maxPayloadBytes?: number;
  /** Counts and traces what is enqueued (see `conveyor-jobs/metrics`). Default none. */
  telemetry?: JobTelemetry;
}

/** Options of one `add`: the job's options plus, where the backend supports it, a transaction. */
const QUEUE_OPTION_KEYS: Record<keyof QueueOptions, true> = { backend: true, defaults: true, maxPayloadBytes: true, telemetry: true };
const REPEAT_OPTION_KEYS: Record<keyof RepeatOptions, true> = { pattern: true, tz: true, misfire: true, key: true };
const FLOW_JOB_KEYS: Record<keyof FlowJob, true> = { name: true, data: true, queue: true, options: true, children: true, onChildFailure: true };

export interface AddOptions extends JobOptions {
  /**
   * Your database transaction handle; the job commits or rolls back with it. Only for backends
   * whose `capabilities.transactionalEnqueue` is true.
   */
  tx?: unknown;
  /**
   * Makes this add a cron schedule instead of one job (the BullMQ form): every tick of `pattern`
   * enqueues this job. Upserts the schedule `repeat.key` (default derived from the job name,
   * pattern and time zone, so the same call at every start-up keeps one schedule); the result's
   * `id` is the schedule's id. See `queue.schedule` for the rules.
   */
  repeat?: RepeatOptions;
}

/** `add(name, data, { repeat })`: a cron schedule in BullMQ's words. */
export interface RepeatOptions {
  /** The cron pattern (5 fields, or 6 with seconds first). Required. */
  pattern: string;
  /** IANA time zone of the pattern. Default "UTC". */
  tz?: string;
  /** Ticks missed during downtime. Default "once" (see MisfirePolicy). */
  misfire?: MisfireOption;
  /** The schedule id. Default `repeat:<name>:<hash of pattern and tz>`. */
  key?: string;
}

/** One job of `addBulk`. */
export interface BulkJob {
  name: string | JobDefinition<unknown, unknown, unknown>;
  data?: unknown;
  options?: JobOptions;
}

export type AddResult = EnqueueResult;

/** One job of a flow (`queue.addFlow`): a job like `add` takes, plus where it runs and its children. */
export interface FlowJob {
  name: string | JobDefinition<unknown, unknown, unknown>;
  data?: unknown;
  /**
   * Queue of this job. Default: its parent's queue (the root's is always the queue `addFlow` is
   * called on). Another queue needs `capabilities.flows` "across-queues" (not Redis Cluster).
   */
  queue?: string;
  /** Job options, over the queue's defaults. `removeOnComplete` / `removeOnFail` cannot be `true`. */
  options?: JobOptions;
  /** Jobs that must all settle before this one runs; their outcomes are `ctx.children()`. Default none. */
  children?: readonly FlowJob[];
  /**
   * With children: what a child that ends dead (or cancelled) does to this job. `"fail"` (default):
   * this job becomes dead at once with a `ChildFailedError`; `"continue"`: it runs once every child
   * has settled, and `ctx.children()` lists the failures.
   */
  onChildFailure?: ChildFailurePolicy;
}

/** What `addFlow` stored: every job's id, as a tree shaped like the flow. */
export interface FlowAdded {
  id: string;
  queue: string;
  /** True when this job's id existed already; then nothing of the flow was stored. */
  duplicate: boolean;
  /**
   * True when this call stored the flow, every job of it; false when any job's id existed (that
   * job says `duplicate: true`) and nothing was stored. The same on every node: check the root's
   * to know, whichever job was the duplicate.
   */
  stored: boolean;
  children: FlowAdded[];
}

/** Most jobs one flow may hold. */
export const MAX_FLOW_JOBS = 10_000;

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
    checkOptionKeys(`new Queue("${this.name}") option`, options, QUEUE_OPTION_KEYS);
    this.backend = options.backend;
    this.defaults = checkJobDefaults(`new Queue("${this.name}") option defaults`, options.defaults);
    this.maxPayloadBytes = checkMaxPayloadBytes(options.maxPayloadBytes);
    this.telemetry = options.telemetry?.enqueue ? options.telemetry : null;
  }

  /**
   * Adds one job. With a definition the payload is type-checked and validated against its schema.
   * Resolves to the job id and whether it was a duplicate of an existing `jobId`.
   */
  add<T, R, I>(job: JobDefinition<T, R, I>, data: I, options?: AddOptions): Promise<AddResult>;
  add(name: string, data?: Json, options?: AddOptions): Promise<AddResult>;
  async add(job: string | JobDefinition<unknown>, data?: unknown, options: AddOptions = {}): Promise<AddResult> {
    // Checked before it is taken apart: a string's own properties (String.prototype.repeat) would pass for options.
    if (typeof options !== "object" || options === null || Array.isArray(options)) {
      throw new InvalidInputError(`job options must be an object; got ${shown(options)}`, { field: "options" });
    }
    const { tx, repeat, ...jobOptions } = options;
    if (repeat !== undefined) return this.addRepeat(job, data, jobOptions, repeat, tx);
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

  // ── cron schedules (rules in src/core/schedule.ts, docs/scheduling.md) ────────────────────

  /**
   * Creates or replaces the cron schedule `id` of this queue: every tick of `cron` (in `tz`)
   * enqueues one job `name` with `data` and `options`, exactly once however many schedulers run
   * (workers run one by default). Replacing a schedule keeps its last fired tick; a changed pattern
   * takes effect from its next tick, without firing a tick twice.
   *
   * ```ts
   * await reports.schedule("weekly-digest", { cron: "0 8 * * MON", tz: "Europe/Berlin", name: "digest" });
   * ```
   */
  async schedule(id: string, schedule: ScheduleOptions): Promise<ScheduleInfo & { created: boolean }> {
    const write = buildScheduleWrite(this.name, checkScheduleId(id), schedule, this.maxPayloadBytes);
    const { created, schedule: stored } = await this.backend.scheduleUpsert(write);
    notifySchedulesChanged(this.backend);
    return { ...stored, nextRunAt: nextRunAt(stored, await this.backend.now()), created };
  }

  /** Deletes the schedule `id` of this queue; false when there was none. Jobs it enqueued stay. */
  async unschedule(id: string): Promise<boolean> {
    const removed = await this.backend.scheduleRemove(this.name, checkScheduleId(id));
    if (removed) notifySchedulesChanged(this.backend);
    return removed;
  }

  /** This queue's schedules, by id, each with its next run time (store clock, ms since the epoch). */
  schedules(): Promise<ScheduleInfo[]> {
    return scheduleInfos(this.backend, this.name);
  }

  private async addRepeat(job: string | JobDefinition<unknown>, data: unknown, options: JobOptions, repeat: RepeatOptions, tx: unknown): Promise<AddResult> {
    if (tx !== undefined) throw new InvalidInputError("add({ repeat }) creates a schedule, which cannot join your transaction; drop tx");
    if (typeof repeat !== "object" || repeat === null)
      throw new InvalidInputError(`option repeat must be { pattern, tz? }; got ${shown(repeat)}`, { field: "options.repeat" });
    // BullMQ's repeat.limit / every / startDate would be ignored here, the schedule running for ever.
    checkOptionKeys("option repeat", repeat, REPEAT_OPTION_KEYS);
    const name = typeof job === "string" ? job : job.name;
    if (typeof job !== "string") validatePayload(job.name, job.schema, data);
    const { jobId, delayMs, runAt, ...jobOptions } = options;
    if (jobId !== undefined || delayMs !== undefined || runAt !== undefined) {
      throw new InvalidInputError(
        "add({ repeat }) cannot take jobId, delayMs or runAt: each tick decides its job's id and run time; name the schedule with repeat.key",
        { field: "options" },
      );
    }
    const tz = repeat.tz ?? "UTC";
    const id = repeat.key ?? repeatKey(name, String(repeat.pattern), tz);
    // A queue's default delay means nothing to a tick (its run time is the tick): left out.
    const defaults: JobDefaults = typeof job === "string" ? { ...this.defaults } : { ...this.defaults, ...withoutUndefined(job.defaults) };
    delete defaults.delayMs;
    const result = await this.schedule(id, {
      cron: repeat.pattern,
      tz,
      name,
      data: (data ?? {}) as Json,
      options: { ...defaults, ...jobOptions },
      ...(repeat.misfire === undefined ? {} : { misfire: repeat.misfire }),
    });
    return { id: result.id, duplicate: !result.created };
  }

  /**
   * Adds a flow atomically: a parent job that runs only once all its children (and theirs, for
   * nested flows) have settled, and reads their results with `ctx.children()`. Either every job is
   * stored or (when one's `jobId` exists already) none, reported with `duplicate: true`.
   *
   * ```ts
   * await reports.addFlow({ name: "merge", children: [{ name: "part", data: { n: 1 } }, { name: "part", data: { n: 2 } }] });
   * ```
   */
  async addFlow(flow: FlowJob, options: { tx?: unknown } = {}): Promise<FlowAdded> {
    if (typeof flow !== "object" || flow === null) throw new InvalidInputError("addFlow takes { name, data, options, children: [...] }");
    if (flow.queue !== undefined && flow.queue !== this.name) {
      throw new InvalidInputError(`the root of a flow is in the queue addFlow is called on ("${this.name}"); got queue ${JSON.stringify(flow.queue)}`, {
        field: "queue",
      });
    }
    const nodes: FlowNodeSpec[] = [];
    const shape: Array<{ node: number; children: number[] }> = [];
    // Depth first with an explicit stack, so a deep flow cannot overflow the call stack.
    const stack: Array<{ job: FlowJob; parent: number | null; queue: string; path: string }> = [{ job: flow, parent: null, queue: this.name, path: "flow" }];
    while (stack.length > 0) {
      const { job, parent, queue, path } = stack.pop()!;
      if (nodes.length >= MAX_FLOW_JOBS) throw new InvalidInputError(`a flow holds at most ${MAX_FLOW_JOBS} jobs; split it`);
      if (typeof job !== "object" || job === null) throw new InvalidInputError(`${path} must be { name, data, options, children }`);
      // A misspelt `children` would store a childless parent that runs at once.
      checkOptionKeys(path, job, FLOW_JOB_KEYS);
      const policy = job.onChildFailure ?? "fail";
      if (policy !== "fail" && policy !== "continue") {
        throw new InvalidInputError(`${path}.onChildFailure must be "fail" or "continue"; got ${shown(job.onChildFailure)}`, {
          field: "onChildFailure",
        });
      }
      if (job.children !== undefined && !Array.isArray(job.children))
        throw new InvalidInputError(`${path}.children must be an array of flow jobs`, { field: "children" });
      const jobQueue = job.queue ?? queue;
      const index = nodes.length;
      let spec: JobSpec;
      try {
        spec = this.toSpec({ name: job.name, data: job.data, ...(job.options === undefined ? {} : { options: job.options }) }, jobQueue);
      } catch (error) {
        if (error instanceof Error) error.message = `${path}: ${error.message}`;
        throw error;
      }
      nodes.push({ spec, parent, onChildFailure: policy });
      shape.push({ node: index, children: [] });
      if (parent !== null) shape[parent]!.children.push(index);
      const children: readonly FlowJob[] = job.children ?? [];
      for (let i = children.length - 1; i >= 0; i--) {
        stack.push({ job: children[i]!, parent: index, queue: jobQueue, path: `${path}.children[${i}]` });
      }
    }
    if (this.closed) throw new ConveyorError(`queue "${this.name}" is closed; adding needs a new Queue`);
    const tx = options.tx;
    if (tx !== undefined && !this.backend.capabilities.transactionalEnqueue) {
      throw new InvalidInputError(
        `${this.backend.description} cannot enqueue inside your transaction (no transactionalEnqueue capability); drop the tx option`,
      );
    }
    // Telemetry counts the flow's jobs and may add trace context to their specs, as for add.
    const store = (specs: readonly JobSpec[]) =>
      this.backend.enqueueFlow(
        nodes.map((node, i) => ({ ...node, spec: specs[i]! })),
        tx === undefined ? undefined : { tx },
      );
    const specs = nodes.map((n) => n.spec);
    const sent = this.telemetry ? this.telemetry.enqueue!(specs, store) : store(specs);
    this.inFlight.add(sent);
    const forget = () => this.inFlight.delete(sent);
    sent.then(forget, forget);
    const results = await sent;
    const stored = !results.some((r) => r.duplicate);
    const build = (i: number): FlowAdded => ({
      id: results[i]!.id,
      queue: nodes[i]!.spec.queue,
      duplicate: results[i]!.duplicate,
      stored,
      children: shape[i]!.children.map(build),
    });
    return build(0);
  }

  private toSpec(job: BulkJob, queue: string = this.name): JobSpec {
    if (typeof job !== "object" || job === null) throw new InvalidInputError(`a job must be { name, data, options }; got ${shown(job)}`);
    if (typeof job.name !== "string" && (typeof job.name !== "object" || job.name === null || typeof job.name.name !== "string")) {
      throw new InvalidInputError(`a job's name must be a job name or a definition made by defineJob; got ${shown(job.name)}`, { field: "name" });
    }
    if (typeof job.name === "string") {
      return buildJobSpec({ queue, name: job.name, data: job.data, options: job.options, defaults: this.defaults, maxPayloadBytes: this.maxPayloadBytes });
    }
    const def = job.name;
    // Checked here so a bad payload is refused at once, but stored as given: the worker applies
    // the schema (defaults, transforms) once, right before the handler.
    validatePayload(def.name, def.schema, job.data);
    return buildJobSpec({
      queue,
      name: def.name,
      data: job.data,
      options: job.options,
      defaults: { ...this.defaults, ...withoutUndefined(def.defaults) },
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
  /**
   * This queue's job events from every process, as an async iterator (like BullMQ's
   * QueueEvents): `for await (const e of queue.events({ types: ["completed", "dead"] })) …`.
   * From now on unless `after` names an event id to resume from; filter by `names`, `jobId`,
   * `types`; end it with `break` or `signal`. Needs a store with an event log (SQLite,
   * PostgreSQL); on others it throws at the first `next()`. Event types and their data:
   * docs/events.md.
   */
  events(options: Omit<FollowEventsOptions, "queues"> = {}): AsyncGenerator<QueueEvent, void, undefined> {
    const follow = { ...options, queues: [this.name] };
    checkFollowEventsOptions(follow);
    return followEvents(this.backend, follow);
  }

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

/** The default schedule id of `add(name, data, { repeat })`: one schedule per name, pattern and zone. */
function repeatKey(name: string, pattern: string, tz: string): string {
  const hash = createHash("sha256").update(`${name}\u0000${pattern}\u0000${tz}`).digest("hex").slice(0, 12);
  const key = `repeat:${name}:${hash}`;
  return key.length <= 128 ? key : `repeat:${hash}`;
}
