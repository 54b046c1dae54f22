import { InvalidInputError, PayloadValidationError, type ValidationIssue } from "./errors.js";
import type { ChildOutcome, JobRecord } from "./job.js";
import type { Json } from "./json.js";
import type { SqlClient } from "../backend/contract.js";
import type { BackoffFunction } from "./retry.js";
import { checkJobDefaults, type BackoffOption, type JobDefaults } from "./spec.js";
import { shown } from "./checks.js";

/**
 * A payload schema: anything that implements Standard Schema v1 (https://standardschema.dev), the
 * interface zod (3.24+), valibot (1.0+) and ArkType (2.0+) share. Conveyor depends on none of them:
 * it calls `schema["~standard"].validate(value)`. A payload is checked at `add` and in the HTTP
 * enqueue route and stored as given (the schema's input); the worker validates it again and hands
 * the handler the value the schema returns (its output: defaults and transforms applied once, so a
 * transform such as string → Date never meets its own output). Validation must be synchronous,
 * since payloads are checked inside `add`; a schema that answers with a Promise (an async
 * refinement) is refused with an error naming the job.
 */
export interface PayloadSchema<Output = unknown, Input = unknown> {
  readonly "~standard": {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => SchemaResult<Output> | Promise<SchemaResult<Output>>;
    readonly types?: { readonly input: Input; readonly output: Output } | undefined;
  };
}

/** What a Standard Schema's `validate` answers: the (possibly transformed) value, or issues. */
export type SchemaResult<Output> = { readonly value: Output; readonly issues?: undefined } | { readonly issues: ReadonlyArray<SchemaIssue> };

/** One problem found by a schema; a path segment is a key or `{ key }`. */
export interface SchemaIssue {
  readonly message: string;
  readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined;
}

/** The payload type a schema produces (what a handler receives). */
export type PayloadOf<S> = S extends PayloadSchema<infer Output> ? Output : never;
/** The payload type a schema accepts (what `queue.add` takes and the store keeps). */
export type PayloadInputOf<S> = S extends PayloadSchema<unknown, infer Input> ? Input : never;

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
  /** Stores a progress report (any JSON, at most 64 KiB of it) on the job, visible to `get` and the HTTP status API. */
  progress(value: Json): Promise<void>;
  /**
   * Appends a line to the job's log, kept with the job in the store (`backend.logs(id)`,
   * `conveyor jobs show`, `GET /v1/jobs/:id`) with the store's time and the attempt. Lines
   * written in one tick are stored together; the job's outcome is stored only after them. You
   * need not await it: the promise says when the line is stored (a line of a job whose lease was
   * lost is not, and the worker emits `job:settle-refused`). Bounds (src/core/job-log.ts): 1000
   * lines per job over all attempts, the oldest dropped beyond; 1000 characters per line, a
   * longer one is cut. Not for high-volume tracing: every batch is one store write.
   */
  log(line: string): Promise<void>;
  /**
   * Idempotency guard: true the first time `key` is seen within `ttlMs` milliseconds (default 24 h),
   * false after. Mark the key in the same place you make the side effect, as late as possible.
   * Any non-empty string: a key of more than 512 characters, or one holding U+0000 or an unpaired
   * surrogate, is recorded as its SHA-256 (every store keeps it apart from every other key).
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
  /**
   * For the parent of a flow (`queue.addFlow`): every child with its outcome, in the order they
   * were added: `state` completed (with `result`), dead (with `error`) or cancelled. Under the
   * "continue" policy the failures are listed here beside the results. [] for a job with no
   * children. Read from the store at each call (not available inside a sandbox).
   */
  children(): Promise<ChildOutcome[]>;
}

/**
 * A job handler. Its return value, serialised as JSON, becomes the job's result (a value JSON
 * cannot hold fails the job as unrecoverable).
 */
export type Handler<T = Json, R = unknown> = (job: Job<T>, ctx: JobContext) => R | Promise<R>;

/** A stored job of a defined type, as `definition.narrow(record)` returns it: typed payload and result. */
export interface TypedJobRecord<T, R> extends Omit<JobRecord, "data" | "result"> {
  data: T;
  /** The handler's return value once completed; null before. */
  result: R | null;
}

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

/**
 * A named job type with a payload schema; `queue.add(def, data)` is type-checked against it.
 * `R` is the type its handler returns, stored as the job's result.
 */
/**
 * A job type: `T` is the payload its handler receives (the schema's output), `R` its result, `I`
 * the payload `queue.add` takes and the store keeps (the schema's input; the same as `T` unless the
 * schema has defaults or transforms).
 */
export interface JobDefinition<T, R = unknown, I = T> {
  readonly name: string;
  readonly schema: PayloadSchema<T, I>;
  /** Options applied to every job of this type, overridden per call. */
  readonly defaults: JobDefaults;
  readonly settings: HandlerSettings;
  /** Validates a payload; returns the parsed value or throws PayloadValidationError. */
  parse(data: unknown): T;
  /** Binds a handler for workers: `new Worker({ handlers: [sendEmail.handle(async (job) => …)] })`. */
  handle(run: Handler<T, R>): BoundHandler<T>;
  /**
   * A stored job of this type with its payload and result typed, or null when `record` is null or
   * of another job name: `const job = sendWelcome.narrow(await queue.getJob(id)); job?.result?.sent`.
   * The result is what the handler returned, as JSON (so a Date comes back as a string).
   */
  narrow(record: JobRecord | null): TypedJobRecord<T, R> | null;
}

export interface DefineJobOptions extends Omit<JobDefaults, "backoff"> {
  /** A stored backoff (`{ type, delayMs }`) or a function evaluated by the worker. */
  backoff?: BackoffOption | BackoffFunction;
}

function toIssues(issues: ReadonlyArray<SchemaIssue>): ValidationIssue[] {
  return issues.map((issue) => ({
    path: (issue.path ?? []).map((segment) => {
      const key = typeof segment === "object" && segment !== null && "key" in segment ? segment.key : segment;
      return typeof key === "number" ? key : String(key);
    }),
    message: issue.message,
  }));
}

function isPayloadSchema(value: unknown): value is PayloadSchema {
  const standard = (value as { "~standard"?: { version?: unknown; validate?: unknown } } | null)?.["~standard"];
  return typeof standard === "object" && standard !== null && standard.version === 1 && typeof standard.validate === "function";
}

/**
 * Checks a payload against a job's schema: the value to store, or the issues found. Throws only
 * when the schema itself is unusable here (asynchronous).
 */
export function checkPayload<T>(name: string, schema: PayloadSchema<T>, data: unknown): { ok: true; value: T } | { ok: false; issues: ValidationIssue[] } {
  const result = schema["~standard"].validate(data);
  if (typeof (result as { then?: unknown }).then === "function") {
    // Never leave the promise unhandled, whatever it settles to.
    (result as Promise<unknown>).catch(() => undefined);
    throw new InvalidInputError(
      `the schema of job "${name}" validates asynchronously (an async refinement or transform); Conveyor checks payloads synchronously ` +
        `at enqueue, in the HTTP API and in the worker: move the asynchronous check into the handler`,
    );
  }
  const settled = result as SchemaResult<T>;
  if (settled.issues) return { ok: false, issues: toIssues(settled.issues) };
  return { ok: true, value: settled.value };
}

export function validatePayload<T>(name: string, schema: PayloadSchema<T>, data: unknown): T {
  const checked = checkPayload(name, schema, data);
  if (checked.ok) return checked.value;
  throw new PayloadValidationError(name, checked.issues);
}

/**
 * Defines a job type: its name, its payload schema (any Standard Schema: zod, valibot, ArkType…)
 * and default options. Give the types explicitly to type the result too:
 * `defineJob<{ userId: string }, { sent: boolean }>("send-welcome", schema)`.
 *
 * ```ts
 * const sendWelcome = defineJob("send-welcome", z.object({ userId: z.string() }), { attempts: 5 });
 * await queue.add(sendWelcome, { userId: "u_1" });      // type-checked, validated
 * new Worker({ backend, queues: "email", handlers: [sendWelcome.handle(async (job) => …)] });
 * ```
 */
export function defineJob<T, R = unknown, I = T>(
  name: string,
  // The second member: a schema that declares no input type (or `defineJob<Data>` with the type
  // given) takes payloads of its output type.
  schema: PayloadSchema<T, I> | PayloadSchema<T>,
  options: DefineJobOptions = {},
): JobDefinition<T, R, I> {
  if (!isPayloadSchema(schema)) {
    throw new InvalidInputError(
      `defineJob("${name}"): the schema must implement Standard Schema v1 (a "~standard" property with validate), ` +
        `as zod 3.24+, valibot 1.0+ and ArkType 2.0+ schemas do`,
    );
  }
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    throw new InvalidInputError(`defineJob("${name}"): options must be an object of default job options; got ${shown(options)}`);
  }
  const { backoff, ...rest } = options;
  const settings: HandlerSettings = {};
  const defaults: JobDefaults = { ...rest };
  if (typeof backoff === "function") settings.backoff = backoff;
  else if (backoff !== undefined) defaults.backoff = backoff;
  checkJobDefaults(`defineJob("${name}") options`, defaults);
  if (options.timeoutMs !== undefined) settings.timeoutMs = options.timeoutMs;
  return {
    name,
    // The input type only types `queue.add`; at run time a schema validates any value.
    schema: schema as PayloadSchema<T, I>,
    defaults,
    settings,
    parse: (data) => validatePayload(name, schema, data),
    handle: (run) => ({ name, schema, run, ...settings }),
    narrow: (record) => (record !== null && record.name === name ? (record as unknown as TypedJobRecord<T, R>) : null),
  };
}
