/**
 * The outbox's set-aside events (events a relay's target refused for good): list, show, replay
 * back into the outbox, delete. Registered when the plugin is given `outbox` (an
 * OutboxDeadLetters of the database the relays read). Admin scope: payloads are business data.
 */
import type { FastifyReply, FastifyRequest } from "fastify";
import type { DeadOutboxEvent } from "../../outbox/event.js";
import type { OutboxDeadLetters } from "../../outbox/dead.js";
import type { RouteSpec } from "../context.js";
import { HttpProblem } from "../problem.js";
import type { Json } from "../../core/json.js";
import { authResponses, JOB_PARAMS, STORED_JOB_ID_SCHEMA, problemResponse, type JobParams } from "../schemas.js";
import { AnyJson, Nullable, Type, type Static } from "../typed-schema.js";

const deadEventSchema = Type.Object(
  {
    id: Type.String({ description: "The outbox id (the message id the target would carry)." }),
    topic: Type.String(),
    key: Nullable(Type.String()),
    payload: AnyJson({ description: "The event's payload (JSON)." }),
    headers: Type.Unsafe<Record<string, string>>({ type: "object", additionalProperties: { type: "string" } }),
    createdAt: Type.String({ format: "date-time" }),
    failedAt: Type.String({ format: "date-time", description: "When it was set aside." }),
    target: Type.String({ description: "The target that refused it." }),
    error: Type.String({ description: "Why." }),
  },
  { title: "DeadOutboxEvent" },
);
type DeadEventView = Static<typeof deadEventSchema>;

const listQuery = Type.Object(
  { limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 50, description: "Events per page (default 50)." })) },
  { additionalProperties: false },
);
type ListQuery = Static<typeof listQuery>;

const listResponse = Type.Object({ events: Type.Array(deadEventSchema), total: Type.Integer() });

const replayBody = Type.Object(
  { ids: Type.Array(STORED_JOB_ID_SCHEMA, { minItems: 1, maxItems: 1000, description: "The events to replay." }) },
  { additionalProperties: false },
);
type ReplayBody = Static<typeof replayBody>;

const replayResponse = Type.Object({ replayed: Type.Array(Type.String()), missing: Type.Array(Type.String()) });

function view(event: DeadOutboxEvent): DeadEventView {
  return {
    id: event.id,
    topic: event.topic,
    key: event.key,
    payload: JSON.parse(event.payloadText) as Json,
    headers: event.headers,
    createdAt: new Date(event.createdAt).toISOString(),
    failedAt: new Date(event.failedAt).toISOString(),
    target: event.target,
    error: event.error,
  };
}

export function outboxRoutes(dead: OutboxDeadLetters): RouteSpec[] {
  const notFound = (id: string) =>
    new HttpProblem(404, "outbox-event-not-found", `no set-aside outbox event ${JSON.stringify(id)}: it was replayed or deleted, or never set aside`);
  return [
    {
      method: "GET",
      url: "/outbox/dead",
      operationId: "listOutboxDead",
      summary: "Outbox events a relay's target refused for good, newest first",
      tags: ["outbox"],
      access: "admin",
      schema: { querystring: listQuery },
      responses: {
        200: {
          description: "Set-aside events and how many there are.",
          schema: listResponse,
        },
        400: problemResponse("A query parameter is invalid."),
        ...authResponses(),
      },
      handler: async (request: FastifyRequest, reply: FastifyReply) => {
        const { limit } = request.query as ListQuery;
        const [events, total] = await Promise.all([dead.list({ limit: limit ?? 50 }), dead.count()]);
        return reply.send({ events: events.map(view), total } satisfies Static<typeof listResponse>);
      },
    },
    {
      method: "GET",
      url: "/outbox/dead/:id",
      operationId: "getOutboxDead",
      summary: "One set-aside outbox event with its payload and the refusal",
      tags: ["outbox"],
      access: "admin",
      schema: { params: JOB_PARAMS },
      responses: { 200: { description: "The event.", schema: deadEventSchema }, 404: problemResponse("No such set-aside event."), ...authResponses() },
      handler: async (request: FastifyRequest, reply: FastifyReply) => {
        const { id } = request.params as JobParams;
        const event = await dead.get(id);
        if (event === null) throw notFound(id);
        return reply.send(view(event));
      },
    },
    {
      method: "POST",
      url: "/outbox/dead/replay",
      operationId: "replayOutboxDead",
      summary: "Put set-aside events back into the outbox (behind their key's waiting events)",
      tags: ["outbox"],
      access: "admin",
      schema: { body: replayBody },
      responses: {
        200: {
          description: "Which ids were replayed, and which were not set aside.",
          schema: replayResponse,
        },
        400: problemResponse("The body is invalid."),
        ...authResponses(),
      },
      handler: async (request: FastifyRequest, reply: FastifyReply) => {
        const { ids } = request.body as ReplayBody;
        const replayed = await dead.replay(ids);
        const done = new Set(replayed);
        return reply.send({ replayed, missing: ids.filter((id) => !done.has(id)) } satisfies Static<typeof replayResponse>);
      },
    },
    {
      method: "DELETE",
      url: "/outbox/dead/:id",
      operationId: "deleteOutboxDead",
      summary: "Delete a set-aside outbox event for good",
      tags: ["outbox"],
      access: "admin",
      schema: { params: JOB_PARAMS },
      responses: { 204: { description: "Deleted." }, 404: problemResponse("No such set-aside event."), ...authResponses() },
      handler: async (request: FastifyRequest, reply: FastifyReply) => {
        const { id } = request.params as JobParams;
        const removed = await dead.remove([id]);
        if (removed.length === 0) throw notFound(id);
        return reply.code(204).send();
      },
    },
  ];
}
