/** One job: status, events (SSE), stream tokens, cancel and replay. */
import type { FastifyReply, FastifyRequest } from "fastify";
import { TERMINAL_STATES, type JobRecord } from "../../core/job.js";
import type { HttpContext, RouteSpec } from "../context.js";
import { HttpProblem } from "../problem.js";
import { authResponses, JOB_PARAMS, JOB_QUERY, JOB_QUEUE_QUERY_PROPERTY, problemResponse, type JobParams, type JobQuery } from "../schemas.js";
import { EventCursor, runEventStream, type OpenStream } from "../sse.js";
import { flowViewSchema, jobLinks, jobStateSchema, jobViewSchema, toFlowView, toJobView, type JobLinks } from "../views.js";
import { jobLogViewSchema, toJobLogView } from "../log-view.js";
import { JOB_LOG_MAX_LINE_LENGTH, JOB_LOG_MAX_LINES } from "../../core/job-log.js";
import { principalOf } from "./enqueue.js";
import { Type, type Static } from "../typed-schema.js";

const eventsQuery = Type.Object({
  queue: Type.Optional(JOB_QUEUE_QUERY_PROPERTY.queue),
  access_token: Type.Optional(Type.String({ maxLength: 2048, description: "A stream token for this job." })),
  lastEventId: Type.Optional(Type.String({ maxLength: 64, description: "Same as the Last-Event-ID header." })),
});
type EventsQuery = Static<typeof eventsQuery>;

const eventsHeaders = Type.Object({ "last-event-id": Type.Optional(Type.String({ maxLength: 64 })) });

const tokenResponse = Type.Object({ token: Type.String(), expiresAt: Type.String({ format: "date-time" }), eventsUrl: Type.String() });

const cancelResponse = Type.Object({
  jobId: Type.String(),
  state: Type.Unsafe<"cancelled">({ const: "cancelled" }),
  previousState: jobStateSchema,
  detail: Type.String(),
});

const replayResponse = Type.Object({
  jobId: Type.Optional(Type.String()),
  state: Type.Optional(Type.Unsafe<"waiting">({ const: "waiting" })),
  links: Type.Optional(Type.Unsafe<JobLinks>({ type: "object" })),
});

function notFound(id: string): HttpProblem {
  return new HttpProblem(404, "job-not-found", `no job with id ${JSON.stringify(id)}: it never existed, or it was deleted after its retention period`);
}

/**
 * The one job a by-id request means: `?queue=` when given. Every later call of the request names
 * the queue of the job found here, so the job whose owner was checked is the job acted on.
 */
async function findJob(ctx: HttpContext, request: FastifyRequest): Promise<JobRecord> {
  const { id } = request.params as JobParams;
  const { queue } = request.query as JobQuery;
  const grant = ctx.principal(request).stream;
  if (grant) {
    const refused = (detail: string) => new HttpProblem(401, "unauthorized", detail, { headers: { "www-authenticate": 'Bearer realm="conveyor"' } });
    if (queue !== undefined && queue !== grant.queue) {
      throw refused("the access_token was issued for the job with this id in another queue than ?queue= names; use the eventsUrl that came with the token");
    }
    // A stream token opens the job it was issued for, not a later one that reuses its id.
    const job = await ctx.backend.get(id, grant.queue);
    if (!job || job.queue !== grant.queue || job.createdAt !== grant.createdAt) {
      throw refused("the access_token was issued for an earlier job with this id, which no longer exists; get a new one from POST /jobs/{id}/events/token");
    }
    return job;
  }
  const job = await ctx.backend.get(id, queue);
  if (!job) throw notFound(id);
  return job;
}

export function jobRoutes(ctx: HttpContext): RouteSpec[] {
  async function status(request: FastifyRequest, reply: FastifyReply) {
    const job = await findJob(ctx, request);
    return reply.header("cache-control", "no-store").send(toJobView(job, ctx.basePath));
  }

  async function flow(request: FastifyRequest, reply: FastifyReply) {
    const job = await findJob(ctx, request);
    const info = await ctx.backend.flow(job.id, job.queue);
    if (!info) throw notFound(job.id);
    return reply.header("cache-control", "no-store").send(toFlowView(job, info, ctx.basePath));
  }

  async function logs(request: FastifyRequest, reply: FastifyReply) {
    const job = await findJob(ctx, request);
    const lines = await ctx.backend.logs(job.id, job.queue);
    return reply.header("cache-control", "no-store").send(toJobLogView(job, lines));
  }

  async function events(request: FastifyRequest, reply: FastifyReply) {
    const job = await findJob(ctx, request);
    const id = job.id;
    const query = request.query as EventsQuery;
    // An empty header is no resume id, as on GET /v1/events.
    const header = request.headers["last-event-id"];
    const lastEventId = typeof header === "string" && header !== "" ? header : (query.lastEventId ?? null);
    const unusable = lastEventId === null ? null : EventCursor.problemWith(lastEventId, job);
    if (unusable !== null) throw new HttpProblem(400, "bad-request", unusable);
    const cursor = new EventCursor(lastEventId);
    // A client that already saw the end (EventSource reconnects after every close): 204 tells
    // it to stop reconnecting.
    if (TERMINAL_STATES.includes(job.state) && lastEventId !== null) {
      const probe = new EventCursor(lastEventId);
      if (probe.advance(job).events.length === 0) return reply.code(204).send();
    }
    if (ctx.streams.size >= ctx.sse.maxStreams) {
      throw new HttpProblem(
        503,
        "too-many-streams",
        `this server already serves ${ctx.sse.maxStreams} event streams; poll ${jobLinks(ctx.basePath, id, job.queue).self} instead, or retry later`,
        {
          headers: { "retry-after": "5" },
        },
      );
    }
    // Headers set by hooks (CORS) must go out with the hijacked response.
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(reply.getHeaders())) if (v !== undefined) headers[k] = String(v);
    reply.hijack();
    let stream: OpenStream | null = null;
    stream = runEventStream({
      req: request.raw,
      res: reply.raw,
      headers,
      job,
      cursor,
      watcher: ctx.watcher,
      settings: ctx.sse,
      onEnd: () => {
        if (stream) ctx.streams.delete(stream);
      },
    });
    // A job that was already finished got its events and the stream ended at once.
    if (!stream.ended) ctx.streams.add(stream);
    return reply;
  }

  async function token(request: FastifyRequest, reply: FastifyReply) {
    const job = await findJob(ctx, request);
    const { token, expiresAt } = ctx.tokens.issue(
      { jobId: job.id, queue: job.queue, createdAt: job.createdAt },
      ctx.principal(request).id,
      ctx.streamTokenTtlMs,
    );
    const events = jobLinks(ctx.basePath, job.id, job.queue).events;
    return reply
      .header("cache-control", "no-store")
      .send({ token, expiresAt: new Date(expiresAt).toISOString(), eventsUrl: `${events}&access_token=${encodeURIComponent(token)}` } satisfies Static<
        typeof tokenResponse
      >);
  }

  async function cancel(request: FastifyRequest, reply: FastifyReply) {
    const principal = ctx.principal(request);
    const job = await findJob(ctx, request);
    const id = job.id;
    if (!principal.scopes.has("admin") && principalOf(job) !== principal.id) {
      throw new HttpProblem(403, "forbidden", "only an admin key, or the key that added the job, may cancel it");
    }
    const outcome = await ctx.backend.cancel(id, job.queue);
    if (outcome === "not-found") throw notFound(id);
    if (outcome === "already-finished") {
      const now = await ctx.backend.get(id, job.queue);
      throw new HttpProblem(409, "job-finished", `job ${id} already finished (${now?.state ?? job.state}); there is nothing to cancel`, {
        extensions: { state: now?.state ?? job.state },
      });
    }
    return reply.send({
      jobId: id,
      state: "cancelled",
      previousState: job.state,
      detail:
        job.state === "active"
          ? "the job was running: its worker aborts the handler's signal at its next heartbeat, and any result it reports is refused"
          : "the job will not run",
    } satisfies Static<typeof cancelResponse>);
  }

  async function replay(request: FastifyRequest, reply: FastifyReply) {
    const found = await findJob(ctx, request);
    const id = found.id;
    const outcome = await ctx.backend.replay(id, found.queue);
    if (outcome === "not-found") throw notFound(id);
    if (outcome === "not-dead") {
      const job = await ctx.backend.get(id, found.queue);
      throw new HttpProblem(409, "job-not-dead", `job ${id} is ${job?.state ?? "not dead"}; only dead jobs can be replayed`, {
        extensions: { state: job?.state ?? null },
      });
    }
    return reply.send({ jobId: id, state: "waiting", links: jobLinks(ctx.basePath, id, found.queue) } satisfies Static<typeof replayResponse>);
  }

  const jobNotFound = problemResponse("No such job (never existed, or deleted after its retention period).");
  const ambiguous = problemResponse("The id is held by several queues (Redis keeps ids per queue): add ?queue=.");

  return [
    {
      method: "GET",
      url: "/jobs/:id",
      operationId: "getJob",
      summary: "A job's status: state, progress, result, error, attempts, timings",
      tags: ["jobs"],
      access: "read",
      schema: { params: JOB_PARAMS, querystring: JOB_QUERY },
      responses: { 200: { description: "The job.", schema: jobViewSchema }, ...authResponses(), 404: jobNotFound, 409: ambiguous },
      handler: status,
    },
    {
      method: "GET",
      url: "/jobs/:id/flow",
      operationId: "getJobFlow",
      summary: "A job's flow: its parent, and its children with their states and outcomes",
      description:
        "For a job added with a flow (queue.addFlow): the parent's children in the order they were added, each with its state (its outcome once settled), result or error; and a child's parent. A job outside any flow answers parent null and no children.",
      tags: ["jobs"],
      access: "read",
      schema: { params: JOB_PARAMS, querystring: JOB_QUERY },
      responses: { 200: { description: "The flow around the job.", schema: flowViewSchema }, ...authResponses(), 404: jobNotFound, 409: ambiguous },
      handler: flow,
    },
    {
      method: "GET",
      url: "/jobs/:id/logs",
      operationId: "getJobLogs",
      summary: "The lines the job's handler wrote with ctx.log, oldest first",
      description: `At most ${JOB_LOG_MAX_LINES} lines per job over all its attempts (the oldest are dropped beyond), each at most ${JOB_LOG_MAX_LINE_LENGTH} characters.`,
      tags: ["jobs"],
      access: "read",
      schema: { params: JOB_PARAMS, querystring: JOB_QUERY },
      responses: { 200: { description: "The job's log.", schema: jobLogViewSchema }, ...authResponses(), 404: jobNotFound, 409: ambiguous },
      handler: logs,
    },
    {
      method: "GET",
      url: "/jobs/:id/events",
      operationId: "streamJobEvents",
      summary: "Server-Sent Events of a job's state changes and progress",
      description:
        "Events: `state` (data: { jobId, seq, state, reason, attempt, at, error?, result? }) for every state change, `progress` (data: { jobId, attempt, progress }), `gone` when the job was deleted. " +
        "Resumable: send Last-Event-ID (EventSource does) or ?lastEventId=. Heartbeat comments every 15 s. The stream ends after a terminal state; reconnecting after that answers 204. " +
        "Authenticate with Authorization: Bearer <key> (read scope), or — for browsers, whose EventSource cannot send headers — with ?access_token= from POST /jobs/{id}/events/token.",
      tags: ["jobs"],
      access: "events",
      schema: {
        params: JOB_PARAMS,
        querystring: eventsQuery,
        headers: eventsHeaders,
      },
      responses: {
        200: { description: "The event stream.", contentType: "text/event-stream", schema: Type.String() },
        204: { description: "The job finished and the client has seen every event: stop reconnecting." },
        400: problemResponse("Last-Event-ID (or ?lastEventId=) is not an event id this stream sent for this job; reconnect without it."),
        ...authResponses(),
        404: jobNotFound,
        409: ambiguous,
        503: problemResponse("Too many open streams on this server; poll instead."),
      },
      handler: events,
    },
    {
      method: "POST",
      url: "/jobs/:id/events/token",
      operationId: "createStreamToken",
      summary: "A short-lived token that lets a browser open this job's event stream",
      description: "Call it from your backend (read scope) and give the browser eventsUrl: new EventSource(eventsUrl). The token is valid for this job only.",
      tags: ["jobs"],
      access: "read",
      schema: { params: JOB_PARAMS, querystring: JOB_QUERY },
      responses: {
        200: {
          description: "The token.",
          schema: tokenResponse,
        },
        ...authResponses(),
        404: jobNotFound,
        409: ambiguous,
      },
      handler: token,
    },
    {
      method: "DELETE",
      url: "/jobs/:id",
      operationId: "cancelJob",
      summary: "Cancel a job",
      description:
        "A waiting or scheduled job never runs. A running job is marked cancelled at once; the AbortSignal of its handler fires in whichever worker process holds it, at that worker's next heartbeat, and its result is refused. Needs admin, or enqueue for jobs added with the same key.",
      tags: ["jobs"],
      access: "enqueue",
      schema: { params: JOB_PARAMS, querystring: JOB_QUERY },
      responses: {
        200: {
          description: "Cancelled.",
          schema: cancelResponse,
        },
        ...authResponses(),
        404: jobNotFound,
        409: problemResponse("The job already finished, or its id is held by several queues (add ?queue=)."),
      },
      handler: cancel,
    },
    {
      method: "POST",
      url: "/jobs/:id/replay",
      operationId: "replayJob",
      summary: "Replay a dead job",
      description: "Moves a dead job back to waiting with a fresh set of attempts; its history is kept.",
      tags: ["dead letters"],
      access: "admin",
      schema: { params: JOB_PARAMS, querystring: JOB_QUERY },
      responses: {
        200: {
          description: "Replayed.",
          schema: replayResponse,
        },
        ...authResponses(),
        404: jobNotFound,
        409: problemResponse("The job is not dead, or its id is held by several queues (add ?queue=)."),
      },
      handler: replay,
    },
  ];
}
