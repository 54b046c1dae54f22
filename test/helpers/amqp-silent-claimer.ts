/**
 * Child process of the RabbitMQ fault tests: a process that stops reading its connection while
 * the broker closes it (the test SIGSTOPs it, closes every connection from the server side, then
 * SIGCONTs it), and claims on a timer the moment it runs again, as a Worker's poll does. Timers
 * run before a resumed process reads its socket, so that claim comes before the close is read.
 *
 * It takes one job of queue "silent" and keeps it, so the consumer runs and the other deliveries
 * wait in the backend's buffer (prefetch 6); prints "ready" then. Once resumed it claims and
 * completes until every job of the queue was completed once, and prints
 * "applied N stale M": a claim that handed out a delivery of the closed session shows as stale.
 *
 * Usage: node --import tsx test/helpers/amqp-silent-claimer.ts <amqp url> <prefix> <jobs>
 */
import { hostname } from "node:os";
import { AmqpBackend } from "../../src/backend/amqp/index.js";
import type { ClaimRequest } from "../../src/backend/contract.js";
import { silentLogger } from "../../src/core/logger.js";

const [url, prefix, jobs] = process.argv.slice(2);
if (!url || !prefix || !jobs) throw new Error("usage: amqp-silent-claimer.ts <amqp url> <prefix> <jobs>");
const total = Number(jobs);

const backend = new AmqpBackend({ url, prefix, prefetch: total, logger: silentLogger });
const request = (limit: number): ClaimRequest => ({
  queues: ["silent"],
  names: ["job"],
  limit,
  leaseMs: 60_000,
  worker: { id: "silent-claimer", host: hostname(), pid: process.pid },
});
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

while ((await backend.claim(request(1))).length === 0) await sleep(20);
while (backend.state.buffered < total - 1) await sleep(20);

// The resumed process's first timer: a gap in the ticks is the SIGSTOP. Armed before "ready" is
// printed: the test stops this process as soon as it reads "ready", and a stop landing between the
// print and `last` being taken would hide the gap (the child then never drained: a loaded CI run).
let last = performance.now();
const timer = setInterval(() => {
  const now = performance.now();
  const gap = now - last;
  last = now;
  if (gap < 1_500) return;
  clearInterval(timer);
  void drain();
}, 20);
process.stdout.write("ready\n");

async function drain(): Promise<void> {
  const done = new Set<string>();
  let applied = 0;
  let stale = 0;
  const deadline = performance.now() + 30_000;
  while (done.size < total && performance.now() < deadline) {
    const claimed = await backend.claim(request(total)).catch(() => []);
    // Settled after a turn of the event loop, as a handler's run would be: the close, if any, is read by then.
    await sleep(50);
    const results = await backend.complete(claimed.map((c) => ({ lease: c.lease, result: null })));
    results.forEach((r, i) => {
      if (r === "applied") {
        applied++;
        done.add(claimed[i]!.job.id);
      } else stale++;
    });
    if (claimed.length === 0) await sleep(50);
  }
  process.stdout.write(`applied ${applied} stale ${stale} distinct ${done.size}\n`);
  await backend.close();
  process.exit(0);
}
