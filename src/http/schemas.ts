/**
 * Request schemas shared by several routes, and the error document: TypeBox schemas
 * (typed-schema.ts), each giving the JSON Schema and, by `Static`, the type handlers read.
 */
import { KEY_TEXT_MAX_LENGTH, KEY_TEXT_PATTERN, STORED_KEY_TEXT_PATTERN } from "../core/key-text.js";
import type { ResponseSpec } from "./context.js";
import { StringEnum, Type, type Static } from "./typed-schema.js";

/**
 * Queue and job names: 1-128 characters of letters, digits and `. _ : - /`, starting with a
 * letter or digit (the rule of `checkName` in core/spec.ts, which still has the last word).
 */
export const NAME_SCHEMA = Type.String({
  pattern: "^[A-Za-z0-9][A-Za-z0-9._:\\-/]{0,127}$",
  description: "1-128 characters of letters, digits and . _ : - /, starting with a letter or digit.",
});

/**
 * Job ids: 1-255 characters, no control characters and no lone surrogate halves (stores either
 * refuse them, as PostgreSQL does NUL, or turn them into U+FFFD, which another id may spell).
 * The rule of core/key-text.ts, which `checkJobId` applies too.
 */
export const JOB_ID_SCHEMA = Type.String({
  minLength: 1,
  maxLength: KEY_TEXT_MAX_LENGTH,
  pattern: KEY_TEXT_PATTERN,
  description: "1-255 characters; no control characters, no unpaired surrogates.",
});

/**
 * A job id to look up (a path parameter, a replay's ids, a listing's cursor): the rule of ids
 * already stored (STORED_KEY_TEXT_PATTERN), so a job whose id a later rule refuses can still be
 * read, cancelled and replayed; new ids take JOB_ID_SCHEMA.
 */
export const STORED_JOB_ID_SCHEMA = Type.String({
  minLength: 1,
  maxLength: KEY_TEXT_MAX_LENGTH,
  pattern: STORED_KEY_TEXT_PATTERN,
  description: "1-255 characters; no C0 control characters or DEL, no unpaired surrogates.",
});

export const QUEUE_PARAMS = Type.Object({ queue: NAME_SCHEMA });
export type QueueParams = Static<typeof QUEUE_PARAMS>;

export const JOB_PARAMS = Type.Object({ id: STORED_JOB_ID_SCHEMA });
export type JobParams = Static<typeof JOB_PARAMS>;

/** `?queue=` of the routes that take a job id: which queue's job is meant. */
export const JOB_QUEUE_QUERY_PROPERTY = {
  queue: Type.String({
    ...NAME_SCHEMA,
    description:
      "The job's queue (the job's links carry it). Optional where ids name one job store-wide (SQLite, PostgreSQL); on Redis ids are unique per queue, and an id held by several queues is refused with 409 until the queue is given.",
  }),
};

export const JOB_QUERY = Type.Object({ queue: Type.Optional(JOB_QUEUE_QUERY_PROPERTY.queue) });
export type JobQuery = Static<typeof JOB_QUERY>;

export const PAGE_QUERY_PROPERTIES = {
  limit: Type.Integer({ minimum: 1, maximum: 1000, default: 50, description: "Jobs per page (default 50)." }),
  offset: Type.Integer({ minimum: 0, maximum: 1_000_000, default: 0, description: "Jobs to skip (default 0)." }),
};

export const problemSchema = Type.Object(
  {
    type: Type.String({ description: "urn:conveyor:problem:<slug>, stable for clients to branch on." }),
    title: Type.String(),
    status: Type.Integer(),
    detail: Type.String({ description: "What went wrong and what to do about it." }),
    errors: Type.Optional(
      Type.Array(
        Type.Object({
          in: StringEnum(["body", "querystring", "params", "headers"] as const),
          pointer: Type.String({ description: "JSON Pointer into that part of the request." }),
          detail: Type.String(),
        }),
      ),
    ),
  },
  { title: "Problem", description: "RFC 9457 problem details." },
);

export function problemResponse(description: string): ResponseSpec {
  return { description, schema: problemSchema, contentType: "application/problem+json" };
}

/** Answers every authenticated route may give. */
export function authResponses(): Record<number, ResponseSpec> {
  return {
    401: problemResponse("No API key, or an unknown one. Send Authorization: Bearer <key>."),
    403: problemResponse("The key lacks the scope this route needs."),
  };
}

/** Sorted-keys JSON: the same value always gives the same text (request fingerprints). */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  const obj = value as Record<string, unknown>;
  return `{${Object.keys(obj)
    .sort()
    .filter((k) => obj[k] !== undefined)
    .map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`)
    .join(",")}}`;
}
