/** Cron schedules: list with next run times (read), upsert and delete (admin). Rules in core/schedule.ts. */
import type { FastifyReply, FastifyRequest } from "fastify";
import { checkPayload } from "../../core/define.js";
import type { Json } from "../../core/json.js";
import {
  buildScheduleWrite,
  DEFAULT_MISFIRE_GRACE_MS,
  DEFAULT_MISFIRE_LIMIT,
  MAX_MISFIRE_LIMIT,
  nextRunAt,
  notifySchedulesChanged,
  scheduleInfos,
  type MisfireOption,
  type ScheduleInfo,
  type ScheduleJobOptions,
} from "../../core/schedule.js";
import type { HttpContext, RouteSpec } from "../context.js";
import { HttpProblem } from "../problem.js";
import { checkClientQueue, reservedMetaProblem } from "../reserved.js";
import { authResponses, NAME_SCHEMA, problemResponse, QUEUE_PARAMS, type QueueParams } from "../schemas.js";
import { AnyJson, Nullable, StringEnum, Type, type Static } from "../typed-schema.js";
import { iso } from "../views.js";

const SCHEDULE_PARAMS = Type.Object({ queue: NAME_SCHEMA, id: NAME_SCHEMA });
type ScheduleParams = Static<typeof SCHEDULE_PARAMS>;

const misfirePolicy = StringEnum(["skip", "once", "all"] as const);

// Typed as core/schedule.ts's MisfireOption, whose per-policy fields the core checks (422).
const MISFIRE_SCHEMA = Type.Unsafe<MisfireOption>(
  Type.Union(
    [
      misfirePolicy,
      Type.Object(
        {
          policy: misfirePolicy,
          graceMs: Type.Optional(Type.Integer({ minimum: 0, description: `skip: how late a tick may still fire, ms (default ${DEFAULT_MISFIRE_GRACE_MS}).` })),
          limit: Type.Optional(
            Type.Integer({
              minimum: 1,
              maximum: MAX_MISFIRE_LIMIT,
              description: `all: the most missed ticks enqueued at once (default ${DEFAULT_MISFIRE_LIMIT}).`,
            }),
          ),
        },
        { additionalProperties: false },
      ),
    ],
    {
      description:
        'Ticks missed while no scheduler ran: "skip" (dropped; a tick up to graceMs late still fires), "once" (default: one job for all of them) or "all" (one job per missed tick, at most limit).',
    },
  ),
);

const SCHEDULE_BODY = Type.Object(
  {
    cron: Type.String({
      minLength: 1,
      maxLength: 256,
      description: '5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, e.g. "0 8 * * MON".',
    }),
    tz: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'IANA time zone of the pattern, e.g. "Europe/Berlin" (default "UTC").' })),
    name: Type.String({ ...NAME_SCHEMA, description: "The job name every tick enqueues." }),
    data: Type.Optional(AnyJson({ description: "The payload of every tick's job (default {})." })),
    // The job options' own rules (and the ones a tick decides) are the core's: 422 with their message.
    options: Type.Optional(
      Type.Unsafe<ScheduleJobOptions>({
        type: "object",
        description:
          "Job options of every tick's job (attempts, priority, backoff, timeoutMs, removeOnComplete, removeOnFail, meta); not jobId, delayMs or runAt.",
      }),
    ),
    misfire: Type.Optional(MISFIRE_SCHEMA),
  },
  { additionalProperties: false },
);
type ScheduleBody = Static<typeof SCHEDULE_BODY>;

const nullableDateTime = (description: string) => Nullable(Type.String({ format: "date-time" }), { description });

export const scheduleViewSchema = Type.Object(
  {
    queue: Type.String(),
    id: Type.String(),
    cron: Type.String(),
    tz: Type.String(),
    name: Type.String(),
    data: AnyJson({ description: "The payload of every tick's job." }),
    options: Type.Unsafe<ScheduleJobOptions>({ type: "object" }),
    misfire: Type.Object({ policy: misfirePolicy, graceMs: Type.Integer(), limit: Type.Integer() }),
    lastTickAt: nullableDateTime("The newest tick fired (or dropped by the misfire policy); null before the first."),
    nextRunAt: nullableDateTime("When the schedule fires next (store clock); null when its pattern names no future time."),
    anchorAt: nullableDateTime("Ticks at or before this instant never fire: creation, or the last change of the pattern."),
    version: Type.Integer({ description: "Bumped by every upsert." }),
    createdAt: nullableDateTime("When the schedule was created."),
    updatedAt: nullableDateTime("When it was last changed."),
  },
  { title: "Schedule" },
);
export type ScheduleView = Static<typeof scheduleViewSchema>;

export function toScheduleView(s: ScheduleInfo): ScheduleView {
  const d = s.definition;
  return {
    queue: s.queue,
    id: s.id,
    cron: d.cron,
    tz: d.tz,
    name: d.name,
    data: d.data,
    options: d.options,
    misfire: d.misfire,
    lastTickAt: iso(s.lastTickAt),
    nextRunAt: iso(s.nextRunAt),
    anchorAt: iso(s.anchorAt),
    version: s.version,
    createdAt: iso(s.createdAt),
    updatedAt: iso(s.updatedAt),
  };
}

const listResponse = Type.Object({ schedules: Type.Array(scheduleViewSchema) });

export function scheduleRoutes(ctx: HttpContext): RouteSpec[] {
  const infos = (queue?: string) => scheduleInfos(ctx.backend, queue);

  async function listAll(_request: FastifyRequest, reply: FastifyReply) {
    return reply.send({ schedules: (await infos()).map(toScheduleView) } satisfies Static<typeof listResponse>);
  }

  async function listQueue(request: FastifyRequest, reply: FastifyReply) {
    const { queue } = request.params as QueueParams;
    return reply.send({ schedules: (await infos(queue)).map(toScheduleView) });
  }

  async function getOne(request: FastifyRequest, reply: FastifyReply) {
    const { queue, id } = request.params as ScheduleParams;
    const found = (await infos(queue)).find((s) => s.id === id);
    if (!found) throw new HttpProblem(404, "schedule-not-found", `no schedule ${JSON.stringify(id)} in queue ${JSON.stringify(queue)}`);
    return reply.send(toScheduleView(found));
  }

  async function upsert(request: FastifyRequest, reply: FastifyReply) {
    const { queue, id } = request.params as ScheduleParams;
    // Every tick enqueues a job: the enqueue route's rules on what a client may write apply.
    checkClientQueue(queue);
    const body = request.body as ScheduleBody;
    const metaProblem = reservedMetaProblem(body.options?.meta);
    if (metaProblem !== null) {
      throw new HttpProblem(422, "invalid-schedule", metaProblem, { errors: [{ in: "body", pointer: "/options/meta/conveyor", detail: metaProblem }] });
    }
    const def = ctx.jobs.get(body.name);
    if (!def && ctx.strictJobNames) {
      throw new HttpProblem(
        422,
        "invalid-schedule",
        `job "${body.name}" is not registered on this server; registered: ${[...ctx.jobs.keys()].join(", ") || "(none)"}`,
        {
          errors: [{ in: "body", pointer: "/name", detail: "not a registered job" }],
        },
      );
    }
    const data: Json = body.data === undefined ? {} : body.data;
    if (def) {
      const parsed = checkPayload(body.name, def.schema, data);
      if (!parsed.ok) {
        const detail = parsed.issues
          .slice(0, 20)
          .map((i) => `/data/${i.path.join("/")}: ${i.message}`)
          .join("; ");
        throw new HttpProblem(422, "invalid-payload", `the data of job "${body.name}" does not match its schema: ${detail}`);
      }
    }
    // The core checks (pattern, time zone, options) answer 422 with their message via the error handler.
    const write = buildScheduleWrite(queue, id, { ...body, data }, ctx.maxBodyBytes);
    const { created, schedule } = await ctx.backend.scheduleUpsert(write);
    notifySchedulesChanged(ctx.backend);
    const view = toScheduleView({ ...schedule, nextRunAt: nextRunAt(schedule, await ctx.backend.now()) });
    return reply.code(created ? 201 : 200).send(view);
  }

  async function remove(request: FastifyRequest, reply: FastifyReply) {
    const { queue, id } = request.params as ScheduleParams;
    if (!(await ctx.backend.scheduleRemove(queue, id)))
      throw new HttpProblem(404, "schedule-not-found", `no schedule ${JSON.stringify(id)} in queue ${JSON.stringify(queue)}`);
    notifySchedulesChanged(ctx.backend);
    return reply.code(204).send();
  }

  const one = { description: "The schedule, with its next run time.", schema: scheduleViewSchema };
  return [
    {
      method: "GET",
      url: "/schedules",
      operationId: "listSchedules",
      summary: "Every cron schedule, with its last and next run",
      tags: ["schedules"],
      access: "read",
      schema: {},
      responses: { 200: { description: "The schedules, by queue then id.", schema: listResponse }, ...authResponses() },
      handler: listAll,
    },
    {
      method: "GET",
      url: "/queues/:queue/schedules",
      operationId: "listQueueSchedules",
      summary: "A queue's cron schedules, with their last and next run",
      tags: ["schedules"],
      access: "read",
      schema: { params: QUEUE_PARAMS },
      responses: { 200: { description: "The queue's schedules, by id.", schema: listResponse }, ...authResponses() },
      handler: listQueue,
    },
    {
      method: "GET",
      url: "/queues/:queue/schedules/:id",
      operationId: "getSchedule",
      summary: "One cron schedule",
      tags: ["schedules"],
      access: "read",
      schema: { params: SCHEDULE_PARAMS },
      responses: { 200: one, ...authResponses(), 404: problemResponse("No such schedule in this queue.") },
      handler: getOne,
    },
    {
      method: "PUT",
      url: "/queues/:queue/schedules/:id",
      operationId: "putSchedule",
      summary: "Create or replace a cron schedule (a changed pattern takes effect from its next tick)",
      description:
        "Every tick of `cron` in `tz` enqueues one job `name` with `data` and `options`, exactly once however many schedulers run. Replacing keeps the last fired tick, so no tick fires twice.",
      tags: ["schedules"],
      access: "admin",
      schema: { params: SCHEDULE_PARAMS, body: SCHEDULE_BODY },
      responses: {
        200: { description: "Replaced.", schema: scheduleViewSchema },
        201: { description: "Created.", schema: scheduleViewSchema },
        400: problemResponse("The body does not have the documented shape."),
        ...authResponses(),
        403: problemResponse('The key lacks the scope this route needs, or the queue is reserved for Conveyor itself (names starting with "conveyor.").'),
        422: problemResponse(
          "The pattern, time zone, job name, data or options are not valid (the detail says which and why), or options.meta uses the reserved key conveyor.",
        ),
      },
      handler: upsert,
    },
    {
      method: "DELETE",
      url: "/queues/:queue/schedules/:id",
      operationId: "deleteSchedule",
      summary: "Delete a cron schedule (the jobs it enqueued stay)",
      tags: ["schedules"],
      access: "admin",
      schema: { params: SCHEDULE_PARAMS },
      responses: { 204: { description: "Deleted." }, ...authResponses(), 404: problemResponse("No such schedule in this queue.") },
      handler: remove,
    },
  ];
}
