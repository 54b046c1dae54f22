import { intOption, parse, UsageError, withBackend } from "./args.js";
import { printJson } from "./format.js";
import { listTable, showOne } from "./jobs.js";

export const help = `conveyor dlq ls --db URL [--queue Q] [--limit N] [--json]     dead jobs, newest first
conveyor dlq show ID --db URL [--queue Q] [--json]              forensics: payload, error, stack, every attempt
conveyor dlq replay ID [ID...] --db URL [--queue Q]             back to waiting with fresh attempts
conveyor dlq replay --all [--queue Q] --db URL                  every dead job (of a queue)`;

export async function run(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  const { values, positionals } = parse(rest, {
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
    if (sub === "replay") {
      let ids = positionals;
      if (values.all) {
        if (ids.length) throw new UsageError("give job ids or --all, not both");
        ids = [];
        // Replayed jobs leave the dead state, so always read the first page again.
        for (;;) {
          const page = await backend.list({ queue, state: "dead" }, { limit: 1000 });
          const fresh = page.filter((j) => !ids.includes(j.id));
          if (fresh.length === 0) break;
          for (const j of fresh) {
            await backend.replay(j.id, j.queue);
            ids.push(j.id);
          }
        }
        if (values.json) printJson({ replayed: ids });
        else console.log(`replayed ${ids.length} dead job(s)`);
        return 0;
      }
      if (ids.length === 0) throw new UsageError("which jobs? conveyor dlq replay ID [ID...] or --all");
      const results = [];
      for (const id of ids) results.push({ id, outcome: await backend.replay(id, queue) });
      if (values.json) printJson(results);
      else for (const r of results) console.log(`${r.id}: ${r.outcome}`);
      return results.every((r) => r.outcome === "replayed") ? 0 : 1;
    }
    throw new UsageError(`unknown subcommand "dlq ${sub}"; use ls, show or replay`);
  });
}
