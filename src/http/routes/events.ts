/**
 * `GET /v1/events`: the queue event log as Server-Sent Events, for every process's jobs (the
 * HTTP face of `queue.events()`). Filters narrow it; `Last-Event-ID` (or `?lastEventId=`)
 * resumes after an event, so a reconnecting EventSource misses nothing the log still holds.
 */
import type { FastifyReply, FastifyRequest } from "fastify";
import { checkName } from "../../core/spec.js";
import { InvalidInputError } from "../../core/errors.js";
import { QUEUE_EVENT_TYPES, type QueueEvent, type QueueEventType } from "../../core/queue-events.js";
import { followEvents } from "../../producer/events.js";
import type { HttpContext, RouteSpec } from "../context.js";
import { HttpProblem } from "../problem.js";
import { authResponses, problemResponse } from "../schemas.js";
import type { OpenStream } from "../sse.js";
import type { Json } from "../../core/json.js";
import { Nullable, StringEnum, Type, type Static } from "../typed-schema.js";
import { iso } from "../views.js";
import { shown } from "../../core/checks.js";

/** Comma-separated values of one query parameter, each checked. */
function list<T extends string>(value: string | undefined, field: string, check: (v: string) => T): T[] | undefined {
  if (value === undefined) return undefined;
  const items = value
    .split(",")
    .map((v) => v.trim())
    .filter((v) => v !== "");
  if (items.length === 0 || items.length > 100)
    throw new HttpProblem(400, "bad-request", `${field} takes 1 to 100 comma-separated values; got ${shown(value.slice(0, 100))}`);
  return items.map((v) => {
    try {
      return check(v);
    } catch (error) {
      throw new HttpProblem(400, "bad-request", `${field}: ${error instanceof Error ? error.message : String(error)}`);
    }
  });
}

function eventType(v: string): QueueEventType {
  if (!(QUEUE_EVENT_TYPES as readonly string[]).includes(v))
    throw new InvalidInputError(`unknown event type ${JSON.stringify(v.slice(0, 40))}; use ${QUEUE_EVENT_TYPES.join(", ")}`);
  return v as QueueEventType;
}

const eventsQuery = Type.Object({
  queue: Type.Optional(Type.String({ maxLength: 13_000, description: "Only these queues (comma-separated)." })),
  name: Type.Optional(Type.String({ maxLength: 13_000, description: "Only these job names (comma-separated)." })),
  jobId: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: "Only this job's events." })),
  type: Type.Optional(Type.String({ maxLength: 1_000, description: `Only these event types (comma-separated): ${QUEUE_EVENT_TYPES.join(", ")}.` })),
  lastEventId: Type.Optional(
    Type.String({
      maxLength: 8_192,
      description:
        "Resume after this event id (for clients that cannot send the Last-Event-ID header). Ids are short on SQLite and PostgreSQL; on Redis under 4,096 characters whatever the number of queues (longer only in the second after many queues' events).",
    }),
  ),
});
type EventsQuery = Static<typeof eventsQuery>;

/** One event as the stream's `data:` carries it. */
export const queueEventViewSchema = Type.Object(
  {
    id: Type.String({ description: "The event id (also the SSE id:): resume after it." }),
    type: StringEnum(QUEUE_EVENT_TYPES),
    queue: Type.String(),
    name: Type.String(),
    jobId: Type.String(),
    attempt: Type.Integer(),
    at: Nullable(Type.String({ format: "date-time" })),
    data: Nullable(Type.Unsafe<{ [key: string]: Json }>({ type: "object" }), {
      description: "What the event carries by type (the result, the error, the progress value …), or null.",
    }),
  },
  { title: "QueueEvent" },
);
export type QueueEventView = Static<typeof queueEventViewSchema>;

/**
 * The event as sent in `data:`: times as RFC 3339. An error's stack (server file paths, lines of
 * the handler's code) only with `stacks`, an admin key: a read key's view of a job carries none
 * either (views.ts), so the event stream does not give it what the status view withholds.
 */
function eventData(e: QueueEvent, stacks: boolean): QueueEventView {
  const data = stacks ? e.data : withoutStack(e.data);
  return { id: e.id, type: e.type, queue: e.queue, name: e.name, jobId: e.jobId, attempt: e.attempt, at: iso(e.at), data };
}

/** `data` with its `error.stack` (retrying, dead) set to null; anything else as it is. */
function withoutStack(data: QueueEvent["data"]): QueueEvent["data"] {
  const error = data?.error;
  if (typeof error !== "object" || error === null || Array.isArray(error) || !("stack" in error) || error.stack === null) return data;
  return { ...data, error: { ...error, stack: null } };
}

export function eventRoutes(ctx: HttpContext): RouteSpec[] {
  async function stream(request: FastifyRequest, reply: FastifyReply) {
    const q = request.query as EventsQuery;
    const stacks = ctx.principal(request).scopes.has("admin");
    const queues = list(q.queue, "queue", (v) => checkName("queue", v));
    const names = list(q.name, "name", (v) => checkName("job", v));
    const types = list(q.type, "type", eventType);
    const header = request.headers["last-event-id"];
    const after = typeof header === "string" && header !== "" ? header : q.lastEventId;
    const { backend } = ctx;
    const readEvents = backend.readEvents?.bind(backend);
    if (backend.capabilities.eventLog !== true || !readEvents) {
      throw new HttpProblem(
        501,
        "no-event-log",
        `this server's store (${backend.description}) keeps no event log (on SQLite, PostgreSQL or Redis: its table prefix's, schema's or key prefix's log is off, eventLog: false); follow one job with GET /jobs/{id}/events instead`,
      );
    }
    if (after !== undefined) {
      // Refuse a cursor this store never issued now, while a 400 can still be sent.
      try {
        await readEvents(after, 1);
      } catch (error) {
        if (error instanceof InvalidInputError) throw new HttpProblem(400, "bad-request", error.message);
        throw error;
      }
    }
    if (ctx.streams.size >= ctx.sse.maxStreams) {
      throw new HttpProblem(503, "too-many-streams", `this server already serves ${ctx.sse.maxStreams} event streams; retry later`, {
        headers: { "retry-after": "5" },
      });
    }
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(reply.getHeaders())) if (v !== undefined) headers[k] = String(v);
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, {
      ...headers,
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache, no-transform",
      connection: "keep-alive",
      "x-accel-buffering": "no",
    });
    res.write(`retry: ${ctx.sse.retryMs}\n\n`);
    const abort = new AbortController();
    const heartbeat = setInterval(() => res.write(`: keep-alive ${new Date().toISOString()}\n\n`), ctx.sse.heartbeatMs);
    let ended = false;
    const close = () => {
      if (ended) return;
      ended = true;
      clearInterval(heartbeat);
      abort.abort();
      ctx.streams.delete(open);
      if (!res.writableEnded) res.end();
    };
    const open: OpenStream = {
      get ended() {
        return ended;
      },
      close,
    };
    ctx.streams.add(open);
    request.raw.on("close", close);
    res.on("error", close);
    void (async () => {
      try {
        for await (const e of followEvents(backend, { after, queues, names, jobId: q.jobId, types, signal: abort.signal })) {
          res.write(`id: ${e.id}\nevent: ${e.type}\ndata: ${JSON.stringify(eventData(e, stacks))}\n\n`);
        }
      } catch (error) {
        // The client reconnects with the last id it got and resumes there.
        request.log.warn({ err: error }, "event stream ended by a store error");
      } finally {
        close();
      }
    })();
    return reply;
  }

  return [
    {
      method: "GET",
      url: "/events",
      operationId: "streamQueueEvents",
      summary: "Server-Sent Events of every job event, from every process (added, active, progress, completed, retrying, dead, …)",
      description:
        "The store's event log as it grows (SQLite, PostgreSQL and Redis keep one; other stores answer 501). Each event has `id:` (resume with `Last-Event-ID` or `?lastEventId=`), `event:` its type, and `data:` a JSON object. Without a resume id the stream starts with events after the request. Events are kept 24 hours and at most 100 000 by default: a resume id older than that resumes at the oldest event kept.",
      tags: ["events"],
      access: "read",
      schema: { querystring: eventsQuery },
      responses: {
        200: { description: "The event stream.", contentType: "text/event-stream", schema: Type.String() },
        400: problemResponse("A filter or resume id is not valid."),
        ...authResponses(),
        501: problemResponse("The store keeps no event log."),
        503: problemResponse("Too many open event streams; retry later."),
      },
      handler: stream,
    },
  ];
}
