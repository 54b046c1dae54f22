/**
 * What the API shows of jobs and queues, each next to its JSON Schema (published in the OpenAPI
 * document) so the two cannot drift apart.
 *
 * The status view (`read` scope) holds no payload, metadata or stack trace: it is what the
 * client that asked for the work needs. The dead-letter view (`admin` scope) adds the forensic
 * details: payload, metadata, stacks, every attempt.
 */
import type { QueueStats } from "../backend/contract.js";
import { JOB_STATES, TERMINAL_STATES, type AttemptRecord, type ChildOutcome, type FlowInfo, type JobRecord, type JobState } from "../core/job.js";
import type { Json } from "../core/json.js";
import type { QueueFlow, StoredQueueLimits } from "../core/flow.js";
import { LATEST_RUN_AT } from "../core/spec.js";
import type { JsonSchema } from "./schema.js";

/** Links are relative to the server's origin and include the API's base path. */
export interface JobLinks {
  self: string;
  events: string;
}

export interface JobView {
  id: string;
  queue: string;
  name: string;
  state: JobState;
  /** True for completed, dead and cancelled. */
  finished: boolean;
  progress: Json | null;
  result: Json | null;
  /** The last failed attempt's error, without its stack. */
  error: { name: string; message: string } | null;
  attempts: { made: number; max: number };
  priority: number;
  timings: {
    /** Null only when the stored time is no valid date (see `iso`). */
    createdAt: string | null;
    runAt: string | null;
    startedAt: string | null;
    finishedAt: string | null;
    /** From creation to the first attempt's start, ms; null before it starts. */
    waitMs: number | null;
    /** Run time of the last attempt, ms; null until it ends. */
    runMs: number | null;
  };
  links: JobLinks;
  /** Only for a child of a flow: its parent. */
  parent?: { id: string; queue: string; links: JobLinks };
}

/**
 * A stored time as RFC 3339, or null when it is none (not yet) or no valid date: a row written
 * before enqueue bounded `runAt`, or damaged, must not make every view that holds it fail.
 */
export function iso(ms: number | null | undefined): string | null {
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms < 0 || ms > LATEST_RUN_AT) return null;
  return new Date(ms).toISOString();
}

/**
 * A job's URLs. They name its queue: on a store whose ids are unique per queue (Redis) an id alone
 * may match another queue's job, and the links must always reach this one.
 */
export function jobLinks(basePath: string, id: string, queue: string): JobLinks {
  const path = `${basePath}/jobs/${encodeURIComponent(id)}`;
  const query = `?queue=${encodeURIComponent(queue)}`;
  return { self: `${path}${query}`, events: `${path}/events${query}` };
}

export function toJobView(job: JobRecord, basePath: string): JobView {
  const firstStart = job.history[0]?.startedAt ?? job.startedAt;
  return {
    id: job.id,
    queue: job.queue,
    name: job.name,
    state: job.state,
    finished: TERMINAL_STATES.includes(job.state),
    progress: job.progress,
    result: job.result,
    error: job.error ? { name: job.error.name, message: job.error.message } : null,
    attempts: { made: job.attempt, max: job.maxAttempts },
    priority: job.priority,
    timings: {
      createdAt: iso(job.createdAt),
      runAt: iso(job.runAt),
      startedAt: iso(job.startedAt),
      finishedAt: iso(job.finishedAt),
      waitMs: firstStart === null ? null : Math.max(0, firstStart - job.createdAt),
      runMs: job.startedAt !== null && job.finishedAt !== null ? Math.max(0, job.finishedAt - job.startedAt) : null,
    },
    links: jobLinks(basePath, job.id, job.queue),
    ...(job.parent === undefined ? {} : { parent: { ...job.parent, links: jobLinks(basePath, job.parent.id, job.parent.queue) } }),
  };
}

/** A job's place in a flow: its parent and its children with their states and outcomes. */
export interface FlowView {
  jobId: string;
  queue: string;
  parent: { id: string; queue: string; links: JobLinks } | null;
  onChildFailure: "fail" | "continue" | null;
  pendingChildren: number;
  /** As `ctx.children()` has them, the error without its stack, plus links. */
  children: Array<Omit<ChildOutcome, "error"> & { error: { name: string; message: string } | null; links: JobLinks }>;
}

export function toFlowView(job: JobRecord, flow: FlowInfo, basePath: string): FlowView {
  return {
    jobId: job.id,
    queue: job.queue,
    parent: flow.parent === null ? null : { ...flow.parent, links: jobLinks(basePath, flow.parent.id, flow.parent.queue) },
    onChildFailure: flow.onChildFailure,
    pendingChildren: flow.pendingChildren,
    children: flow.children.map((c) => ({
      id: c.id,
      queue: c.queue,
      name: c.name,
      state: c.state,
      settled: c.settled,
      result: c.result,
      error: c.error === null ? null : { name: c.error.name, message: c.error.message },
      links: jobLinks(basePath, c.id, c.queue),
    })),
  };
}

export interface DeadJobView extends JobView {
  data: Json;
  meta: { [key: string]: Json } | null;
  /** The error that killed the job, with its stack. */
  failure: { name: string; message: string; stack: string | null } | null;
  history: Array<Omit<AttemptRecord, "startedAt" | "finishedAt"> & { startedAt: string | null; finishedAt: string | null }>;
  replays: number;
  stalls: number;
}

export function toDeadJobView(job: JobRecord, basePath: string): DeadJobView {
  return {
    ...toJobView(job, basePath),
    data: job.data,
    meta: job.meta ?? null,
    failure: job.error,
    history: job.history.map((h) => ({ ...h, startedAt: iso(h.startedAt), finishedAt: iso(h.finishedAt) })),
    replays: job.replays,
    stalls: job.stalls,
  };
}

export interface QueueView {
  name: string;
  paused: boolean;
  counts: Record<JobState, number>;
  oldestWaitingAgeMs: number | null;
}

export function toQueueView(stats: QueueStats): QueueView {
  return { name: stats.queue, paused: stats.paused, counts: stats.counts, oldestWaitingAgeMs: stats.oldestWaitingAgeMs };
}

/** A queue's flow control as the one-queue view shows it (docs/flow-control.md). */
export interface QueueFlowView {
  limits: StoredQueueLimits;
  /** When a hold (RetryLater with pause) ends, RFC 3339; null when none was set. */
  heldUntil: string | null;
}

export function toQueueFlowView(flow: QueueFlow | null): QueueFlowView | null {
  return flow === null ? null : { limits: flow.limits, heldUntil: iso(flow.heldUntil) };
}

const positiveInteger: JsonSchema = { type: "integer", minimum: 1 };

/** `queue.setLimits` input over HTTP (checked again, with field names, by normalizeQueueLimits). */
export const queueLimitsSchema: JsonSchema = {
  title: "QueueLimits",
  type: "object",
  additionalProperties: false,
  properties: {
    rate: {
      type: ["object", "null"],
      additionalProperties: false,
      required: ["max", "durationMs"],
      properties: { max: positiveInteger, durationMs: positiveInteger },
      description: "At most `max` jobs start in any window of `durationMs` ms, fleet-wide. Default none.",
    },
    maxRunning: { type: ["integer", "null"], minimum: 1, description: "Jobs of the queue active at once, fleet-wide. Default none." },
    maxRunningPerName: {
      type: ["object", "null"],
      additionalProperties: positiveInteger,
      description: "Job name -> jobs of that name active at once, fleet-wide. Default none.",
    },
  },
};

export const queueFlowViewSchema: JsonSchema = {
  type: ["object", "null"],
  description: "The queue's flow control (limits, hold), or null when it has none.",
  required: ["limits", "heldUntil"],
  properties: {
    limits: {
      type: "object",
      required: ["rate", "maxRunning", "maxRunningPerName"],
      properties: {
        rate: { type: ["object", "null"], properties: { max: { type: "integer" }, durationMs: { type: "integer" } } },
        maxRunning: { type: ["integer", "null"] },
        maxRunningPerName: { type: "object", additionalProperties: { type: "integer" } },
      },
    },
    heldUntil: { type: ["string", "null"], format: "date-time" },
  },
};

// ---------------------------------------------------------------- schemas

const anyJson: JsonSchema = { description: "Any JSON value." };
/** A time every job has; null only when the stored value is no valid date (see `iso`). */
const timestamp: JsonSchema = { type: ["string", "null"], format: "date-time" };
const nullableTimestamp: JsonSchema = { type: ["string", "null"], format: "date-time" };
const errorSummary: JsonSchema = {
  type: ["object", "null"],
  properties: { name: { type: "string" }, message: { type: "string" } },
  required: ["name", "message"],
};

export const jobStateSchema: JsonSchema = { type: "string", enum: JOB_STATES };

const linksSchema: JsonSchema = {
  type: "object",
  required: ["self", "events"],
  properties: { self: { type: "string" }, events: { type: "string" } },
};

const flowParentSchema: JsonSchema = {
  type: "object",
  required: ["id", "queue", "links"],
  properties: { id: { type: "string" }, queue: { type: "string" }, links: linksSchema },
};

export const jobViewSchema: JsonSchema = {
  title: "Job",
  type: "object",
  required: ["id", "queue", "name", "state", "finished", "progress", "result", "error", "attempts", "priority", "timings", "links"],
  properties: {
    id: { type: "string" },
    queue: { type: "string" },
    name: { type: "string" },
    state: jobStateSchema,
    finished: { type: "boolean", description: "True for completed, dead and cancelled." },
    progress: { ...anyJson, description: "The latest progress report of the handler (ctx.progress), or null." },
    result: { ...anyJson, description: "The handler's return value once completed, or null." },
    error: { ...errorSummary, description: "The last failed attempt's error, or null." },
    attempts: {
      type: "object",
      required: ["made", "max"],
      properties: { made: { type: "integer", description: "Attempts started so far." }, max: { type: "integer" } },
    },
    priority: { type: "integer" },
    timings: {
      type: "object",
      required: ["createdAt", "runAt", "startedAt", "finishedAt", "waitMs", "runMs"],
      properties: {
        createdAt: timestamp,
        runAt: { ...timestamp, description: "When the job is (or was) due." },
        startedAt: { ...nullableTimestamp, description: "Start of the current or last attempt." },
        finishedAt: nullableTimestamp,
        waitMs: { type: ["integer", "null"], description: "From creation to the first attempt's start." },
        runMs: { type: ["integer", "null"], description: "Run time of the last attempt." },
      },
    },
    links: linksSchema,
    parent: { ...flowParentSchema, description: "Only for a child of a flow (queue.addFlow): its parent." },
  },
};

export const flowViewSchema: JsonSchema = {
  title: "Flow",
  type: "object",
  required: ["jobId", "queue", "parent", "onChildFailure", "pendingChildren", "children"],
  properties: {
    jobId: { type: "string" },
    queue: { type: "string" },
    parent: { anyOf: [flowParentSchema, { type: "null" }], description: "The job's flow parent, or null." },
    onChildFailure: {
      type: ["string", "null"],
      enum: ["fail", "continue", null],
      description: "For a parent: fail (it dies when a child dies or is cancelled) or continue (it runs with the failures listed); null without children.",
    },
    pendingChildren: { type: "integer", description: "Children that have not settled yet." },
    children: {
      type: "array",
      description: "Every child in the order they were added, with its outcome once settled (else its current state).",
      items: {
        type: "object",
        required: ["id", "queue", "name", "state", "settled", "result", "error", "links"],
        properties: {
          id: { type: "string" },
          queue: { type: "string" },
          name: { type: "string" },
          state: jobStateSchema,
          settled: { type: "boolean", description: "True once its outcome reached the parent." },
          result: { ...anyJson, description: "Its result once completed, else null." },
          error: { ...errorSummary, description: "Its last error once dead, else null." },
          links: linksSchema,
        },
      },
    },
  },
};

export const deadJobViewSchema: JsonSchema = {
  title: "DeadJob",
  type: "object",
  required: [...(jobViewSchema.required ?? []), "data", "meta", "failure", "history", "replays", "stalls"],
  properties: {
    ...jobViewSchema.properties,
    data: { ...anyJson, description: "The original payload." },
    meta: { type: ["object", "null"], description: "Metadata given at enqueue." },
    failure: {
      type: ["object", "null"],
      properties: { name: { type: "string" }, message: { type: "string" }, stack: { type: ["string", "null"] } },
    },
    history: {
      type: "array",
      items: {
        type: "object",
        properties: {
          attempt: { type: "integer" },
          workerId: { type: "string" },
          host: { type: "string" },
          pid: { type: "integer" },
          startedAt: timestamp,
          finishedAt: timestamp,
          outcome: { type: "string", enum: ["completed", "failed", "dead", "released", "lease-expired", "cancelled"] },
          error: { type: ["object", "null"] },
        },
      },
    },
    replays: { type: "integer" },
    stalls: { type: "integer" },
  },
};

export const queueViewSchema: JsonSchema = {
  title: "Queue",
  type: "object",
  required: ["name", "paused", "counts", "oldestWaitingAgeMs"],
  properties: {
    name: { type: "string" },
    paused: { type: "boolean" },
    counts: {
      type: "object",
      required: [...JOB_STATES],
      properties: Object.fromEntries(JOB_STATES.map((s) => [s, { type: "integer" } satisfies JsonSchema])),
    },
    oldestWaitingAgeMs: { type: ["integer", "null"], description: "How long the oldest due job has waited, ms; null when none waits." },
    flow: { ...queueFlowViewSchema, description: "One-queue views only: the queue's flow control, or null when it has none." },
  },
};
