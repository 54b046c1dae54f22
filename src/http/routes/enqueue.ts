/**
 * `POST /queues/{queue}/jobs` and `POST /queues/{queue}/jobs/bulk`: the 202 Accepted contract.
 *
 * Validation, in order: the body's shape against the route schema (400 with field errors), then
 * the payload against the job's registered schema and Conveyor's own option rules (422 with
 * field errors). Nothing is stored unless every job of the request is valid.
 *
 * Idempotency (draft-ietf-httpapi-idempotency-key-header). With an `Idempotency-Key` header the
 * job id is derived from (API key id, queue, key), and a fingerprint of the request body is kept
 * in the job's metadata. Retrying the request returns the same answer for the same job and
 * stores nothing new (`Idempotent-Replayed: true`); reusing the key with a different body is
 * refused with 422. A key lives as long as its job: until the job is pruned (by default 24 h
 * after it completes).
 */
import { createHash } from "node:crypto";
import type { FastifyReply, FastifyRequest } from "fastify";
import { checkPayload, type JobDefinition } from "../../core/define.js";
import { InvalidInputError } from "../../core/errors.js";
import { refusedBatch, type EnqueueResult } from "../../backend/contract.js";
import type { JobRecord, JobSpec } from "../../core/job.js";
import type { Json } from "../../core/json.js";
import { buildJobSpec, LATEST_RUN_AT, type JobOptions } from "../../core/spec.js";
import type { Principal } from "../auth.js";
import type { HttpContext, RouteSpec } from "../context.js";
import { HttpProblem, type FieldError } from "../problem.js";
import { authResponses, canonicalJson, JOB_ID_SCHEMA, NAME_SCHEMA, problemResponse, QUEUE_PARAMS, type QueueParams } from "../schemas.js";
import { AnyJson, Nullable, StringEnum, Type, type Static } from "../typed-schema.js";
import { IDEMPOTENCY_ID_PREFIX, RESERVED_ID_PREFIXES, reservedPrefixOf, type IdDeriver } from "../derived-ids.js";
import { checkClientQueue, reservedMetaProblem } from "../reserved.js";
import { jobLinks } from "../views.js";

const MAX_DELAY_MS = 10 * 365 * 24 * 3600 * 1000;

const retention = (description: string) =>
  Type.Union(
    [
      Type.Boolean({ description: "true deletes the job as it finishes; false keeps it until deleted by hand." }),
      Type.Object({ ageMs: Type.Integer({ minimum: 0, maximum: MAX_DELAY_MS }) }, { additionalProperties: false }),
    ],
    { description },
  );

const literal = <const V extends string>(value: V) => Type.Unsafe<V>({ const: value });

export const jobOptionsSchema = Type.Object(
  {
    jobId: Type.Optional(
      Type.String({
        ...JOB_ID_SCHEMA,
        description:
          "Your id for the job; also its dedup key. Not with Idempotency-Key. Ids starting with idem_ or whk_ are reserved for ids the server derives.",
      }),
    ),
    delayMs: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_DELAY_MS, description: "Run no earlier than this many ms from now." })),
    runAt: Type.Optional(
      Type.Union(
        [
          Type.String({ format: "date-time" }),
          Type.Integer({ minimum: 0, maximum: LATEST_RUN_AT, description: "ms since the epoch, at most 9999-12-31T23:59:59.999Z" }),
        ],
        { description: "Run no earlier than this time; overrides delayMs." },
      ),
    ),
    priority: Type.Optional(Type.Integer({ minimum: -1_000_000, maximum: 1_000_000, description: "Lower runs first. Default 0." })),
    attempts: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000, description: "Total attempts including the first. Default 3." })),
    backoff: Type.Optional(
      Type.Union(
        [
          Type.Object(
            {
              type: literal("exponential"),
              delayMs: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_DELAY_MS })),
              maxDelayMs: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_DELAY_MS })),
            },
            { additionalProperties: false },
          ),
          Type.Object({ type: literal("fixed"), delayMs: Type.Integer({ minimum: 0, maximum: MAX_DELAY_MS }) }, { additionalProperties: false }),
        ],
        { description: "Default exponential full jitter, 1 s base, 60 s cap." },
      ),
    ),
    timeoutMs: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_DELAY_MS, description: "Per-attempt time limit in ms." })),
    removeOnComplete: Type.Optional(retention("Retention once completed. Default { ageMs: 86400000 }.")),
    removeOnFail: Type.Optional(retention("Retention once dead. Default { ageMs: 604800000 }.")),
    callbackUrl: Type.Optional(
      Type.String({
        format: "uri",
        // http and https only (the webhook sender speaks nothing else; internal targets are refused after).
        pattern: "^[Hh][Tt][Tt][Pp][Ss]?://",
        maxLength: 2048,
        description: "Receives a signed webhook (Standard Webhooks) when the job completes or dies. Needs webhooks enabled on the server.",
      }),
    ),
    meta: Type.Optional(
      Type.Unsafe<{ [key: string]: Json }>({
        type: "object",
        maxProperties: 64,
        description: "Your metadata, kept with the job (trace context, who asked). The key `conveyor` is reserved.",
      }),
    ),
  },
  { title: "JobOptions", additionalProperties: false },
);

export const jobRequestSchema = Type.Object(
  {
    name: Type.String({ ...NAME_SCHEMA, description: "The job's name: which handler runs it." }),
    data: Type.Optional(AnyJson({ description: "The payload: any JSON, validated against the job's registered schema. Default null." })),
    options: Type.Optional(jobOptionsSchema),
  },
  { title: "JobRequest", additionalProperties: false },
);
type RequestJob = Static<typeof jobRequestSchema>;

export const acceptedSchema = Type.Object(
  {
    status: StringEnum(["queued", "duplicate"] as const, { description: "duplicate: a job with this options.jobId already existed; nothing was added." }),
    jobId: Type.String(),
    pollUrl: Type.String({ description: "GET it for the job's status (also the Location header)." }),
    eventsUrl: Type.String({ description: "Server-Sent Events of the job." }),
    estimatedDurationSeconds: Nullable(Type.Number(), {
      description:
        "Expected seconds until finished: delay + the queue's current head-of-line wait + the median run time of the last 50 completed jobs of this name. null when no job of this name has completed yet.",
    }),
  },
  { title: "Accepted" },
);
type Accepted = Static<typeof acceptedSchema>;

/** The body of a bulk enqueue; `maxJobs` is the server's `maxBulkJobs`. */
const bulkBodySchema = (maxJobs: number) =>
  Type.Object({ jobs: Type.Array(jobRequestSchema, { minItems: 1, maxItems: maxJobs }) }, { additionalProperties: false });
type BulkBody = Static<ReturnType<typeof bulkBodySchema>>;

const bulkAcceptedSchema = Type.Object({ status: literal("queued"), count: Type.Integer(), jobs: Type.Array(acceptedSchema) });

const enqueueHeaders = Type.Object({
  "idempotency-key": Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 255,
      description:
        "Makes retries safe: the same key and body return the same job; a different body is refused (422). A key belongs to the API key, the queue and the route: the same key on the single and the bulk route names two different requests. Send it once (a repeated header is refused, 400).",
    }),
  ),
});

const acceptedHeaders = {
  Location: { description: "The job's status URL.", schema: Type.String() },
  "Retry-After": { description: "Seconds to wait before polling: the estimate rounded up, between 1 and 60.", schema: Type.Integer() },
};

/** A job ready to store, plus what the answer needs. */
interface Prepared {
  spec: JobSpec;
  delayMs: number;
}

/** Seconds for Retry-After: when polling is worth it. */
function retryAfter(estimate: number | null): number {
  return estimate === null ? 1 : Math.min(60, Math.max(1, Math.ceil(estimate)));
}

/** An InvalidInputError's field (`options.backoff.delayMs`) as a JSON Pointer (`/options/backoff/delayMs`). */
function pointerOf(error: InvalidInputError): string {
  if (error.field === undefined) return "";
  return error.field
    .split(".")
    .map((part) => `/${part.replace(/~/g, "~0").replace(/\//g, "~1")}`)
    .join("");
}

function hash(text: string): string {
  return createHash("sha256").update(text).digest("base64url");
}

export function idempotentJobId(ids: IdDeriver, principal: Principal, queue: string, key: string, index: number | null): string {
  return ids.derive(IDEMPOTENCY_ID_PREFIX, index === null ? [principal.id, queue, key] : [principal.id, queue, key, String(index)], principal.id);
}

interface ConveyorMeta {
  principal?: string;
  callbackUrl?: string;
  requestHash?: string;
  estimate?: number | null;
}

function conveyorMetaOf(job: JobRecord): ConveyorMeta {
  const c = job.meta?.conveyor;
  return c && typeof c === "object" && !Array.isArray(c) ? c : {};
}

export function principalOf(job: JobRecord): string | null {
  return conveyorMetaOf(job).principal ?? null;
}

/** Validates one job of a request; throws HttpProblem(422) with field errors. */
function prepare(
  ctx: HttpContext,
  queue: string,
  input: RequestJob,
  at: string,
  extra: { principal: Principal; jobId?: string; requestHash?: string; estimateSlot?: boolean },
): Prepared {
  const fail = (pointer: string, detail: string): never => {
    throw new HttpProblem(422, "invalid-job", `${at ? `${at}: ` : ""}${detail}`, { errors: [{ in: "body", pointer: `${at}${pointer}`, detail }] });
  };
  const def: JobDefinition<unknown> | undefined = ctx.jobs.get(input.name);
  if (!def && ctx.strictJobNames) {
    fail("/name", `job "${input.name}" is not registered on this server; registered: ${[...ctx.jobs.keys()].join(", ") || "(none)"}`);
  }
  const data: unknown = input.data ?? null;
  if (def) {
    const parsed = checkPayload(input.name, def.schema, data);
    if (!parsed.ok) {
      const errors: FieldError[] = parsed.issues.slice(0, 20).map((i) => ({
        in: "body",
        pointer: `${at}/data${i.path.map((p) => `/${String(p).replace(/~/g, "~0").replace(/\//g, "~1")}`).join("")}`,
        detail: i.message,
      }));
      throw new HttpProblem(
        422,
        "invalid-payload",
        `the payload of job "${input.name}" does not match its schema: ${errors.map((e) => `${e.pointer}: ${e.detail}`).join("; ")}`,
        { errors },
      );
    }
    // Stored as sent: the worker applies the schema's defaults and transforms once, before the handler.
  }
  const { callbackUrl, runAt, meta: userMeta, ...rest } = input.options ?? {};
  if (extra.jobId !== undefined && rest.jobId !== undefined) {
    fail("/options/jobId", "give options.jobId or an Idempotency-Key header, not both: the key derives the job id");
  }
  const reserved = typeof rest.jobId === "string" ? reservedPrefixOf(rest.jobId) : null;
  if (reserved !== null) {
    fail(
      "/options/jobId",
      `job ids starting with "${reserved}" are reserved for ids the server derives (${RESERVED_ID_PREFIXES.join(", ")}); choose another id`,
    );
  }
  const metaProblem = reservedMetaProblem(userMeta);
  if (metaProblem !== null) fail("/options/meta/conveyor", metaProblem);
  const conveyor: ConveyorMeta = { principal: extra.principal.id };
  if (callbackUrl !== undefined) {
    if (!ctx.webhooks) fail("/options/callbackUrl", "callbacks are not enabled on this server (no webhook signing secret configured)");
    try {
      conveyor.callbackUrl = ctx.webhooks!.checkCallbackUrl(callbackUrl);
    } catch (error) {
      fail("/options/callbackUrl", (error as Error).message);
    }
  }
  if (extra.requestHash !== undefined) conveyor.requestHash = extra.requestHash;
  const options: JobOptions = {
    ...rest,
    ...(runAt !== undefined ? { runAt: typeof runAt === "string" ? Date.parse(runAt) : runAt } : {}),
    ...(extra.jobId !== undefined ? { jobId: extra.jobId } : {}),
    meta: { ...(userMeta ?? {}), conveyor: conveyor as { [key: string]: Json } },
  };
  let spec: JobSpec;
  try {
    spec = buildJobSpec({ queue, name: input.name, data, options, defaults: def?.defaults, maxPayloadBytes: ctx.maxBodyBytes });
  } catch (error) {
    if (error instanceof InvalidInputError) fail(pointerOf(error), error.message);
    throw error;
  }
  const delayMs = spec.runAt !== null ? Math.max(0, spec.runAt - Date.now()) : spec.delayMs;
  return { spec, delayMs };
}

/** Stores the estimate in the job's metadata, so an idempotent replay answers identically. */
function withEstimate(spec: JobSpec, estimate: number | null): JobSpec {
  const meta = JSON.parse(spec.meta!) as { conveyor: ConveyorMeta };
  meta.conveyor.estimate = estimate;
  return { ...spec, meta: JSON.stringify(meta) };
}

/**
 * An `options.jobId` that a job of another queue holds. Ids are unique across the store
 * (SQLite, PostgreSQL), so this request's queue has no job of that id to link to; the other
 * queue is not named, as another key may own it.
 */
function jobIdTaken(at: string): HttpProblem {
  const detail = "a job with this options.jobId exists in another queue, and job ids are unique across all queues of this server; choose another id";
  return new HttpProblem(409, "job-id-taken", `${at ? `${at}: ` : ""}${detail}`, { errors: [{ in: "body", pointer: `${at}/options/jobId`, detail }] });
}

/** A job that held a duplicate id was deleted every time this request tried again. */
function jobIdChurning(): HttpProblem {
  return new HttpProblem(409, "job-id-conflict", "the job holding this options.jobId was deleted while this request ran; retry the request");
}

/** How many times a request stores again when the job that held its id is deleted meanwhile. */
const STORE_ATTEMPTS = 3;

/**
 * Store lookups one bulk request keeps in flight at once (where a duplicate id's holder is, the
 * jobs of a replayed Idempotency-Key). A batch holds up to maxBulkJobs (1,000) entries: looked up
 * all at once they queued on PostgreSQL's connection pool (10 connections by default) ahead of
 * every other request's queries. 16 still overlaps round trips, as `dlq replay --all` does.
 */
const LOOKUPS_AT_ONCE = 16;

/**
 * Runs `tasks` at most `atOnce` at a time, starting them in order, and answers what a loop
 * awaiting them one after another would have seen: every task is started until one rejects or
 * fulfils with a value that `decides`, none after it, and each result is at its task's index.
 * Every task started has settled when this answers (nothing is left running after a rejection),
 * so which task settles first never changes the answer; a task that throws counts as rejected.
 */
async function settleInOrder<R>(
  tasks: ReadonlyArray<() => Promise<R>>,
  atOnce: number,
  decides: (value: R) => boolean = () => false,
): Promise<Array<PromiseSettledResult<R>>> {
  const settled: Array<PromiseSettledResult<R>> = [];
  let started = 0;
  let decided = false;
  const lane = async (): Promise<void> => {
    while (!decided && started < tasks.length) {
      const i = started++;
      try {
        const value = await tasks[i]!();
        settled[i] = { status: "fulfilled", value };
        if (decides(value)) decided = true;
      } catch (reason) {
        settled[i] = { status: "rejected", reason };
        decided = true;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(atOnce, tasks.length) }, lane));
  return settled;
}

function idempotencyKeyOf(request: FastifyRequest): string | null {
  const v = request.headers["idempotency-key"];
  if (typeof v !== "string") return null;
  // Node joins repeated headers with ", ": two keys would become one new key ("a, b") that
  // matches neither, and a retry carrying only one of them would store the job again.
  const raw = request.raw.rawHeaders;
  let sent = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === "idempotency-key") sent++;
  if (sent > 1) {
    throw new HttpProblem(400, "bad-request", `send one Idempotency-Key header; this request has ${sent}`, {
      errors: [{ in: "headers", pointer: "/idempotency-key", detail: `sent ${sent} times; send it once` }],
    });
  }
  return v;
}

export function enqueueRoutes(ctx: HttpContext): RouteSpec[] {
  const accepted = (queue: string, jobId: string, status: Accepted["status"], estimate: number | null): Accepted => {
    const links = jobLinks(ctx.basePath, jobId, queue);
    return { status, jobId, pollUrl: links.self, eventsUrl: links.events, estimatedDurationSeconds: estimate };
  };

  /** Where the job that made `id` a duplicate is, seen from the request's queue. */
  async function holderOf(id: string, queue: string): Promise<"this-queue" | "other-queue" | "gone"> {
    if (await ctx.backend.get(id, queue)) return "this-queue";
    // Where ids are unique per queue (Redis) no other queue's job can have made it a duplicate.
    if (ctx.backend.capabilities.jobIdsPerQueue === true) return "gone";
    return (await ctx.backend.get(id)) ? "other-queue" : "gone";
  }

  /**
   * Stores a batch without an Idempotency-Key but with caller-chosen ids. An id held in another
   * queue refuses the whole batch (409) before anything is stored: each round is all or nothing,
   * so nothing is half-applied. An id held in this queue, or repeating an earlier entry, is that
   * entry's `duplicate` (the documented per-entry answer) and the others are stored.
   */
  async function storeWithCallerIds(specs: readonly JobSpec[], queue: string): Promise<EnqueueResult[]> {
    const results: EnqueueResult[] = [];
    let pending = specs.map((_, i) => i);
    for (let round = 0; pending.length > 0; round++) {
      // Every round settles at least one entry unless a holder was deleted meanwhile.
      if (round >= specs.length + STORE_ATTEMPTS) throw jobIdChurning();
      const batch = pending.map((i) => specs[i]!);
      const stored = await ctx.enqueueAllOrNothing(batch);
      if (!refusedBatch(stored)) {
        pending.forEach((i, j) => (results[i] = stored[j]!));
        break;
      }
      // Where each duplicate's holder is: the first entry of each duplicate id is looked up.
      const seen = new Set<string>();
      const lookedUp = pending.flatMap((_, j) => {
        const id = batch[j]!.id;
        const first = !seen.has(id);
        seen.add(id);
        return stored[j]!.duplicate && first ? [j] : [];
      });
      // Precedence, as a loop looking them up one after another in request order would answer:
      // the first entry whose id another queue holds (409 naming it) or whose lookup fails (that
      // error) decides, and a later entry's answer never wins over it. So the same request over
      // the same store gets the same answer, whichever lookup settles first.
      const outcomes = await settleInOrder(
        lookedUp.map((j) => () => holderOf(batch[j]!.id, queue)),
        LOOKUPS_AT_ONCE,
        (holder) => holder === "other-queue",
      );
      const holders = new Map<number, "this-queue" | "gone">();
      for (const [k, outcome] of outcomes.entries()) {
        const j = lookedUp[k]!;
        if (outcome.status === "rejected") throw outcome.reason;
        if (outcome.value === "other-queue") throw jobIdTaken(`/jobs/${pending[j]!}`);
        holders.set(j, outcome.value);
      }
      const next: number[] = [];
      for (const [j, i] of pending.entries()) {
        if (!stored[j]!.duplicate) next.push(i);
        // Held in this queue, or repeating an earlier entry's id (not looked up again): its duplicate answer.
        else if (holders.get(j) !== "gone") results[i] = stored[j]!;
        else next.push(i);
      }
      pending = next;
    }
    return results;
  }

  async function enqueueOne(request: FastifyRequest, reply: FastifyReply) {
    const { queue } = request.params as QueueParams;
    checkClientQueue(queue);
    const body = request.body as RequestJob;
    const principal = ctx.principal(request);
    const key = idempotencyKeyOf(request);
    const requestHash = key === null ? undefined : hash(canonicalJson({ queue, body }));
    const jobId = key === null ? undefined : idempotentJobId(ctx.derivedIds, principal, queue, key, null);
    const prepared = prepare(ctx, queue, body, "", { principal, ...(jobId ? { jobId } : {}), ...(requestHash ? { requestHash } : {}) });
    const estimate = await ctx.estimator.estimateSeconds(queue, prepared.spec.name, prepared.delayMs);
    const spec = key === null ? prepared.spec : withEstimate(prepared.spec, estimate);
    let [result] = await ctx.enqueue([spec]);
    // Without a key, a duplicate may be another queue's job (ids are global): no link to it.
    for (let attempt = 1; key === null && result!.duplicate; attempt++) {
      const holder = await holderOf(result!.id, queue);
      if (holder === "this-queue") break;
      if (holder === "other-queue") throw jobIdTaken("");
      if (attempt === STORE_ATTEMPTS) throw jobIdChurning();
      [result] = await ctx.enqueue([spec]);
    }
    const id = result!.id;
    let answer = accepted(queue, id, "queued", estimate);
    let code = 202;
    if (result!.duplicate) {
      if (key !== null) {
        const existing = await ctx.backend.get(id, queue);
        if (!existing)
          throw new HttpProblem(409, "idempotency-conflict", "the job of this Idempotency-Key was deleted while this request ran; retry the request");
        const meta = conveyorMetaOf(existing);
        if (meta.requestHash !== requestHash) {
          throw new HttpProblem(
            422,
            "idempotency-key-reused",
            "this Idempotency-Key was already used with a different request body; use a new key for a new request",
          );
        }
        answer = accepted(queue, id, "queued", meta.estimate ?? null);
        void reply.header("idempotent-replayed", "true");
      } else {
        answer = accepted(queue, id, "duplicate", estimate);
        code = 200;
      }
    }
    return reply
      .code(code)
      .header("location", answer.pollUrl)
      .header("retry-after", String(retryAfter(answer.estimatedDurationSeconds)))
      .send(answer);
  }

  async function enqueueBulk(request: FastifyRequest, reply: FastifyReply) {
    const { queue } = request.params as QueueParams;
    checkClientQueue(queue);
    const body = request.body as BulkBody;
    const principal = ctx.principal(request);
    const key = idempotencyKeyOf(request);
    const requestHash = key === null ? undefined : hash(canonicalJson({ queue, body }));
    const prepared = body.jobs.map((job, i) =>
      prepare(ctx, queue, job, `/jobs/${i}`, {
        principal,
        ...(key !== null ? { jobId: idempotentJobId(ctx.derivedIds, principal, queue, key, i) } : {}),
        ...(requestHash ? { requestHash } : {}),
      }),
    );
    const estimates = await Promise.all(prepared.map((p) => ctx.estimator.estimateSeconds(queue, p.spec.name, p.delayMs)));
    const specs = prepared.map((p, i) => (key === null ? p.spec : withEstimate(p.spec, estimates[i]!)));
    // With a key the batch is stored whole or not at all, in one step with the check that its
    // ids are new: a reused key (another body, another length) or a racing request can then only
    // find the other request's jobs, never leave part of its own behind.
    const callerIds = specs.some((spec) => spec.idGenerated !== true);
    const results =
      key !== null ? await ctx.backend.enqueue(specs, { allOrNothing: true }) : callerIds ? await storeWithCallerIds(specs, queue) : await ctx.enqueue(specs);
    let replayed = false;
    if (key !== null && refusedBatch(results)) {
      // Bounded as the holder lookups are; the first lookup to fail in request order is the error.
      const lookups = await settleInOrder(
        results.filter((r) => r.duplicate).map((r) => () => ctx.backend.get(r.id, queue)),
        LOOKUPS_AT_ONCE,
      );
      const existing = lookups.map((outcome) => {
        if (outcome.status === "rejected") throw outcome.reason;
        return outcome.value;
      });
      if (existing.some((e) => e !== null && conveyorMetaOf(e).requestHash !== requestHash)) {
        throw new HttpProblem(
          422,
          "idempotency-key-reused",
          "this Idempotency-Key was already used with a different request body; use a new key for a new request",
        );
      }
      if (existing.every((e) => e === null)) {
        throw new HttpProblem(409, "idempotency-conflict", "the jobs of this Idempotency-Key were deleted while this request ran; retry the request");
      }
      replayed = true;
      const byId = new Map(existing.filter((e): e is JobRecord => e !== null).map((e) => [e.id, e]));
      results.forEach((r, i) => {
        const e = byId.get(r.id);
        if (e) estimates[i] = conveyorMetaOf(e).estimate ?? null;
      });
    }
    const jobs = results.map((r, i) => ({
      ...accepted(queue, r.id, r.duplicate && key === null ? "duplicate" : "queued", estimates[i]!),
    }));
    const known = estimates.filter((e): e is number => e !== null);
    const longest = known.length === estimates.length && known.length > 0 ? Math.max(...known) : null;
    if (replayed) void reply.header("idempotent-replayed", "true");
    return reply
      .code(202)
      .header("retry-after", String(retryAfter(longest)))
      .send({ status: "queued", count: jobs.length, jobs } satisfies Static<typeof bulkAcceptedSchema>);
  }

  const errors = {
    400: problemResponse("The body is not JSON, or does not have the documented shape; `errors` lists the fields."),
    ...authResponses(),
    413: problemResponse("The body is larger than the server's limit."),
    415: problemResponse("The body is not application/json."),
    422: problemResponse(
      "A job is invalid: its payload fails the job's registered schema, an option is out of range, the callback URL is refused, or the Idempotency-Key was used with a different body.",
    ),
  };

  return [
    {
      method: "POST",
      url: "/queues/:queue/jobs",
      operationId: "enqueueJob",
      summary: "Add a job; answers 202 Accepted at once",
      description:
        "Stores the job and answers 202 with where to follow it: pollUrl (also Location), eventsUrl (Server-Sent Events) and an estimate. Send Idempotency-Key to make retries safe.",
      tags: ["jobs"],
      access: "enqueue",
      schema: { params: QUEUE_PARAMS, body: jobRequestSchema, headers: enqueueHeaders },
      bodyLimit: ctx.maxBodyBytes,
      bodyTooLargeAdvice: "send ids and load documents in the worker",
      responses: {
        202: {
          description: "Queued.",
          schema: acceptedSchema,
          headers: { ...acceptedHeaders, "Idempotent-Replayed": { description: "true when this answers a retried request.", schema: Type.String() } },
        },
        200: { description: "A job with this options.jobId already exists; nothing was added.", schema: acceptedSchema, headers: acceptedHeaders },
        ...errors,
        409: problemResponse(
          "options.jobId is held by a job of another queue (ids are unique across queues; choose another id), or the job of this Idempotency-Key was deleted while the request ran (retry).",
        ),
      },
      handler: enqueueOne,
    },
    {
      method: "POST",
      url: "/queues/:queue/jobs/bulk",
      operationId: "enqueueJobs",
      summary: "Add many jobs in one atomic batch",
      description:
        "All jobs are stored, or (when one is invalid) none. With Idempotency-Key the whole batch is idempotent and all or nothing: a retry stores nothing new, and a request refused with 422 (the key used with another body) stores nothing, even when it races the first.",
      tags: ["jobs"],
      access: "enqueue",
      schema: {
        params: QUEUE_PARAMS,
        headers: enqueueHeaders,
        body: bulkBodySchema(ctx.maxBulkJobs),
      },
      bodyLimit: ctx.maxBulkBodyBytes,
      bodyTooLargeAdvice: "split the jobs across several requests, or send ids and load documents in the worker",
      responses: {
        202: {
          description: "Queued; one entry per job, in request order.",
          schema: bulkAcceptedSchema,
          headers: { "Retry-After": acceptedHeaders["Retry-After"] },
        },
        ...errors,
        409: problemResponse(
          "An options.jobId is held by a job of another queue (ids are unique across queues; choose another id; nothing of the batch is stored), or the jobs of this Idempotency-Key were deleted while the request ran (retry).",
        ),
      },
      handler: enqueueBulk,
    },
  ];
}
