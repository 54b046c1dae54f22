import { parse, withBackend } from "./args.js";
import { duration, printJson, table } from "./format.js";

export const help = `conveyor stats --db URL [--queue NAME] [--json]

Jobs per state and the oldest waiting job's age, per queue. Alert on the age, not the depth.`;

export async function run(argv: string[]): Promise<number> {
  const { values } = parse(argv, { queue: { type: "string" } });
  if (values.help) {
    console.log(help);
    return 0;
  }
  return withBackend(values.db, async (backend) => {
    const stats = await backend.stats(values.queue as string | undefined);
    if (values.json) {
      printJson(stats);
      return 0;
    }
    if (stats.length === 0) {
      console.log("no queues yet");
      return 0;
    }
    console.log(
      table(
        ["queue", "waiting", "scheduled", "active", "completed", "dead", "cancelled", "oldest waiting", "paused"],
        stats.map((s) => [
          s.queue,
          s.counts.waiting,
          s.counts.scheduled,
          s.counts.active,
          s.counts.completed,
          s.counts.dead,
          s.counts.cancelled,
          duration(s.oldestWaitingAgeMs),
          s.paused ? "yes" : "no",
        ]),
      ),
    );
    return 0;
  });
}
