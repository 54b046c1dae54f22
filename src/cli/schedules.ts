import type { Json } from "../core/json.js";
import { scheduleInfos, type MisfireOption, type ScheduleInfo, type ScheduleJobOptions } from "../core/schedule.js";
import { Queue } from "../producer/queue.js";
import { MIN_PRIORITY } from "../core/spec.js";
import { intOption, jsonOption, parse, requiredString, subcommand, UsageError, withBackend } from "./args.js";
import { printJson, table, time } from "./format.js";
import { shown } from "../core/checks.js";

export const help = `conveyor schedules ls --db URL [--queue Q] [--json]        cron schedules with their last and next run
conveyor schedules add ID --db URL --queue Q --cron PATTERN --name JOB [options]
                                                               create or replace a schedule (upsert)
  --cron PATTERN     5 fields (minute hour day month weekday) or 6 with seconds first, e.g. "0 8 * * MON"
  --tz ZONE          IANA time zone of the pattern (default UTC)
  --data JSON        payload of every tick's job (default {})
  --misfire POLICY   ticks missed during downtime: skip | once | all (default once)
  --misfire-limit N  with --misfire all: the most missed ticks enqueued at once (default 100)
  --grace-ms N       with --misfire skip: how late a tick may still fire, ms (default 60000)
  --priority N       job priority, lower runs first (default 0)
  --attempts N       job attempts in total (default 3)
conveyor schedules rm ID --db URL --queue Q                     delete a schedule (its jobs stay)`;

export async function run(argv: string[]): Promise<number> {
  const sub = subcommand("schedules", argv, ["ls", "add", "rm"]);
  const { values, positionals } = parse(argv.slice(1), {
    queue: { type: "string" },
    cron: { type: "string" },
    tz: { type: "string" },
    name: { type: "string" },
    data: { type: "string" },
    misfire: { type: "string" },
    "misfire-limit": { type: "string" },
    "grace-ms": { type: "string" },
    priority: { type: "string" },
    attempts: { type: "string" },
  });
  if (values.help || !sub) {
    console.log(help);
    return sub ? 0 : 2;
  }
  const id = sub === "ls" ? undefined : positionals[0];
  if (sub !== "ls" && !id) throw new UsageError(`which schedule? conveyor schedules ${sub} ID --queue Q …`);
  const add = sub === "add" ? addInput(values) : null;
  return withBackend(values.db, async (backend) => {
    if (sub === "ls") {
      const list = await scheduleInfos(backend, values.queue as string | undefined);
      if (values.json) printJson(list);
      else console.log(list.length === 0 ? "no schedules" : scheduleTable(list));
      return 0;
    }
    const queue = new Queue(requiredString("queue", values.queue), { backend });
    if (sub === "add") {
      const result = await queue.schedule(id!, add!);
      if (values.json) printJson(result);
      else console.log(`${result.created ? "created" : "replaced"} ${result.queue}/${result.id}; next run ${time(result.nextRunAt)}`);
      return 0;
    }
    const removed = await queue.unschedule(id!);
    if (values.json) printJson({ removed });
    else console.log(removed ? `removed ${queue.name}/${id}` : `no schedule ${queue.name}/${id}`);
    return removed ? 0 : 1;
  });
}

function scheduleTable(list: readonly ScheduleInfo[]): string {
  return table(
    ["queue", "id", "cron", "tz", "job", "misfire", "last tick", "next run"],
    list.map((s) => [s.queue, s.id, s.definition.cron, s.definition.tz, s.definition.name, s.definition.misfire.policy, time(s.lastTickAt), time(s.nextRunAt)]),
  );
}

function addInput(values: Record<string, unknown>) {
  const cron = requiredString("cron", values.cron);
  const name = requiredString("name", values.name);
  const data = jsonOption<Json>("data", values.data, {});
  const policy = values.misfire as string | undefined;
  if (policy !== undefined && policy !== "skip" && policy !== "once" && policy !== "all")
    throw new UsageError(`--misfire must be skip, once or all; got ${shown(policy)}`);
  const limit = intOption("misfire-limit", values["misfire-limit"], 1);
  const graceMs = intOption("grace-ms", values["grace-ms"], 0);
  if (limit !== undefined && policy !== "all") throw new UsageError("--misfire-limit goes with --misfire all");
  if (graceMs !== undefined && policy !== "skip") throw new UsageError("--grace-ms goes with --misfire skip");
  const misfire: MisfireOption | undefined =
    policy === "all" && limit !== undefined ? { policy, limit } : policy === "skip" && graceMs !== undefined ? { policy, graceMs } : policy;
  const options: ScheduleJobOptions = {};
  const priority = intOption("priority", values.priority, MIN_PRIORITY);
  if (priority !== undefined) options.priority = priority;
  const attempts = intOption("attempts", values.attempts, 1);
  if (attempts !== undefined) options.attempts = attempts;
  return { cron, name, data, options, ...(values.tz === undefined ? {} : { tz: values.tz as string }), ...(misfire === undefined ? {} : { misfire }) };
}
