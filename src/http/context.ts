/**
 * What every route needs, built once per plugin registration, and the route table format that
 * both the Fastify registration and the OpenAPI document read.
 */
import type { FastifyReply, FastifyRequest } from "fastify";
import type { Backend, EnqueueResult } from "../backend/contract.js";
import type { JobSpec } from "../core/job.js";
import type { JobDefinition } from "../core/define.js";
import type { Principal, Scope, StreamTokens } from "./auth.js";
import type { IdDeriver } from "./derived-ids.js";
import type { DurationEstimator } from "./estimate.js";
import type { JsonSchema } from "./schema.js";
import type { JobWatcher, OpenStream } from "./sse.js";
import type { WebhookDispatcher } from "./webhooks.js";

export interface HttpContext {
  backend: Backend;
  /** Stores jobs: `backend.enqueue`, through the group-commit batcher unless it is off. */
  enqueue(specs: readonly JobSpec[]): Promise<EnqueueResult[]>;
  /** Stores a batch of one queue whole or not at all (`EnqueueOptions.allOrNothing`), with the same telemetry. */
  enqueueAllOrNothing(specs: readonly JobSpec[]): Promise<EnqueueResult[]>;
  /** Full path prefix of the API as clients see it, e.g. "/v1" or "/jobs-api/v1". No trailing slash. */
  basePath: string;
  /** Registered job definitions by name (empty: any job name is accepted). */
  jobs: ReadonlyMap<string, JobDefinition<unknown>>;
  /** Refuse job names that are not registered. */
  strictJobNames: boolean;
  estimator: DurationEstimator;
  maxBodyBytes: number;
  maxBulkBodyBytes: number;
  maxBulkJobs: number;
  webhooks: WebhookDispatcher | null;
  tokens: StreamTokens;
  /** Derives the job ids of Idempotency-Key requests. */
  derivedIds: IdDeriver;
  streamTokenTtlMs: number;
  watcher: JobWatcher;
  streams: Set<OpenStream>;
  sse: { heartbeatMs: number; retryMs: number; maxStreams: number };
  /** Who made this request (set by the auth hook). */
  principal(request: FastifyRequest): Principal;
}

export interface ResponseSpec {
  description: string;
  schema?: JsonSchema;
  /** Default application/json. */
  contentType?: string;
  headers?: Record<string, { description: string; schema: JsonSchema }>;
}

/**
 * Who may call a route: a scope, "public" (no credentials), or "events" (read scope through a
 * key, or the job's stream token in `?access_token=`).
 */
export type RouteAccess = Scope | "public" | "events";

export interface RouteSpec {
  method: "GET" | "POST" | "PUT" | "DELETE";
  /** Relative to the base path, Fastify syntax (`/jobs/:id`). */
  url: string;
  operationId: string;
  summary: string;
  description?: string;
  tags: string[];
  access: RouteAccess;
  schema: {
    params?: JsonSchema;
    querystring?: JsonSchema;
    body?: JsonSchema;
    headers?: JsonSchema;
  };
  responses: Record<number, ResponseSpec>;
  /** Largest accepted body in bytes; default 1 MiB. */
  bodyLimit?: number;
  /** What to do instead, told by the 413 of a body over `bodyLimit`; default none (the limit alone). */
  bodyTooLargeAdvice?: string;
  handler(request: FastifyRequest, reply: FastifyReply): Promise<unknown>;
}
