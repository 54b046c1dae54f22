/**
 * Errors as HTTP answers: RFC 9457 problem details (`application/problem+json`).
 *
 * Every error body has `type` (a stable URN naming the problem), `title`, `status` and a
 * `detail` that says what to do. Validation problems add `errors`: one entry per field, with
 * `in` (body, querystring, params, headers) and a JSON Pointer.
 */
import type { FastifyReply } from "fastify";
import type { problemSchema } from "./schemas.js";
import type { Static } from "./typed-schema.js";

export const PROBLEM_CONTENT_TYPE = "application/problem+json; charset=utf-8";

/** A problem document, as `problemSchema` (schemas.ts) defines and publishes it. */
export type Problem = Static<typeof problemSchema> & {
  /** Extra members of some problems (e.g. `state` of a job that cannot be cancelled). */
  [extension: string]: unknown;
};

/** A field-level error of a 400 or 422 answer: `in` the part of the request, a JSON Pointer into it, and what is wrong. */
export type FieldError = NonNullable<Problem["errors"]>[number];

const TITLES: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  406: "Not Acceptable",
  408: "Request Timeout",
  409: "Conflict",
  413: "Content Too Large",
  414: "URI Too Long",
  415: "Unsupported Media Type",
  422: "Unprocessable Content",
  429: "Too Many Requests",
  431: "Request Header Fields Too Large",
  500: "Internal Server Error",
  501: "Not Implemented",
  503: "Service Unavailable",
};

/** An error a route throws to answer with a problem document. */
export class HttpProblem extends Error {
  override name = "HttpProblem";
  readonly errors: FieldError[] | undefined;
  readonly headers: Record<string, string>;
  readonly extensions: Record<string, unknown>;

  constructor(
    readonly status: number,
    /** The slug of `type`, e.g. "idempotency-key-reused". */
    readonly slug: string,
    detail: string,
    options: { errors?: FieldError[]; headers?: Record<string, string>; extensions?: Record<string, unknown> } = {},
  ) {
    super(detail);
    this.errors = options.errors;
    this.headers = options.headers ?? {};
    this.extensions = options.extensions ?? {};
  }

  toJSON(): Problem {
    return problem(this.status, this.slug, this.message, this.errors, this.extensions);
  }
}

export function problem(status: number, slug: string, detail: string, errors?: FieldError[], extensions: Record<string, unknown> = {}): Problem {
  return {
    ...extensions,
    type: `urn:conveyor:problem:${slug}`,
    title: TITLES[status] ?? (status >= 500 ? "Server Error" : "Client Error"),
    status,
    detail,
    ...(errors && errors.length > 0 ? { errors } : {}),
  };
}

export function sendProblem(reply: FastifyReply, p: Problem, headers: Record<string, string> = {}): FastifyReply {
  for (const [k, v] of Object.entries(headers)) void reply.header(k, v);
  return reply.code(p.status).type(PROBLEM_CONTENT_TYPE).send(p);
}
