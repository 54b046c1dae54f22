import type { Backend, ReplayResult } from "../backend/contract.js";
import { InvalidInputError } from "../core/errors.js";
import { intOption, parse, subcommand, UsageError, withBackend } from "./args.js";
import { printable, printJson } from "./format.js";
import { listTable, showOne } from "./jobs.js";

export const help = `conveyor dlq ls --db URL [--queue Q] [--limit N] [--json]     dead jobs, newest first
conveyor dlq show ID --db URL [--queue Q] [--json]              forensics: payload, error, stack, every attempt
conveyor dlq replay ID [ID...] --db URL [--queue Q]             back to waiting with fresh attempts
conveyor dlq replay --all [--queue Q] --db URL                  every dead job (of a queue), in pages of 500,
                                                                with progress on stderr`;

export async function run(argv: string[]): Promise<number> {
  const sub = subcommand("dlq", argv, ["ls", "show", "replay"]);
  const { values, positionals } = parse(argv.slice(1), {
    queue: { type: "string" },
    limit: { type: "string" },
    all: { type: "boolean", default: false },
  });
  if (values.help || !sub) {
    console.log(help);
    return sub ? 0 : 2;
  }
  return withBackend(values.db, async (backend) => {
    const queue = values.queue as string | undefined;
    if (sub === "ls") {
      const jobs = await backend.list({ queue, state: "dead" }, { limit: intOption("limit", values.limit, 1) ?? 50 });
      if (values.json) printJson(jobs);
      else console.log(jobs.length ? listTable(jobs, await backend.now()) : "the dead-letter queue is empty");
      return 0;
    }
    if (sub === "show") return showOne(backend, positionals[0], values.json === true, queue);
    // replay: subcommand() lets no other name through.
    const ids = positionals;
    if (values.all) {
      if (ids.length) throw new UsageError("give job ids or --all, not both");
      const result = await replayAllDead(backend, queue, values.json === true ? null : process.stderr);
      if (values.json) printJson(result);
      else
        console.log(
          `replayed ${result.replayed} dead job(s)${result.skipped.length ? `; ${result.skipped.length} could not be replayed: ${result.skipped.map((s) => `${printable(s.id)} (${s.outcome})`).join(", ")}` : ""}`,
        );
      return result.skipped.length ? 1 : 0;
    }
    if (ids.length === 0) throw new UsageError("which jobs? conveyor dlq replay ID [ID...] or --all");
    const results = [];
    for (const id of ids) results.push({ id, outcome: await backend.replay(id, queue) });
    if (values.json) printJson(results);
    else for (const r of results) console.log(`${printable(r.id)}: ${r.outcome}`);
    return results.every((r) => r.outcome === "replayed") ? 0 : 1;
  });
}

/** Dead jobs read per page by `replay --all`. */
const REPLAY_PAGE = 500;
/** Replays in flight at once: enough to overlap round trips to PostgreSQL or Redis, few enough for a small pool. */
const REPLAY_PARALLEL = 16;

/**
 * Replays every dead job (of a queue) page by page. Pages follow a keyset cursor (`page.after`,
 * the last job of the previous page) within each queue that had dead jobs at the start, so jobs
 * leaving the dead state meanwhile (our replays, or someone else's) cannot shift a later page
 * over jobs not yet read, as an offset would. A job is replayed at most once: ids are kept in a
 * Set, so one that dies again during the run (a worker is taking the replayed jobs) is stepped
 * over, and the cost stays linear in the number of dead jobs. When a cursor's job is deleted
 * meanwhile, paging resumes from the previous page's cursor (from the newest job when none is
 * left). A job listed dead but replayed or removed by someone else before our replay reaches it
 * is reported as skipped. Progress goes to `progress` (stderr) as "replayed N of TOTAL".
 */
export async function replayAllDead(
  backend: Backend,
  queue: string | undefined,
  progress: NodeJS.WriteStream | null,
): Promise<{ replayed: number; skipped: Array<{ id: string; outcome: ReplayResult }> }> {
  const stats = await backend.stats(queue);
  const total = stats.reduce((n, s) => n + s.counts.dead, 0);
  // A cursor pages within one queue: every queue that has dead jobs now, one after the other.
  const queues = queue !== undefined ? [queue] : stats.filter((s) => s.counts.dead > 0).map((s) => s.queue);
  const seen = new Set<string>();
  const skipped: Array<{ id: string; outcome: ReplayResult }> = [];
  let replayed = 0;
  const report = (final: boolean) => {
    // A log gets a line per page; only a terminal's in-place line needs closing at the end.
    if (!progress || (final && !progress.isTTY)) return;
    const line = `replayed ${replayed} of ${Math.max(total, replayed + skipped.length)}`;
    if (progress.isTTY) progress.write(`\r${line}${final ? "\n" : ""}`);
    else progress.write(`${line}\n`);
  };
  for (const q of queues) {
    if (backend.replayAllDead) {
      // The store replays a whole queue in one pass (RabbitMQ, where a lookup by id is a scan).
      replayed += (await backend.replayAllDead(q)).replayed.length;
      report(false);
      continue;
    }
    // The last job of every page read so far in this queue: the newest usable one is the cursor.
    const cursors: string[] = [];
    for (;;) {
      const after = cursors.at(-1);
      let page;
      try {
        page = await backend.list({ queue: q, state: "dead" }, { limit: REPLAY_PAGE, ...(after === undefined ? {} : { after }) });
      } catch (error) {
        // The cursor's job was deleted meanwhile: step back one page; the Set skips what was handled.
        if (error instanceof InvalidInputError && after !== undefined) {
          cursors.pop();
          continue;
        }
        throw error;
      }
      if (page.length === 0) break;
      cursors.push(page.at(-1)!.id);
      const fresh = page.filter((job) => !seen.has(job.id));
      for (let i = 0; i < fresh.length; i += REPLAY_PARALLEL) {
        const slice = fresh.slice(i, i + REPLAY_PARALLEL);
        const outcomes = await Promise.all(slice.map((job) => backend.replay(job.id, job.queue)));
        slice.forEach((job, k) => {
          seen.add(job.id);
          if (outcomes[k] === "replayed") replayed++;
          else skipped.push({ id: job.id, outcome: outcomes[k]! });
        });
      }
      report(false);
    }
  }
  report(true);
  return { replayed, skipped };
}
