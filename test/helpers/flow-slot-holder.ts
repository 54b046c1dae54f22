/**
 * Child process of the flow-control crash test: a real Worker on the store at argv[2] whose
 * handler never returns, so the job it claims holds its queue's only running slot until the
 * process dies. Prints "started <job id>" once the handler runs.
 *
 * Usage: node --import tsx test/helpers/flow-slot-holder.ts <backend url> <queue>
 */
import { openBackend } from "../../src/backend/open.js";
import { silentLogger, Worker } from "../../src/index.js";

const [url, queue] = process.argv.slice(2);
if (!url || !queue) throw new Error("usage: flow-slot-holder.ts <backend url> <queue>");

const backend = await openBackend(url);
new Worker({
  backend,
  queues: queue,
  leaseMs: 1_000,
  pollIntervalMs: 50,
  logger: silentLogger,
  handlers: {
    job: (job) => {
      process.stdout.write(`started ${job.id}\n`);
      return new Promise<never>(() => {});
    },
  },
});
