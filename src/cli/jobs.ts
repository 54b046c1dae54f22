import type { Backend } from "../backend/contract.js";
import { JOB_STATES, type FlowInfo, type JobRecord, type JobState } from "../core/job.js";
import { intOption, parse, subcommand, UsageError, withBackend } from "./args.js";
import { duration, printable, printableLines, printJson, table, time } from "./format.js";
import type { JobLogLine } from "../core/job-log.js";

export const help = `conveyor jobs ls --db URL [--queue Q] [--state S] [--name N] [--limit N] [--offset N] [--json]
conveyor jobs show ID --db URL [--queue Q] [--json]
conveyor jobs cancel ID --db URL [--queue Q]
conveyor jobs rm ID --db URL [--queue Q]   delete a finished (completed, dead, cancelled) job now
  --queue Q on show, cancel and rm: only queue Q's job (on Redis ids are unique per queue, and an
  id held by several queues needs it)

States: ${JOB_STATES.join(", ")}.`;

export function listTable(jobs: JobRecord[], now: number): string {
  return table(
    ["id", "queue", "name", "state", "attempt", "age", "last error"],
    jobs.map((j) => [
      j.id,
      j.queue,
      j.name,
      j.state,
      `${j.attempt}/${j.maxAttempts}`,
      duration(now - j.createdAt),
      j.error ? `${j.error.name}: ${j.error.message}`.slice(0, 60) : null,
    ]),
  );
}

/** A job that is part of a flow (a parent, or a child): the lines that show it. */
export function showFlow(flow: FlowInfo): string[] {
  const lines: string[] = [];
  if (flow.parent) lines.push(`parent       ${printable(flow.parent.id)} (queue ${printable(flow.parent.queue)})`);
  if (flow.children.length > 0) {
    lines.push(`children     ${flow.children.length}, ${flow.pendingChildren} not settled; on a failed child: ${flow.onChildFailure}`);
    lines.push(
      table(
        ["id", "queue", "name", "state", "result / error"],
        flow.children.map((c) => [
          c.id,
          c.queue,
          c.name,
          c.settled ? c.state : `${c.state} (not settled)`,
          c.error ? `${c.error.name}: ${c.error.message}`.slice(0, 60) : c.result === null ? null : JSON.stringify(c.result).slice(0, 60),
        ]),
      )
        .split("\n")
        .map((l) => `  ${l}`)
        .join("\n"),
    );
  }
  return lines;
}

/** Whether a job takes part in a flow (has a parent or children). */
export function inFlow(flow: FlowInfo | null): flow is FlowInfo {
  return flow !== null && (flow.parent !== null || flow.children.length > 0);
}

/**
 * A job for people to read. Every value from the store goes through `printable` (tables do it
 * themselves): JSON.stringify escapes C0 controls but not DEL and C1, so the payload, progress and
 * result need it as much as the id does.
 */
export function showJob(job: JobRecord, flow: FlowInfo | null = null): string {
  const lines = [
    `id           ${printable(job.id)}`,
    `queue/name   ${printable(job.queue)} / ${printable(job.name)}`,
    `state        ${job.state}`,
    `attempt      ${job.attempt} of ${job.maxAttempts}   (replays: ${job.replays}, lease expiries in a row: ${job.stalls})`,
    `priority     ${job.priority}`,
    `created      ${time(job.createdAt)}`,
    `run at       ${time(job.runAt)}`,
    `started      ${time(job.startedAt)}`,
    `finished     ${time(job.finishedAt)}`,
    `payload      ${printable(JSON.stringify(job.data))}`,
  ];
  if (inFlow(flow)) lines.push(...showFlow(flow));
  if (job.lease) lines.push(`lease        token ${job.lease.token} held by ${printable(job.lease.worker.id)} until ${time(job.lease.expiresAt)}`);
  if (job.progress !== null) lines.push(`progress     ${printable(JSON.stringify(job.progress))}`);
  if (job.result !== null) lines.push(`result       ${printable(JSON.stringify(job.result))}`);
  if (job.error) {
    lines.push(`error        ${printable(job.error.name)}: ${printableLines(job.error.message)}`);
    if (job.error.stack) lines.push(...job.error.stack.split("\n").map((l) => `             ${printable(l)}`));
  }
  if (job.history.length) {
    lines.push("history");
    lines.push(
      table(
        ["#", "outcome", "worker", "host", "pid", "started", "took", "error"],
        job.history.map((a) => [
          a.attempt,
          a.outcome,
          a.workerId,
          a.host,
          a.pid,
          time(a.startedAt),
          duration(a.finishedAt - a.startedAt),
          a.error ? `${a.error.name}: ${a.error.message}`.slice(0, 60) : null,
        ]),
      )
        .split("\n")
        .map((l) => `  ${l}`)
        .join("\n"),
    );
  }
  return lines.join("\n");
}

/** The job's ctx.log lines under a "log" heading, or nothing when it has none. */
export function showLogs(logs: readonly JobLogLine[]): string {
  if (logs.length === 0) return "";
  return "\nlog\n" + logs.map((l) => `  ${time(l.at)}  #${l.attempt}  ${printableLines(l.line, "      ")}`).join("\n");
}

export async function showOne(backend: Backend, id: string | undefined, json: boolean, queue?: string): Promise<number> {
  if (!id) throw new UsageError("which job? conveyor jobs show ID");
  const job = await backend.get(id, queue);
  if (!job) {
    console.error(`no job ${printable(id)} (unknown, or pruned after its retention)`);
    return 1;
  }
  // A store without flows or job records (RabbitMQ) has neither to show: ask only where they exist.
  const flow = backend.capabilities.flows === "none" ? null : await backend.flow(job.id, job.queue);
  const logs = backend.capabilities.jobRecords ? await backend.logs(job.id, job.queue) : [];
  if (json) printJson(inFlow(flow) ? { ...job, flow, logs } : { ...job, logs });
  else console.log(showJob(job, flow) + showLogs(logs));
  return 0;
}

export async function run(argv: string[]): Promise<number> {
  const sub = subcommand("jobs", argv, ["ls", "show", "cancel", "rm"]);
  const { values, positionals } = parse(argv.slice(1), {
    queue: { type: "string" },
    state: { type: "string" },
    name: { type: "string" },
    limit: { type: "string" },
    offset: { type: "string" },
  });
  if (values.help || !sub) {
    console.log(help);
    return sub ? 0 : 2;
  }
  return withBackend(values.db, async (backend) => {
    if (sub === "ls") {
      const state = values.state as string | undefined;
      if (state !== undefined && !JOB_STATES.includes(state as JobState)) throw new UsageError(`--state must be one of ${JOB_STATES.join(", ")}`);
      const jobs = await backend.list(
        { queue: values.queue as string | undefined, state: state as JobState | undefined, name: values.name as string | undefined },
        { limit: intOption("limit", values.limit, 1) ?? 50, offset: intOption("offset", values.offset) ?? 0 },
      );
      if (values.json) printJson(jobs);
      else console.log(jobs.length ? listTable(jobs, await backend.now()) : "no jobs match");
      return 0;
    }
    const queue = values.queue as string | undefined;
    if (sub === "show") return showOne(backend, positionals[0], values.json === true, queue);
    if (sub === "cancel") {
      const id = positionals[0];
      if (!id) throw new UsageError("which job? conveyor jobs cancel ID");
      const outcome = await backend.cancel(id, queue);
      if (values.json) printJson({ id, outcome });
      else console.log(`${printable(id)}: ${outcome}`);
      return outcome === "cancelled" ? 0 : 1;
    }
    // rm: subcommand() lets no other name through.
    const id = positionals[0];
    if (!id) throw new UsageError("which job? conveyor jobs rm ID");
    const outcome = await backend.remove(id, queue);
    if (values.json) printJson({ id, outcome });
    else console.log(`${printable(id)}: ${outcome}${outcome === "not-finished" ? " (cancel it first)" : ""}`);
    return outcome === "removed" ? 0 : 1;
  });
}
