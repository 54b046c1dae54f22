/**
 * `npm start`: the checkout from the seeds on embedded SQLite, with the HTTP API.
 *
 * Orders arrive as real HTTP requests to the Conveyor API (POST /v1/queues/payments/jobs with an
 * Idempotency-Key), answered at once with 202 Accepted, a job id and a poll URL. Workers charge, render the invoice and send the email, with
 * realistic latency, transient failures (503s, 429s: retried with backoff) and permanent ones
 * (declined cards: dead at once). The terminal shows live what is waiting, running, retrying and
 * dead. Ctrl-C shuts down gracefully; a second Ctrl-C stops at once.
 *
 *   npm start                         # 20 seconds of traffic, then drain and a summary
 *   npm start -- --seconds 60 --rate 20 --port 3000
 *
 * While it runs, the API is yours too (no API keys: it listens on 127.0.0.1 only):
 *   curl -s localhost:3000/v1/queues
 *   curl -s -XPOST localhost:3000/v1/queues/payments/jobs -H 'content-type: application/json' \
 *        -H 'idempotency-key: my-order-1' \
 *        -d '{"name":"charge-payment","data":{"orderId":"my-1","amountCents":1200,"card":"4242424242424242"}}'
 *   curl -s localhost:3000/v1/jobs/<jobId>            curl -N localhost:3000/v1/jobs/<jobId>/events
 */
import { mkdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { installShutdownSignals, Queue, silentLogger, Worker, type JobRecord, type QueueStats } from "conveyor-jobs";
import { createServer } from "conveyor-jobs/http";
import { SqliteBackend } from "conveyor-jobs/sqlite";
import { chargePayment, checkoutHandlers, renderInvoice, sendEmail } from "./jobs.js";
import { forensics, grid, shortDuration } from "./view.js";

const { values: args } = parseArgs({
  options: {
    seconds: { type: "string", default: "20" },
    rate: { type: "string", default: "8" },
    db: { type: "string", default: resolve(".tmp/demo/checkout.db") },
    port: { type: "string", default: "3000" },
  },
});
const trafficSeconds = Number(args.seconds);
const ordersPerSecond = Number(args.rate);
const dbPath = args.db;

mkdirSync(join(dbPath, ".."), { recursive: true });
for (const suffix of ["", "-wal", "-shm"]) rmSync(dbPath + suffix, { force: true });

const backend = new SqliteBackend({ path: dbPath });
const documents = new Queue("documents", { backend });
const email = new Queue("email", { backend });
const handlers = checkoutHandlers({ documents, email });

// Separate queues with their own concurrency: a slow invoice renderer never delays a charge.
const workers = [
  new Worker({ backend, queues: "payments", handlers: handlers.payments, concurrency: 8, logger: silentLogger, leaseMs: 5_000 }),
  new Worker({ backend, queues: "documents", handlers: handlers.documents, concurrency: 4, logger: silentLogger, leaseMs: 5_000 }),
  new Worker({ backend, queues: "email", handlers: handlers.email, concurrency: 6, logger: silentLogger, leaseMs: 5_000 }),
];

const recent: string[] = [];
const note = (line: string) => {
  recent.unshift(`${new Date().toISOString().slice(11, 23)}  ${line}`);
  recent.length = Math.min(recent.length, 8);
};
const totals = { orders: 0, completed: 0, retries: 0, dead: 0 };
for (const w of workers) {
  w.on("job:completed", () => totals.completed++);
  w.on("job:retry-scheduled", ({ job, error, delayMs }) => {
    totals.retries++;
    note(`retry  ${job.name} ${job.id.slice(-6)} attempt ${job.attempt}/${job.maxAttempts} in ${delayMs}ms — ${error.message}`);
  });
  w.on("job:dead", ({ job, error, reason }) => {
    totals.dead++;
    note(`DEAD   ${job.name} ${job.id.slice(-6)} (${reason}) — ${error.name}: ${error.message}`);
  });
}

// The API: the 202 contract, status, SSE. Payloads are validated against the job schemas (422).
const api = await createServer({ backend, apiKeys: false, jobs: [chargePayment, renderInvoice, sendEmail], logger: false });
let apiUrl: string;
try {
  apiUrl = await api.listen({ host: "127.0.0.1", port: Number(args.port) });
} catch {
  apiUrl = await api.listen({ host: "127.0.0.1", port: 0 }); // the port is taken: any free one
}

// The web tier: each checkout is one POST answered with 202 Accepted and a job id; the work
// happens out of band. The Idempotency-Key makes a retried request return the same job.
let orderSeq = 0;
let lastAccepted = "";
const traffic = setInterval(() => {
  const orderId = `ord_${String(++orderSeq).padStart(5, "0")}`;
  const card = Math.random() < 0.05 ? "4000000000000002" : "4242424242424242";
  void fetch(`${apiUrl}/v1/queues/payments/jobs`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": `checkout-${orderId}` },
    body: JSON.stringify({ name: "charge-payment", data: { orderId, amountCents: 1_000 + Math.floor(Math.random() * 20_000), card } }),
  })
    .then(async (response) => {
      if (response.status === 202) {
        totals.orders++;
        const body = (await response.json()) as { pollUrl: string };
        lastAccepted = `202 Accepted, poll ${body.pollUrl}`;
      } else {
        note(`HTTP ${response.status} for ${orderId}: ${await response.text()}`);
      }
    })
    .catch((error: unknown) => note(`POST failed: ${String(error)}`));
}, 1000 / ordersPerSecond);

const started = Date.now();
const tty = process.stdout.isTTY;
let lastPlain = 0;

async function render(final = false): Promise<void> {
  const stats: QueueStats[] = await backend.stats();
  const active: JobRecord[] = await backend.list({ state: "active" }, { limit: 6 });
  const elapsed = shortDuration(Date.now() - started);
  const statsTable = grid(
    ["queue", "waiting", "running", "retrying", "completed", "dead", "oldest waiting"],
    stats.map((s) => [s.queue, s.counts.waiting, s.counts.active, s.counts.scheduled, s.counts.completed, s.counts.dead, shortDuration(s.oldestWaitingAgeMs)]),
  );
  if (tty && !final) {
    const running = active.map(
      (j) => `  ${j.name.padEnd(15)} ${j.id.slice(-6)} attempt ${j.attempt}${j.progress ? ` progress ${JSON.stringify(j.progress)}` : ""}`,
    );
    process.stdout.write(
      "\x1b[H\x1b[2J" +
        `Conveyor checkout demo — ${elapsed} — ${totals.orders} orders accepted (202) — sqlite:${dbPath}\n` +
        `API ${apiUrl}/v1 (try: curl -s ${apiUrl}/v1/queues) — last: ${lastAccepted}\n` +
        `${trafficOn ? "traffic on" : "traffic stopped, draining"}; Ctrl-C shuts down gracefully\n\n` +
        statsTable +
        "\n\nrunning now\n" +
        (running.join("\n") || "  (idle)") +
        "\n\nrecent retries and dead letters\n" +
        (recent.map((l) => `  ${l}`).join("\n") || "  (none yet)") +
        "\n",
    );
  } else if (final || Date.now() - lastPlain > 2_000) {
    lastPlain = Date.now();
    const sum = (k: keyof QueueStats["counts"]) => stats.reduce((n, s) => n + s.counts[k], 0);
    console.log(
      `[${elapsed}] orders ${totals.orders}  waiting ${sum("waiting")}  running ${sum("active")}  retrying ${sum("scheduled")}  completed ${sum("completed")}  dead ${sum("dead")}`,
    );
  }
}

let trafficOn = true;
const screen = setInterval(() => void render(), tty ? 250 : 500);

function stopTraffic(): void {
  clearInterval(traffic);
  trafficOn = false;
}

async function finish(reason: string, drainFirst: boolean): Promise<number> {
  stopTraffic();
  // Drain: wait until nothing is waiting, running or due to retry soon (bounded).
  const drainDeadline = drainFirst ? Date.now() + 15_000 : 0;
  while (Date.now() < drainDeadline) {
    const s = await backend.stats();
    if (s.every((q) => q.counts.waiting + q.counts.active + q.counts.scheduled === 0)) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  clearInterval(screen);
  await api.close();
  const closed = await Promise.all(workers.map((w) => w.close({ reason })));
  await render(true);
  const stats = await backend.stats();
  console.log(
    "\n" +
      grid(
        ["queue", "waiting", "running", "retrying", "completed", "dead"],
        stats.map((s) => [s.queue, s.counts.waiting, s.counts.active, s.counts.scheduled, s.counts.completed, s.counts.dead]),
      ),
  );
  console.log(`\n${totals.orders} orders, ${totals.completed} jobs completed, ${totals.retries} retries, ${totals.dead} dead.`);
  const [dead] = await backend.list({ state: "dead" }, { limit: 1 });
  if (dead) {
    console.log("\nA dead letter keeps its forensics (conveyor dlq show):\n");
    console.log(forensics(dead));
  }
  console.log(`\nThe API ran at ${apiUrl}/v1 (README: the curl walkthrough).`);
  console.log(`\nInspect it yourself:\n  npx tsx src/cli/bin.ts stats --db sqlite:${dbPath}\n  npx tsx src/cli/bin.ts dlq ls --db sqlite:${dbPath}`);
  await backend.close();
  const released = closed.flatMap((c) => c.releasedJobIds);
  if (released.length) console.log(`released on shutdown: ${released.join(", ")}`);
  return released.length ? 1 : 0;
}

let finishing: Promise<number> | null = null;
const end = (reason: string, drainFirst: boolean) => (finishing ??= finish(reason, drainFirst));
// Ctrl-C: the library's standard policy (drain within the grace period, second signal forceful).
installShutdownSignals(
  workers.map((w) => ({ close: (o?: { force?: boolean; reason?: string }) => (stopTraffic(), w.close(o)) })),
  { logger: silentLogger, exit: (code) => void end("signal", false).then((c) => process.exit(Math.max(c, code))) },
);
setTimeout(() => void end("demo finished", true).then((code) => process.exit(code)), trafficSeconds * 1000);
