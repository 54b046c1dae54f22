/**
 * Child process of the RabbitMQ fault tests: a Worker on queue "faults" of the given prefix.
 * Handler "slow" sleeps 10 s (so a SIGKILL catches jobs in flight); handler "poison" SIGKILLs
 * this process (a job that crashes its worker every time). Prints "started <id>" when a job
 * starts.
 *
 * Usage: node --import tsx test/helpers/amqp-worker.ts <amqp url> <prefix> <delivery limit>
 */
import { AmqpBackend } from "../../src/backend/amqp/index.js";
import { silentLogger, Worker } from "../../src/index.js";

const [url, prefix, deliveryLimit] = process.argv.slice(2);
if (!url || !prefix || !deliveryLimit) throw new Error("usage: amqp-worker.ts <amqp url> <prefix> <delivery limit>");

const backend = new AmqpBackend({ url, prefix, deliveryLimit: Number(deliveryLimit), logger: silentLogger });
const worker = new Worker({
  backend,
  queues: "faults",
  concurrency: 4,
  logger: silentLogger,
  maintenance: false,
  handlers: {
    slow: () => new Promise((resolve) => setTimeout(resolve, 10_000)),
    poison: () => {
      process.kill(process.pid, "SIGKILL");
      return new Promise(() => undefined);
    },
  },
});
worker.on("job:started", ({ job }) => process.stdout.write(`started ${job.id}\n`));
