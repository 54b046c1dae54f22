import { PayloadValidationError, type ValidationIssue } from "./errors.js";
import type { JobRecord } from "./job.js";
import type { Json } from "./json.js";
import type { SqlClient } from "../backend/contract.js";
import type { BackoffFunction } from "./retry.js";
import type { BackoffOption, JobDefaults } from "./spec.js";

/**
 * Any schema with zod's `safeParse` (zod 3 and 4 both fit). Conveyor does not depend on zod; it
 * only calls this method.
 */
export interface PayloadSchema<T> {
  safeParse(data: unknown):
    | { success: true; data: T }
    | { success: false; error: { issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }> } };
}

/** The job as a handler sees it. `data` is the payload (typed when the job was defined with a schema). */
export interface Job<T = Json> extends Omit<JobRecord, "data"> {
  data: T;
}

/** What a handler gets besides the job. */
export interface JobContext {
  /**
   * Aborted when the job times out, the lease is lost (expired or cancelled), or the worker shuts
   * down. Pass it to fetch() and friends; check it between steps of long work.
   */
  signal: AbortSignal;
  /** Stores a progress report (any JSON) on the job, visible to `get` and the HTTP status API. */
  progress(value: Json): Promise<void>;
  /**
   * Idempotency guard: true the first time `key` is seen within `ttlMs` milliseconds (default 24 h),
   * false after. Mark the key in the same place you make the side effect, as late as possible.
   */
  once(key: string, ttlMs?: number): Promise<boolean>;
  /**
   * A database client inside a transaction that also completes this job: when the handler returns,
   * the completion is written with your writes and committed, fenced by the lease. If the lease
   * was lost meanwhile, everything rolls back, so database-local effects apply exactly once. If
   * the handler throws, your writes roll back. Only on backends with `transactionalCompletion`
   * (PostgreSQL); elsewhere it throws.
   */
  tx(): Promise<SqlClient>;
}

/**
 * A job handler. Its return value, serialised as JSON, becomes the job's result (a value JSON
 * cannot hold fails the job as unrecoverable).
 */
export type Handler<T = Json> = (job: Job<T>, ctx: JobContext) => unknown;

/** Per-job-type settings a worker applies when running a handler. */
export interface HandlerSettings {
  /** Computed backoff, overriding the job's stored one. Gets the 1-based attempt that failed. */
  backoff?: BackoffFunction;
  /** Default per-attempt time limit in ms when the job itself sets none. Default: none. */
  timeoutMs?: number;
}

/** A handler bound to a job definition: the payload is validated before it runs. */
export interface BoundHandler<T = Json> extends HandlerSettings {
  readonly name: string;
  readonly schema: PayloadSchema<T> | null;
  // Method syntax on purpose: it lets handlers of different payload types share one array.
  run(job: Job<T>, ctx: JobContext): unknown;
}

/** A named job type with a payload schema; `queue.add(def, data)` is type-checked against it. */
export interface JobDefinition<T> {
  readonly name: string;
  readonly schema: PayloadSchema<T>;
  /** Options applied to every job of this type, overridden per call. */
  readonly defaults: JobDefaults;
  readonly settings: HandlerSettings;
  /** Validates a payload; returns the parsed value or throws PayloadValidationError. */
  parse(data: unknown): T;
  /** Binds a handler for workers: `new Worker({ handlers: [sendEmail.handle(async (job) => …)] })`. */
  handle(run: Handler<T>): BoundHandler<T>;
}

export interface DefineJobOptions extends Omit<JobDefaults, "backoff"> {
  /** A stored backoff (`{ type, delayMs }`) or a function evaluated by the worker. */
  backoff?: BackoffOption | BackoffFunction;
}

function toIssues(issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }>): ValidationIssue[] {
  return issues.map((i) => ({
    path: i.path.map((p) => (typeof p === "number" ? p : String(p))),
    message: i.message,
  }));
}

export function validatePayload<T>(name: string, schema: PayloadSchema<T>, data: unknown): T {
  const parsed = schema.safeParse(data);
  if (parsed.success) return parsed.data;
  throw new PayloadValidationError(name, toIssues(parsed.error.issues));
}

/**
 * Defines a job type: its name, its payload schema and default options.
 *
 * ```ts
 * const sendWelcome = defineJob("send-welcome", z.object({ userId: z.string() }), { attempts: 5 });
 * await queue.add(sendWelcome, { userId: "u_1" });      // type-checked, validated
 * new Worker({ backend, queues: "email", handlers: [sendWelcome.handle(async (job) => …)] });
 * ```
 */
export function defineJob<T>(name: string, schema: PayloadSchema<T>, options: DefineJobOptions = {}): JobDefinition<T> {
  const { backoff, ...rest } = options;
  const settings: HandlerSettings = {};
  const defaults: JobDefaults = { ...rest };
  if (typeof backoff === "function") settings.backoff = backoff;
  else if (backoff !== undefined) defaults.backoff = backoff;
  if (options.timeoutMs !== undefined) settings.timeoutMs = options.timeoutMs;
  return {
    name,
    schema,
    defaults,
    settings,
    parse: (data) => validatePayload(name, schema, data),
    handle: (run) => ({ name, schema, run, ...settings }),
  };
}
