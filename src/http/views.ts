/**
 * What the API shows of jobs and queues. Each shape is defined once, as a TypeBox schema
 * (typed-schema.ts): the JSON Schema the OpenAPI document publishes, and through `Static` the
 * TypeScript type the code builds, so the two cannot drift apart.
 *
 * The status view (`read` scope) holds no payload, metadata or stack trace: it is what the
 * client that asked for the work needs. The dead-letter view (`admin` scope) adds the forensic
 * details: payload, metadata, stacks, every attempt.
 */
import type { QueueStats } from "../backend/contract.js";
import { JOB_STATES, TERMINAL_STATES, type AttemptOutcome, type ErrorInfo, type FlowInfo, type JobRecord, type JobState } from "../core/job.js";
import type { Json } from "../core/json.js";
import type { QueueFlow } from "../core/flow.js";
import { LATEST_RUN_AT } from "../core/spec.js";
import { AnyJson, Nullable, StringEnum, Type, type Static } from "./typed-schema.js";

// ---------------------------------------------------------------- schemas (and their types)

const anyJson = (description: string) => AnyJson({ description });
/** A time every job has; null only when the stored value is no valid date (see `iso`). */
const timestamp = (options: { description?: string } = {}) => Nullable(Type.String({ format: "date-time" }), options);
const errorSummary = (description?: string) =>
  Nullable(Type.Object({ name: Type.String(), message: Type.String() }), description === undefined ? {} : { description });

export const jobStateSchema = StringEnum(JOB_STATES);

/** Links are relative to the server's origin and include the API's base path. */
const linksSchema = Type.Object({ self: Type.String(), events: Type.String() });
export type JobLinks = Static<typeof linksSchema>;

const flowParentSchema = (options: { description?: string } = {}) => Type.Object({ id: Type.String(), queue: Type.String(), links: linksSchema }, options);

export const jobViewSchema = Type.Object(
  {
    id: Type.String(),
    queue: Type.String(),
    name: Type.String(),
    state: jobStateSchema,
    finished: Type.Boolean({ description: "True for completed, dead and cancelled." }),
    progress: anyJson("The latest progress report of the handler (ctx.progress), or null."),
    result: anyJson("The handler's return value once completed, or null."),
    error: errorSummary("The last failed attempt's error, or null."),
    attempts: Type.Object({ made: Type.Integer({ description: "Attempts started so far." }), max: Type.Integer() }),
    priority: Type.Integer(),
    timings: Type.Object({
      createdAt: timestamp(),
      runAt: timestamp({ description: "When the job is (or was) due." }),
      startedAt: timestamp({ description: "Start of the current or last attempt." }),
      finishedAt: timestamp(),
      waitMs: Nullable(Type.Integer(), { description: "From creation to the first attempt's start." }),
      runMs: Nullable(Type.Integer(), { description: "Run time of the last attempt." }),
    }),
    links: linksSchema,
    parent: Type.Optional(flowParentSchema({ description: "Only for a child of a flow (queue.addFlow): its parent." })),
  },
  { title: "Job" },
);
export type JobView = Static<typeof jobViewSchema>;

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
export const flowViewSchema = Type.Object(
  {
    jobId: Type.String(),
    queue: Type.String(),
    parent: Type.Union([flowParentSchema(), Type.Null()], { description: "The job's flow parent, or null." }),
    onChildFailure: Type.Unsafe<"fail" | "continue" | null>({
      type: ["string", "null"],
      enum: ["fail", "continue", null],
      description: "For a parent: fail (it dies when a child dies or is cancelled) or continue (it runs with the failures listed); null without children.",
    }),
    pendingChildren: Type.Integer({ description: "Children that have not settled yet." }),
    children: Type.Array(
      // As `ctx.children()` has them, the error without its stack, plus links.
      Type.Object({
        id: Type.String(),
        queue: Type.String(),
        name: Type.String(),
        state: jobStateSchema,
        settled: Type.Boolean({ description: "True once its outcome reached the parent." }),
        result: anyJson("Its result once completed, else null."),
        error: errorSummary("Its last error once dead, else null."),
        links: linksSchema,
      }),
      { description: "Every child in the order they were added, with its outcome once settled (else its current state)." },
    ),
  },
  { title: "Flow" },
);
export type FlowView = Static<typeof flowViewSchema>;

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

export const deadJobViewSchema = Type.Object(
  {
    ...jobViewSchema.properties,
    data: anyJson("The original payload."),
    meta: Type.Unsafe<{ [key: string]: Json } | null>({ type: ["object", "null"], description: "Metadata given at enqueue." }),
    /** The error that killed the job, with its stack. */
    failure: Nullable(Type.Object({ name: Type.String(), message: Type.String(), stack: Nullable(Type.String()) })),
    history: Type.Array(
      Type.Object({
        attempt: Type.Integer(),
        workerId: Type.String(),
        host: Type.String(),
        pid: Type.Integer(),
        startedAt: timestamp(),
        finishedAt: timestamp(),
        outcome: StringEnum(["completed", "failed", "dead", "released", "lease-expired", "cancelled"] as const satisfies readonly AttemptOutcome[]),
        error: Type.Unsafe<ErrorInfo | null>({ type: ["object", "null"] }),
      }),
    ),
    replays: Type.Integer(),
    stalls: Type.Integer(),
  },
  { title: "DeadJob" },
);
export type DeadJobView = Static<typeof deadJobViewSchema>;

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

/** A queue's flow control as the one-queue view shows it (docs/flow-control.md). */
export const queueFlowViewSchema = Nullable(
  Type.Object({
    limits: Type.Object({
      rate: Nullable(Type.Object({ max: Type.Integer(), durationMs: Type.Integer() })),
      maxRunning: Nullable(Type.Integer()),
      maxRunningPerName: Type.Unsafe<Record<string, number>>({ type: "object", additionalProperties: { type: "integer" } }),
    }),
    /** When a hold (RetryLater with pause) ends, RFC 3339; null when none was set. */
    heldUntil: Nullable(Type.String({ format: "date-time" })),
  }),
  { description: "The queue's flow control (limits, hold), or null when it has none." },
);
export type QueueFlowView = NonNullable<Static<typeof queueFlowViewSchema>>;

export const queueViewSchema = Type.Object(
  {
    name: Type.String(),
    paused: Type.Boolean(),
    counts: Type.Unsafe<Record<JobState, number>>(Type.Object(Object.fromEntries(JOB_STATES.map((s) => [s, Type.Integer()])))),
    oldestWaitingAgeMs: Nullable(Type.Integer(), { description: "How long the oldest due job has waited, ms; null when none waits." }),
    flow: Type.Optional(
      Type.Unsafe<Static<typeof queueFlowViewSchema>>({
        ...queueFlowViewSchema,
        description: "One-queue views only: the queue's flow control, or null when it has none.",
      }),
    ),
  },
  { title: "Queue" },
);
export type QueueView = Static<typeof queueViewSchema>;

export function toQueueView(stats: QueueStats): QueueView {
  return { name: stats.queue, paused: stats.paused, counts: stats.counts, oldestWaitingAgeMs: stats.oldestWaitingAgeMs };
}

export function toQueueFlowView(flow: QueueFlow | null): QueueFlowView | null {
  return flow === null ? null : { limits: flow.limits, heldUntil: iso(flow.heldUntil) };
}

const positiveInteger = () => Type.Integer({ minimum: 1 });

/** `queue.setLimits` input over HTTP (checked again, with field names, by normalizeQueueLimits). */
export const queueLimitsSchema = Type.Object(
  {
    rate: Type.Optional(
      Nullable(Type.Object({ max: positiveInteger(), durationMs: positiveInteger() }, { additionalProperties: false }), {
        description: "At most `max` jobs start in any window of `durationMs` ms, fleet-wide. Default none.",
      }),
    ),
    maxRunning: Type.Optional(Nullable(Type.Integer({ minimum: 1 }), { description: "Jobs of the queue active at once, fleet-wide. Default none." })),
    maxRunningPerName: Type.Optional(
      Type.Unsafe<Record<string, number> | null>({
        type: ["object", "null"],
        additionalProperties: positiveInteger(),
        description: "Job name -> jobs of that name active at once, fleet-wide. Default none.",
      }),
    ),
  },
  { title: "QueueLimits", additionalProperties: false },
);
export type QueueLimitsBody = Static<typeof queueLimitsSchema>;
