/** Operations on queues: statistics, listings, pause/resume, dead letters (list, replay, delete). */
import type { FastifyReply, FastifyRequest } from "fastify";
import { JOB_STATES } from "../../core/job.js";
import type { ListFilter, Page } from "../../backend/contract.js";
import type { HttpContext, RouteSpec } from "../context.js";
import { HttpProblem } from "../problem.js";
import { authResponses, NAME_SCHEMA, PAGE_QUERY_PROPERTIES, problemResponse, QUEUE_PARAMS, STORED_JOB_ID_SCHEMA, type QueueParams } from "../schemas.js";
import { deadJobViewSchema, jobViewSchema, queueLimitsSchema, queueViewSchema, toDeadJobView, toJobView, toQueueFlowView, toQueueView } from "../views.js";
import { normalizeQueueLimits } from "../../core/flow.js";
import { Nullable, StringEnum, Type, type Static, type TSchema } from "../typed-schema.js";

/** The query of the job listings: name, page, keyset cursor and creation-time bounds (see Backend.list). */
const pageQuery = Type.Object(
  {
    name: Type.Optional(Type.String({ ...NAME_SCHEMA, description: "Only jobs of this name." })),
    limit: Type.Optional(PAGE_QUERY_PROPERTIES.limit),
    offset: Type.Optional(PAGE_QUERY_PROPERTIES.offset),
    after: Type.Optional(
      Type.String({ ...STORED_JOB_ID_SCHEMA, description: "Keyset cursor: the `next` of the previous page. Deep pages then cost what the first one does." }),
    ),
    before: Type.Optional(
      Type.String({
        ...STORED_JOB_ID_SCHEMA,
        description: "Reverse keyset cursor: the `prev` of the next page, for the page before it (newer jobs). Not with `after`.",
      }),
    ),
    createdFrom: Type.Optional(Type.String({ format: "date-time", description: "Only jobs created at or after this time (RFC 3339)." })),
    createdUntil: Type.Optional(Type.String({ format: "date-time", description: "Only jobs created before this time (RFC 3339)." })),
  },
  { additionalProperties: false },
);
type PageQuery = Static<typeof pageQuery>;

const jobListQuery = Type.Object(
  { ...pageQuery.properties, state: Type.Optional(StringEnum(JOB_STATES, { description: "Only jobs in this state." })) },
  { additionalProperties: false },
);
type JobListQuery = Static<typeof jobListQuery>;

const replayBody = Type.Object(
  {
    ids: Type.Optional(Type.Array(STORED_JOB_ID_SCHEMA, { minItems: 1, maxItems: 1000, description: "The dead jobs to replay." })),
    all: Type.Optional(Type.Boolean({ description: "Replay every dead job of the queue (up to limit)." })),
    name: Type.Optional(Type.String({ ...NAME_SCHEMA, description: "With all: only jobs of this name." })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, description: "With all: at most this many (default 100)." })),
  },
  { additionalProperties: false },
);
type ReplayBody = Static<typeof replayBody>;

const replayResponse = Type.Object({
  replayed: Type.Array(Type.String()),
  notDead: Type.Array(Type.String()),
  notFound: Type.Array(Type.String()),
});

const deadJobParams = Type.Object({ queue: NAME_SCHEMA, id: STORED_JOB_ID_SCHEMA });
type DeadJobParams = Static<typeof deadJobParams>;

const queueListResponse = Type.Object({ queues: Type.Array(queueViewSchema) });

/** A page of a listing: its items, and the cursor of the next page. */
const pageResponse = <T extends TSchema>(items: T) =>
  Type.Object({
    jobs: Type.Array(items),
    limit: Type.Integer(),
    offset: Type.Integer(),
    next: Nullable(Type.String(), { description: "The cursor of the next page (pass it as `after`), or null when this page is the last." }),
    prev: Nullable(Type.String(), { description: "The cursor of the previous page (pass it as `before`), or null when this page is the first." }),
  });

function listArgs(queue: string, q: PageQuery): { filter: ListFilter; page: Page & { limit: number; offset: number } } {
  const filter: ListFilter = { queue, ...(q.name ? { name: q.name } : {}) };
  if (q.createdFrom !== undefined) filter.createdFrom = Date.parse(q.createdFrom);
  if (q.createdUntil !== undefined) filter.createdUntil = Date.parse(q.createdUntil);
  return { filter, page: { limit: q.limit ?? 50, offset: q.offset ?? 0, ...(q.after ? { after: q.after } : {}), ...(q.before ? { before: q.before } : {}) } };
}

/** The next page's cursor: the last job of a full page. */
function nextCursor(jobs: readonly { id: string }[], limit: number): string | null {
  return jobs.length === limit ? jobs[jobs.length - 1]!.id : null;
}

export function queueRoutes(ctx: HttpContext): RouteSpec[] {
  /**
   * A page and the cursors around it: `next` (older jobs) after a full page, or after any page
   * reached by `before` (the cursor's own job is older); `prev` (newer jobs) for a page reached
   * by `after`, or by `before` when one more newer job exists (read one extra to know).
   */
  async function listPage(filter: ListFilter, page: Page & { limit: number }) {
    if (page.before === undefined) {
      const jobs = await ctx.backend.list(filter, page);
      return { jobs, next: nextCursor(jobs, page.limit), prev: page.after !== undefined ? (jobs[0]?.id ?? page.after) : null };
    }
    const read = await ctx.backend.list(filter, { ...page, limit: page.limit + 1 });
    const more = read.length > page.limit;
    const jobs = more ? read.slice(1) : read;
    return { jobs, next: jobs.at(-1)?.id ?? page.before, prev: more ? jobs[0]!.id : null };
  }

  async function listQueues(_request: FastifyRequest, reply: FastifyReply) {
    const stats = await ctx.backend.stats();
    return reply.send({ queues: stats.map(toQueueView) });
  }

  async function getQueue(request: FastifyRequest, reply: FastifyReply) {
    const { queue } = request.params as QueueParams;
    const [stats] = await ctx.backend.stats(queue);
    return reply.send({ ...toQueueView(stats!), flow: toQueueFlowView(await ctx.backend.getQueueFlow(queue)) });
  }

  async function setLimits(request: FastifyRequest, reply: FastifyReply) {
    const { queue } = request.params as QueueParams;
    await ctx.backend.setQueueLimits(queue, normalizeQueueLimits(request.body));
    return getQueue(request, reply);
  }

  async function listJobs(request: FastifyRequest, reply: FastifyReply) {
    const { queue } = request.params as QueueParams;
    const q = request.query as JobListQuery;
    const { filter, page } = listArgs(queue, q);
    const { jobs, next, prev } = await listPage({ ...filter, ...(q.state ? { state: q.state } : {}) }, page);
    return reply.send({ jobs: jobs.map((j) => toJobView(j, ctx.basePath)), limit: page.limit, offset: page.offset, next, prev });
  }

  const setPaused = (paused: boolean) =>
    async function (request: FastifyRequest, reply: FastifyReply) {
      const { queue } = request.params as QueueParams;
      if (paused) await ctx.backend.pause(queue);
      else await ctx.backend.resume(queue);
      const [stats] = await ctx.backend.stats(queue);
      return reply.send(toQueueView(stats!));
    };

  async function listDead(request: FastifyRequest, reply: FastifyReply) {
    const { queue } = request.params as QueueParams;
    const { filter, page } = listArgs(queue, request.query as PageQuery);
    const { jobs, next, prev } = await listPage({ ...filter, state: "dead" }, page);
    return reply.send({ jobs: jobs.map((j) => toDeadJobView(j, ctx.basePath)), limit: page.limit, offset: page.offset, next, prev });
  }

  async function replayDead(request: FastifyRequest, reply: FastifyReply) {
    const { queue } = request.params as QueueParams;
    const body = request.body as ReplayBody;
    if ((body.ids === undefined) === (body.all !== true)) {
      throw new HttpProblem(
        422,
        "invalid-selection",
        'give either "ids" (the dead jobs to replay) or "all": true (every dead job of the queue, up to "limit")',
        {
          errors: [{ in: "body", pointer: "", detail: 'give exactly one of "ids" or "all": true' }],
        },
      );
    }
    let ids: string[];
    if (body.ids) {
      ids = [...new Set(body.ids)];
    } else if (ctx.backend.replayAllDead) {
      // One pass over the dead letters where finding one by id is a scan (RabbitMQ).
      const { replayed } = await ctx.backend.replayAllDead(queue, { ...(body.name ? { name: body.name } : {}), limit: body.limit ?? 100 });
      return reply.send({ replayed, notDead: [], notFound: [] });
    } else {
      const dead = await ctx.backend.list({ queue, state: "dead", ...(body.name ? { name: body.name } : {}) }, { limit: body.limit ?? 100 });
      ids = dead.map((j) => j.id);
    }
    const replayed: string[] = [];
    const notDead: string[] = [];
    const notFound: string[] = [];
    for (const id of ids) {
      // Ids of another queue are reported as not found here: this route acts on one queue.
      const outcome = await ctx.backend.replay(id, queue);
      (outcome === "replayed" ? replayed : outcome === "not-dead" ? notDead : notFound).push(id);
    }
    return reply.send({ replayed, notDead, notFound });
  }

  async function deleteDead(request: FastifyRequest, reply: FastifyReply) {
    const { queue, id } = request.params as DeadJobParams;
    const job = await ctx.backend.get(id, queue);
    if (!job) throw new HttpProblem(404, "job-not-found", `no job ${JSON.stringify(id)} in queue ${JSON.stringify(queue)}`);
    if (job.state !== "dead")
      throw new HttpProblem(409, "job-not-dead", `job ${id} is ${job.state}; this route deletes dead jobs only`, { extensions: { state: job.state } });
    const outcome = await ctx.backend.remove(id, queue);
    if (outcome === "not-found") throw new HttpProblem(404, "job-not-found", `job ${id} was already deleted`);
    if (outcome === "not-finished") throw new HttpProblem(409, "job-not-dead", `job ${id} is no longer dead (replayed meanwhile)`);
    return reply.code(204).send();
  }

  const queueView = { description: "The queue.", schema: queueViewSchema };

  return [
    {
      method: "GET",
      url: "/queues",
      operationId: "listQueues",
      summary: "Every queue with its counts per state, paused flag and oldest waiting age",
      tags: ["queues"],
      access: "read",
      schema: {},
      responses: {
        200: { description: "The queues.", schema: queueListResponse },
        ...authResponses(),
      },
      handler: listQueues,
    },
    {
      method: "GET",
      url: "/queues/:queue",
      operationId: "getQueue",
      summary: "One queue's statistics",
      tags: ["queues"],
      access: "read",
      schema: { params: QUEUE_PARAMS },
      responses: { 200: queueView, ...authResponses() },
      handler: getQueue,
    },
    {
      method: "GET",
      url: "/queues/:queue/jobs",
      operationId: "listJobs",
      summary: "A queue's jobs, newest first (status views, no payloads)",
      tags: ["queues"],
      access: "read",
      schema: {
        params: QUEUE_PARAMS,
        querystring: jobListQuery,
      },
      responses: {
        200: {
          description: "A page of jobs.",
          schema: pageResponse(jobViewSchema),
        },
        400: problemResponse("A query parameter is invalid."),
        ...authResponses(),
        422: problemResponse("The `after` cursor's job is no longer in this queue: start again from the first page."),
      },
      handler: listJobs,
    },
    {
      method: "POST",
      url: "/queues/:queue/limits",
      operationId: "setQueueLimits",
      summary: "Set the queue's flow limits (rate, maxRunning, maxRunningPerName), replacing the previous ones; {} removes them",
      tags: ["queues"],
      access: "admin",
      schema: { params: QUEUE_PARAMS, body: queueLimitsSchema },
      responses: {
        200: queueView,
        400: problemResponse("The body is not a limits object."),
        ...authResponses(),
        422: problemResponse("A limit is out of range or names an invalid job name."),
      },
      handler: setLimits,
    },
    {
      method: "POST",
      url: "/queues/:queue/pause",
      operationId: "pauseQueue",
      summary: "Stop workers from claiming the queue's jobs (adding still works)",
      tags: ["queues"],
      access: "admin",
      schema: { params: QUEUE_PARAMS },
      responses: { 200: queueView, ...authResponses() },
      handler: setPaused(true),
    },
    {
      method: "POST",
      url: "/queues/:queue/resume",
      operationId: "resumeQueue",
      summary: "Let workers claim the queue's jobs again",
      tags: ["queues"],
      access: "admin",
      schema: { params: QUEUE_PARAMS },
      responses: { 200: queueView, ...authResponses() },
      handler: setPaused(false),
    },
    {
      method: "GET",
      url: "/queues/:queue/dead",
      operationId: "listDeadJobs",
      summary: "Dead letters with their forensics: payload, error and stack, every attempt",
      tags: ["dead letters"],
      access: "admin",
      schema: { params: QUEUE_PARAMS, querystring: pageQuery },
      responses: {
        200: {
          description: "A page of dead jobs, newest first.",
          schema: pageResponse(deadJobViewSchema),
        },
        400: problemResponse("A query parameter is invalid."),
        ...authResponses(),
        422: problemResponse("The `after` cursor's job is no longer in this queue: start again from the first page."),
      },
      handler: listDead,
    },
    {
      method: "POST",
      url: "/queues/:queue/dead/replay",
      operationId: "replayDeadJobs",
      summary: "Replay several dead jobs: by id, or all of the queue (optionally of one name)",
      tags: ["dead letters"],
      access: "admin",
      schema: {
        params: QUEUE_PARAMS,
        body: replayBody,
      },
      responses: {
        200: {
          description: "What happened to each id.",
          schema: replayResponse,
        },
        400: problemResponse("The body does not have the documented shape."),
        ...authResponses(),
        422: problemResponse('Neither or both of "ids" and "all" were given.'),
      },
      handler: replayDead,
    },
    {
      method: "DELETE",
      url: "/queues/:queue/dead/:id",
      operationId: "deleteDeadJob",
      summary: "Delete a dead job for good",
      tags: ["dead letters"],
      access: "admin",
      schema: { params: deadJobParams },
      responses: {
        204: { description: "Deleted." },
        ...authResponses(),
        404: problemResponse("No such job in this queue."),
        409: problemResponse("The job is not dead."),
        501: problemResponse("This backend cannot delete single jobs."),
      },
      handler: deleteDead,
    },
  ];
}
