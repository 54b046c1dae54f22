/**
 * `npx tsx bench/http.ts [--backend sqlite|postgres|redis] [--db URL] [--connections 50]
 *                        [--duration 10] [--runs 3] [--idempotent]`
 *
 * Enqueue throughput and latency of the HTTP API: `POST /v1/queues/bench/jobs` with an API key
 * (authentication included, as in production), measured with autocannon. The server runs in a
 * child process (one core) and autocannon in this one (the other core), so the load generator
 * does not steal the server's event loop. Stores: a fresh SQLite file per run (WAL,
 * synchronous=NORMAL, the default); PostgreSQL (fresh schema per run) on DATABASE_URL or a
 * throwaway server; Redis (fresh key prefix per run) on REDIS_URL or a throwaway server; or any
 * `--db URL` as is.
 *
 * Each run: 2 s of warm-up, then `--duration` seconds measured. Prints the median run.
 * Not part of `npm test`: timings belong here, never in assertions.
 */
import { fork, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import autocannon from "autocannon";
import { childExecArgv } from "./lib.js";

const API_KEY = "cvk_bench-0123456789abcdef0123456789abcdef";

const { values } = parseArgs({
  options: {
    backend: { type: "string", default: "sqlite" },
    db: { type: "string" },
    connections: { type: "string", default: "50" },
    duration: { type: "string", default: "10" },
    runs: { type: "string", default: "3" },
    idempotent: { type: "boolean", default: false },
    serve: { type: "string" }, // internal: run the server for this URL
    json: { type: "boolean", default: false },
  },
});

if (values.serve !== undefined) {
  await serve(values.serve);
} else {
  await main();
}

/** Child process: the server, listening on a free port it reports to the parent. */
async function serve(url: string): Promise<void> {
  const { openBackend } = await import("../src/backend/open.js");
  const { createServer, hashApiKey } = await import("../src/http/index.js");
  const backend = await openBackend(url);
  const app = await createServer({
    backend,
    apiKeys: [{ id: "bench", sha256: hashApiKey(API_KEY), scopes: ["enqueue", "read"] }],
    logger: false,
  });
  await app.listen({ port: 0, host: "127.0.0.1" });
  process.send!({ port: (app.server.address() as { port: number }).port, db: backend.description });
  process.on("message", (m) => {
    if (m === "stop")
      void app
        .close()
        .then(() => backend.close())
        .then(() => process.exit(0));
  });
}

interface RunResult {
  requestsPerSecond: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  non2xx: number;
  errors: number;
  total: number;
}

async function startChild(url: string): Promise<{ child: ChildProcess; port: number; db: string }> {
  const child = fork(new URL(import.meta.url).pathname, ["--serve", url], { execArgv: [...childExecArgv], stdio: ["ignore", "inherit", "inherit", "ipc"] });
  const { port, db } = await new Promise<{ port: number; db: string }>((resolve, reject) => {
    child.once("message", (m) => resolve(m as { port: number; db: string }));
    child.once("exit", (code) => reject(new Error(`server exited with ${code}`)));
  });
  return { child, port, db };
}

function load(port: number, durationS: number): Promise<autocannon.Result> {
  let n = 0;
  return autocannon({
    url: `http://127.0.0.1:${port}`,
    connections: Number(values.connections),
    duration: durationS,
    requests: [
      {
        method: "POST",
        path: "/v1/queues/bench/jobs",
        headers: { "content-type": "application/json", authorization: `Bearer ${API_KEY}` },
        setupRequest: (req) => {
          n++;
          const body = JSON.stringify({ name: "noop", data: { i: n, userId: `u_${n % 1000}` } });
          return values.idempotent ? { ...req, body, headers: { ...req.headers, "idempotency-key": `k-${process.pid}-${n}` } } : { ...req, body };
        },
      },
    ],
  });
}

async function oneRun(url: string): Promise<RunResult & { db: string }> {
  const { child, port, db } = await startChild(url);
  try {
    await load(port, 2); // warm-up: JIT, page cache, SQLite's WAL
    const r = await load(port, Number(values.duration));
    return {
      db,
      requestsPerSecond: r.requests.average,
      p50: r.latency.p50,
      p90: r.latency.p90,
      p99: r.latency.p99,
      max: r.latency.max,
      non2xx: r.non2xx,
      errors: r.errors + r.timeouts,
      total: r.requests.total,
    };
  } finally {
    child.send("stop");
    await new Promise((resolve) => child.once("exit", resolve));
  }
}

// A declaration, not a const: main() runs from the top-level await above, before later consts exist.
function round2(x: number): number {
  return Math.round(x * 100) / 100;
}

/** Where each run's fresh store lives, and how to clean up. */
async function stores(): Promise<{ next(): string; stop(): Promise<void> }> {
  const dirs: string[] = [];
  let n = 0;
  const tag = () => `bench_${process.pid}_${n++}`;
  if (values.db) return { next: () => values.db!, stop: async () => {} };
  switch (values.backend) {
    case "sqlite":
      return {
        next: () => {
          const dir = mkdtempSync(join(tmpdir(), "conveyor-http-bench-"));
          dirs.push(dir);
          return `sqlite:${join(dir, "bench.db")}`;
        },
        stop: async () => {
          for (const d of dirs) rmSync(d, { recursive: true, force: true });
        },
      };
    case "postgres": {
      const { startThrowawayPostgres } = await import("../testkit/servers/postgres.js");
      const server = process.env.DATABASE_URL ? null : await startThrowawayPostgres();
      const url = process.env.DATABASE_URL ?? server!.url;
      return { next: () => `${url}${url.includes("?") ? "&" : "?"}schema=${tag()}`, stop: async () => server?.stop() };
    }
    case "redis": {
      const { startThrowawayRedis } = await import("../testkit/servers/redis.js");
      const server = process.env.REDIS_URL ? null : await startThrowawayRedis();
      const url = process.env.REDIS_URL ?? server!.url;
      return { next: () => `${url}${url.includes("?") ? "&" : "?"}prefix=${tag()}`, stop: async () => server?.stop() };
    }
    default:
      throw new Error(`--backend ${values.backend}: use sqlite, postgres or redis (or --db URL)`);
  }
}

async function main(): Promise<void> {
  const runs = Number(values.runs);
  const started = performance.now();
  const loadStart = loadavg();
  const results: Array<RunResult & { db: string }> = [];
  const where = await stores();
  try {
    for (let i = 0; i < runs; i++) {
      const r = await oneRun(where.next());
      results.push(r);
      if (!values.json) {
        console.error(
          `run ${i + 1}/${runs}: ${Math.round(r.requestsPerSecond)} req/s, p50 ${r.p50} ms, p99 ${r.p99} ms, non-2xx ${r.non2xx}, errors ${r.errors}`,
        );
      }
    }
  } finally {
    await where.stop();
  }
  const median = [...results].sort((a, b) => a.requestsPerSecond - b.requestsPerSecond)[Math.floor(results.length / 2)]!;
  const summary = {
    store: median.db.replace(/\/tmp\/[^/]+\//, "<tmp>/").replace(/\/\/[^@/]*@/, "//"),
    cpus: availableParallelism(),
    connections: Number(values.connections),
    durationSeconds: Number(values.duration),
    idempotencyKey: values.idempotent,
    runs,
    medianRun: {
      requestsPerSecond: Math.round(median.requestsPerSecond),
      latencyMs: { p50: median.p50, p90: median.p90, p99: median.p99, max: median.max },
      non2xx: median.non2xx,
      errors: median.errors,
    },
    allRuns: results.map((r) => Math.round(r.requestsPerSecond)),
    node: process.version,
    // The machine's state: on a shared machine the figures mean little without it.
    loadAverage1m5m15m: { start: loadStart.map(round2), end: loadavg().map(round2) },
    elapsedSeconds: Math.round((performance.now() - started) / 1000),
  };
  console.log(JSON.stringify(summary, null, 2));
}
