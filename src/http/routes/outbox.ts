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
import { authResponses, JOB_ID_SCHEMA, JOB_PARAMS, problemResponse } from "../schemas.js";

const deadEventSchema = {
  type: "object" as const,
  required: ["id", "topic", "key", "payload", "headers", "createdAt", "failedAt", "target", "error"],
  properties: {
    id: { type: "string" as const, description: "The outbox id (the message id the target would carry)." },
    topic: { type: "string" as const },
    key: { type: ["string", "null"] as const },
    payload: { description: "The event's payload (JSON)." },
    headers: { type: "object" as const, additionalProperties: { type: "string" as const } },
    createdAt: { type: "string" as const, format: "date-time" },
    failedAt: { type: "string" as const, format: "date-time", description: "When it was set aside." },
    target: { type: "string" as const, description: "The target that refused it." },
    error: { type: "string" as const, description: "Why." },
  },
};

function view(event: DeadOutboxEvent) {
  return {
    id: event.id,
    topic: event.topic,
    key: event.key,
    payload: JSON.parse(event.payloadText) as unknown,
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
      schema: {
        querystring: { type: "object", additionalProperties: false, properties: { limit: { type: "integer", minimum: 1, maximum: 1000, default: 50 } } },
      },
      responses: {
        200: {
          description: "Set-aside events and how many there are.",
          schema: {
            type: "object",
            required: ["events", "total"],
            properties: { events: { type: "array", items: deadEventSchema }, total: { type: "integer" } },
          },
        },
        400: problemResponse("A query parameter is invalid."),
        ...authResponses(),
      },
      handler: async (request: FastifyRequest, reply: FastifyReply) => {
        const { limit } = request.query as { limit?: number };
        const [events, total] = await Promise.all([dead.list({ limit: limit ?? 50 }), dead.count()]);
        return reply.send({ events: events.map(view), total });
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
        const { id } = request.params as { id: string };
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
      schema: {
        body: {
          type: "object",
          additionalProperties: false,
          required: ["ids"],
          properties: { ids: { type: "array", minItems: 1, maxItems: 1000, items: JOB_ID_SCHEMA, description: "The events to replay." } },
        },
      },
      responses: {
        200: {
          description: "Which ids were replayed, and which were not set aside.",
          schema: {
            type: "object",
            required: ["replayed", "missing"],
            properties: { replayed: { type: "array", items: { type: "string" } }, missing: { type: "array", items: { type: "string" } } },
          },
        },
        400: problemResponse("The body is invalid."),
        ...authResponses(),
      },
      handler: async (request: FastifyRequest, reply: FastifyReply) => {
        const { ids } = request.body as { ids: string[] };
        const replayed = await dead.replay(ids);
        return reply.send({ replayed, missing: ids.filter((id) => !replayed.includes(id)) });
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
        const { id } = request.params as { id: string };
        const removed = await dead.remove([id]);
        if (removed.length === 0) throw notFound(id);
        return reply.code(204).send();
      },
    },
  ];
}
