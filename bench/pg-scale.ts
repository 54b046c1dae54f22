/**
 * `npm run bench -- --backend postgres --scale [--sizes 10000,100000,1000000] [--runs 3] [--samples 100]`
 *
 * How PostgreSQL claim+complete throughput and enqueue-to-start latency grow with the backlog,
 * Conveyor beside graphile-worker, each on a fresh database of one server (a throwaway one unless
 * DATABASE_URL). For every size N:
 *
 * - backlog N waiting jobs, at least 10,000 (and, for the largest size again, N delayed jobs due
 *   in a day plus 10,000 waiting), bulk-enqueued in chunks of 5,000;
 * - throughput: one worker (concurrency 10, 500 fetched per round trip on both sides) processes
 *   5,000 jobs off the top of the backlog, `--runs` times, median reported; after each run the
 *   backlog is topped up by as many jobs as the run took;
 * - latency: enqueue-to-start of `--samples` jobs, one at a time, into an idle worker that takes
 *   only them, while the backlog sits beside them: for Conveyor the backlog is another queue (a
 *   queue is Conveyor's unit: one index range per queue), for graphile-worker another task
 *   identifier (its workers filter by task over one shared index), the way each system keeps
 *   work a worker does not take out of its way. Producer and worker use separate connections.
 * - many queues: 1,000 queues holding 5 jobs each and one worker on all of them, against one
 *   queue of 5,000: the time per claim round trip.
 *
 * Prints tables and writes docs/performance-postgres-scale.svg (throughput and p50 latency by
 * backlog size, log scale).
 */
import { writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { Logger, makeWorkerUtils, run, type Runner, type WorkerUtils } from "graphile-worker";
import pg from "pg";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { Queue, silentLogger, Worker } from "../src/index.js";
import { startThrowawayPostgres, type ThrowawayPostgres } from "../testkit/servers/postgres.js";
import { chunks, deferred, FILL_CHUNK, fmt, formatLoad, latencySamples, machineLine, median, peerVersions, percentile, sleep } from "./lib.js";

const PREFETCH = 500;
/** Jobs per throughput run; the backlog is topped up to its size again after each run. */
const TAKE = 5_000;
const quietGraphile = new Logger(() => () => undefined);

interface Point {
  label: string;
  throughput: number;
  p50: number;
  p99: number;
  heapMb: number;
}

interface System {
  name: string;
  /** Fills a fresh database with the backlog and returns what measures it. */
  open(
    waiting: number,
    delayed: number,
  ): Promise<{
    /** Jobs/s of TAKE jobs; `consumed` counts every job the run took off the backlog (a closing worker may finish a few more). */
    throughput(): Promise<{ rate: number; consumed: number }>;
    /** Adds `n` waiting jobs (the top-up after a throughput run). */
    refill(n: number): Promise<void>;
    latency(samples: number): Promise<number[]>;
    close(): Promise<void>;
  }>;
}

let dbCounter = 0;
export async function freshDatabase(baseUrl: string, prefix: string): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `scale_${prefix}_${process.pid}_${dbCounter++}`;
  const admin = async (sql: string) => {
    const c = new pg.Client({ connectionString: baseUrl });
    await c.connect();
    try {
      await c.query(sql);
    } finally {
      await c.end();
    }
  };
  await admin(`CREATE DATABASE ${pg.escapeIdentifier(name)}`);
  const url = new URL(baseUrl);
  url.pathname = `/${name}`;
  return { url: url.toString(), drop: () => admin(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`) };
}

export async function vacuumAnalyze(url: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query("VACUUM ANALYZE");
  } finally {
    await c.end();
  }
}

function conveyor(baseUrl: string): System {
  return {
    name: "Conveyor",
    async open(waiting, delayed) {
      const db = await freshDatabase(baseUrl, "conveyor");
      const backend = new PostgresBackend({ connectionString: db.url, logger: silentLogger });
      await backend.migrate();
      const q = new Queue("bench", { backend });
      for (const [s, n] of chunks(delayed, FILL_CHUNK))
        await q.addBulk(Array.from({ length: n }, (_, k) => ({ name: "noop", data: { i: s + k }, options: { delayMs: 86_400_000 } })));
      for (const [s, n] of chunks(waiting, FILL_CHUNK)) await q.addBulk(Array.from({ length: n }, (_, k) => ({ name: "noop", data: { i: s + k } })));
      await vacuumAnalyze(db.url);
      return {
        async throughput() {
          const done = deferred();
          let completed = 0;
          const t0 = performance.now();
          const worker = new Worker({
            backend,
            queues: "bench",
            concurrency: 10,
            prefetch: PREFETCH,
            logger: silentLogger,
            maintenance: false,
            handlers: { noop: () => null },
          });
          worker.on("job:completed", () => {
            if (++completed === TAKE) done.resolve();
          });
          await done.promise;
          const rate = TAKE / ((performance.now() - t0) / 1000);
          await worker.close();
          return { rate, consumed: completed };
        },
        async refill(n) {
          for (const [s, len] of chunks(n, FILL_CHUNK)) await q.addBulk(Array.from({ length: len }, (_, k) => ({ name: "noop", data: { i: s + k } })));
        },
        async latency(samples) {
          const producer = new PostgresBackend({ connectionString: db.url, logger: silentLogger });
          const lq = new Queue("latency", { backend: producer });
          let onStart: (() => void) | null = null;
          const worker = new Worker({
            backend,
            queues: "latency",
            concurrency: 10,
            logger: silentLogger,
            maintenance: false,
            pollIntervalMs: 5_000,
            handlers: { ping: () => void onStart?.() },
          });
          await sleep(200);
          const out = await latencySamples(
            [],
            samples,
            (i) => lq.add("ping", { i }),
            (fn) => (onStart = fn),
          );
          await worker.close();
          await producer.close();
          return out;
        },
        async close() {
          await backend.close();
          await db.drop();
        },
      };
    },
  };
}

function graphile(baseUrl: string): System {
  const add = async (utils: WorkerUtils, n: number, runAt?: Date) => {
    for (const [s, len] of chunks(n, FILL_CHUNK)) {
      await utils.addJobs(Array.from({ length: len }, (_, k) => ({ identifier: "noop", payload: { i: s + k }, ...(runAt ? { runAt } : {}) })));
    }
  };
  const start = (url: string, taskList: Parameters<typeof run>[0]["taskList"]): Promise<Runner> =>
    run({
      connectionString: url,
      concurrency: 10,
      maxPoolSize: 12,
      noHandleSignals: true,
      logger: quietGraphile,
      taskList,
      preset: { worker: { localQueue: { size: PREFETCH }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
    });
  return {
    name: "graphile-worker",
    async open(waiting, delayed) {
      const db = await freshDatabase(baseUrl, "graphile");
      const utils = await makeWorkerUtils({ connectionString: db.url, logger: quietGraphile });
      await utils.migrate();
      await add(utils, delayed, new Date(Date.now() + 86_400_000));
      await add(utils, waiting);
      await vacuumAnalyze(db.url);
      const count = async () => {
        const c = new pg.Client({ connectionString: db.url });
        await c.connect();
        try {
          const { rows } = await c.query<{ n: string }>("SELECT count(*) AS n FROM graphile_worker._private_jobs");
          return Number(rows[0]!.n);
        } finally {
          await c.end();
        }
      };
      return {
        async throughput() {
          const before = await count();
          const done = deferred();
          let seen = 0;
          const t0 = performance.now();
          const runner = await start(db.url, { noop: () => void (++seen === TAKE && done.resolve()) });
          await done.promise;
          // Completed jobs are deleted: done once TAKE fewer rows are left (the batched completions committed).
          while ((await count()) > before - TAKE) await sleep(5);
          const rate = TAKE / ((performance.now() - t0) / 1000);
          await runner.stop();
          return { rate, consumed: before - (await count()) };
        },
        refill: (n) => add(utils, n),
        async latency(samples) {
          let onStart: (() => void) | null = null;
          const runner = await start(db.url, { ping: () => void onStart?.() });
          await sleep(200);
          const out = await latencySamples(
            [],
            samples,
            (i) => utils.addJob("ping", { i }),
            (fn) => (onStart = fn),
          );
          await runner.stop();
          return out;
        },
        async close() {
          await utils.release();
          await db.drop();
        },
      };
    },
  };
}

/** Median ms per claim round trip over `claims` claims of 5 jobs, Conveyor worker over `queues` queues. */
export async function manyQueues(
  baseUrl: string,
  queueCount: number,
  perQueue: number,
  claims: number,
  onlyFirstFilled = false,
  // bench/pg-ab.ts passes main's PostgresBackend here to compare it with this tree's.
  makeBackend: (url: string) => PostgresBackend = (url) => new PostgresBackend({ connectionString: url, logger: silentLogger }),
): Promise<number> {
  const db = await freshDatabase(baseUrl, "queues");
  const backend = makeBackend(db.url);
  try {
    await backend.migrate();
    const names = Array.from({ length: queueCount }, (_, i) => `q${String(i).padStart(4, "0")}`);
    // Every queue is known to the store (it had a job once); with onlyFirstFilled all but the first are empty now.
    for (const [i, name] of names.entries()) {
      const q = new Queue(name, { backend });
      if (onlyFirstFilled && i > 0) {
        const [added] = await q.addBulk([{ name: "noop", data: null }]);
        await backend.cancel(added!.id);
        await backend.remove(added!.id);
      } else {
        await q.addBulk(Array.from({ length: perQueue }, (_, k) => ({ name: "noop", data: { k } })));
      }
    }
    await vacuumAnalyze(db.url);
    const times: number[] = [];
    const worker = { id: "scale", host: "bench", pid: process.pid };
    for (let i = 0; i < claims; i++) {
      const t0 = performance.now();
      const claimed = await backend.claim({ queues: names, names: ["noop"], worker, limit: 5, leaseMs: 60_000 });
      times.push(performance.now() - t0);
      await backend.complete(claimed.map((c) => ({ lease: c.lease, result: null })));
    }
    return median(times);
  } finally {
    await backend.close();
    await db.drop();
  }
}

/** A small SVG: one panel per metric, log-scale x (backlog), one line per system. */
function svg(sizes: number[], results: Map<string, Point[]>, loadLine: string): string {
  const W = 420,
    H = 260,
    L = 60,
    R = 20,
    T = 40,
    B = 45;
  const colors = ["#1f77b4", "#d62728", "#2ca02c"];
  const panel = (x0: number, title: string, value: (p: Point) => number, unit: string) => {
    const all = [...results.values()].flatMap((ps) => ps.slice(0, sizes.length).map(value));
    const max = Math.max(...all) * 1.15;
    const lx = (n: number) => x0 + L + ((Math.log10(n) - Math.log10(sizes[0]!)) / (Math.log10(sizes.at(-1)!) - Math.log10(sizes[0]!) || 1)) * (W - L - R);
    const ly = (v: number) => T + (1 - v / max) * (H - T - B);
    let out = `<text x="${x0 + W / 2}" y="20" text-anchor="middle" font-weight="bold">${title}</text>`;
    out += `<line x1="${x0 + L}" y1="${H - B}" x2="${x0 + W - R}" y2="${H - B}" stroke="#333"/><line x1="${x0 + L}" y1="${T}" x2="${x0 + L}" y2="${H - B}" stroke="#333"/>`;
    for (const n of sizes) out += `<text x="${lx(n)}" y="${H - B + 16}" text-anchor="middle" font-size="11">${n >= 1e6 ? `${n / 1e6}M` : `${n / 1e3}k`}</text>`;
    for (let k = 0; k <= 4; k++) {
      const v = (max / 4) * k;
      out += `<text x="${x0 + L - 6}" y="${ly(v) + 4}" text-anchor="end" font-size="11">${fmt(v)}</text><line x1="${x0 + L}" y1="${ly(v)}" x2="${x0 + W - R}" y2="${ly(v)}" stroke="#eee"/>`;
    }
    out += `<text x="${x0 + W / 2}" y="${H - 8}" text-anchor="middle" font-size="11">waiting jobs in the backlog (log scale); y: ${unit}</text>`;
    [...results.entries()].forEach(([name, ps], i) => {
      const pts = ps
        .slice(0, sizes.length)
        .map((p, j) => `${lx(sizes[j]!).toFixed(1)},${ly(value(p)).toFixed(1)}`)
        .join(" ");
      out += `<polyline fill="none" stroke="${colors[i % colors.length]}" stroke-width="2" points="${pts}"/>`;
      out += `<text x="${x0 + L + 8}" y="${T + 14 + 14 * i}" font-size="12" fill="${colors[i % colors.length]}">${name}</text>`;
    });
    return out;
  };
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${2 * W}" height="${H + 20}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
${panel(0, "claim + complete throughput", (p) => p.throughput, "jobs/s")}
${panel(W, "enqueue-to-start latency p50", (p) => p.p50, "ms")}
<text x="${W}" y="${H + 14}" text-anchor="middle" font-size="10" fill="#555">${loadLine}</text>
</svg>
`;
}

export async function main(options: { sizes: number[]; runs: number; samples: number; svgPath: string }): Promise<void> {
  let server: ThrowawayPostgres | null = null;
  let url = process.env.DATABASE_URL;
  if (!url) {
    server = await startThrowawayPostgres({ database: "bench" });
    url = server.url;
  }
  const loadStart = loadavg();
  try {
    console.log(`# PostgreSQL growth\n\n${peerVersions(["graphile-worker"])}; ${machineLine()}\n`);
    const systems = [conveyor(url), graphile(url)];
    const largest = options.sizes.at(-1)!;
    const shapes: Array<{ label: string; waiting: number; delayed: number }> = [
      ...options.sizes.map((n) => ({ label: `${fmt(n)} waiting`, waiting: n, delayed: 0 })),
      { label: `${fmt(largest)} delayed + ${fmt(2 * TAKE)} waiting`, waiting: 2 * TAKE, delayed: largest },
    ];
    const results = new Map<string, Point[]>(systems.map((s) => [s.name, []]));
    for (const shape of shapes) {
      for (const system of systems) {
        // At least TAKE jobs, and the worker's buffer, must be there for a throughput run.
        const waiting = Math.max(shape.waiting, 2 * TAKE);
        const opened = await system.open(waiting, shape.delayed);
        try {
          const rates: number[] = [];
          const p50s: number[] = [];
          const p99s: number[] = [];
          for (let r = 0; r < options.runs; r++) {
            const { rate, consumed } = await opened.throughput();
            rates.push(rate);
            await opened.refill(consumed);
            const samples = await opened.latency(options.samples);
            p50s.push(percentile(samples, 50));
            p99s.push(percentile(samples, 99));
          }
          const point = {
            label: shape.label,
            throughput: median(rates),
            p50: median(p50s),
            p99: median(p99s),
            heapMb: process.memoryUsage().heapUsed / 2 ** 20,
          };
          results.get(system.name)!.push(point);
          process.stderr.write(
            `  .. ${system.name} ${shape.label}: ${rates.map(fmt).join(" / ")} jobs/s; p50 ${p50s.map(fmt).join(" / ")} ms; load ${formatLoad(loadavg())}\n`,
          );
        } finally {
          await opened.close();
        }
      }
    }
    console.log(`Medians of ${options.runs} runs per cell (${TAKE} jobs per throughput run, ${options.samples} latency samples per run).\n`);
    console.log(`| backlog | ${systems.map((s) => `${s.name} jobs/s | ${s.name} p50 / p99 ms`).join(" | ")} | Conveyor ÷ graphile-worker jobs/s |`);
    console.log(`| --- | ${systems.map(() => "---: | ---:").join(" | ")} | ---: |`);
    shapes.forEach((shape, i) => {
      const cells = systems.map((s) => {
        const p = results.get(s.name)![i]!;
        return `${fmt(p.throughput)} | ${fmt(p.p50)} / ${fmt(p.p99)}`;
      });
      const ratio = results.get("Conveyor")![i]!.throughput / results.get("graphile-worker")![i]!.throughput;
      console.log(`| ${shape.label} | ${cells.join(" | ")} | ${ratio.toFixed(2)}x |`);
    });
    const c = results.get("Conveyor")!;
    console.log(
      `\nConveyor at ${fmt(largest)} ÷ at ${fmt(options.sizes[0]!)}: throughput ${(c[options.sizes.length - 1]!.throughput / c[0]!.throughput).toFixed(2)}x, ` +
        `p50 latency ${(c[options.sizes.length - 1]!.p50 / c[0]!.p50).toFixed(2)}x; bench process heap ${c.map((p) => fmt(p.heapMb)).join(" / ")} MB after each size.`,
    );

    console.log("\n## Many queues (Conveyor): median ms per claim of 5 jobs, one worker over every queue\n");
    const one = await manyQueues(url, 1, 5_000, 200);
    const many = await manyQueues(url, 1_000, 5, 200);
    const empty = await manyQueues(url, 1_000, 5_000, 200, true);
    console.log(
      `| queues × jobs | ms per claim |\n| --- | ---: |\n| 1 × 5,000 | ${fmt(one)} |\n| 1,000 × 5 | ${fmt(many)} |\n` +
        `| 1 × 5,000 + 999 empty | ${fmt(empty)} |`,
    );
    const loadLine = `load average ${formatLoad(loadStart)} at start, ${formatLoad(loadavg())} at end; ${machineLine()}`;
    console.log(`\n${loadLine}`);
    writeFileSync(options.svgPath, svg(options.sizes, results, loadLine));
    console.log(`\nwrote ${options.svgPath}`);
  } finally {
    await server?.stop();
  }
}
