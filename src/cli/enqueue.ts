import { Queue } from "../producer/queue.js";
import type { Json } from "../core/json.js";
import { MIN_PRIORITY, type JobOptions } from "../core/spec.js";
import { printJson } from "./format.js";
import { intOption, jsonOption, parse, requiredString, UsageError, withBackend } from "./args.js";

export const help = `conveyor enqueue --db URL --queue NAME --name JOB [options]

  --data JSON       payload (default {})
  --id JOBID        your job id; also the dedup key
  --delay-ms N      run no earlier than N ms from now
  --priority N      lower runs first (default 0)
  --attempts N      total attempts (default 3)
  --count N         add N jobs, each with "i" (0..N-1) added to its data; prints a count
  --json            print the results as JSON`;

const BATCH = 5_000;

export async function run(argv: string[]): Promise<number> {
  const { values } = parse(argv, {
    queue: { type: "string" },
    name: { type: "string" },
    data: { type: "string" },
    id: { type: "string" },
    "delay-ms": { type: "string" },
    priority: { type: "string" },
    attempts: { type: "string" },
    count: { type: "string" },
  });
  if (values.help) {
    console.log(help);
    return 0;
  }
  const queueName = requiredString("queue", values.queue);
  const name = requiredString("name", values.name);
  const data = jsonOption<Json>("data", values.data, {});
  const options: JobOptions = {};
  if (values.id !== undefined) options.jobId = values.id as string;
  const delayMs = intOption("delay-ms", values["delay-ms"]);
  if (delayMs !== undefined) options.delayMs = delayMs;
  const priority = intOption("priority", values.priority, MIN_PRIORITY);
  if (priority !== undefined) options.priority = priority;
  const attempts = intOption("attempts", values.attempts, 1);
  if (attempts !== undefined) options.attempts = attempts;
  const count = intOption("count", values.count, 1);

  return withBackend(values.db, async (backend) => {
    const queue = new Queue(queueName, { backend });
    if (count === undefined) {
      const result = await queue.add(name, data, options);
      if (values.json) printJson(result);
      else console.log(result.duplicate ? `${result.id} (duplicate: already exists)` : result.id);
      return 0;
    }
    if (options.jobId !== undefined && count > 1) throw new UsageError("--id and --count > 1 together would make duplicates; drop one");
    if (data === null || typeof data !== "object" || Array.isArray(data)) throw new UsageError("--count needs --data to be a JSON object (i is added to it)");
    const showProgress = process.stderr.isTTY && count > BATCH;
    let added = 0;
    let duplicates = 0;
    for (let start = 0; start < count; start += BATCH) {
      const jobs = [];
      for (let i = start; i < Math.min(count, start + BATCH); i++) jobs.push({ name, data: { ...data, i }, options });
      const results = await queue.addBulk(jobs);
      added += results.filter((r) => !r.duplicate).length;
      duplicates += results.filter((r) => r.duplicate).length;
      if (showProgress) process.stderr.write(`\r  enqueued ${added + duplicates}/${count} (${Math.round(((added + duplicates) / count) * 100)}%)`);
    }
    if (showProgress) process.stderr.write("\n");
    if (values.json) printJson({ added, duplicates });
    else console.log(`enqueued ${added} job(s)${duplicates ? `, ${duplicates} duplicate(s)` : ""} on ${queueName}`);
    return 0;
  });
}
