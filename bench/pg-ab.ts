/**
 * A/B of the PostgreSQL backend: main's (imported from a checkout of main, `--main`, default
 * /work/main, with its own migrations on its own database) against this tree's, in one process,
 * their runs interleaved (A, B, A, B, …), medians and paired ratios. Figures: bulk enqueue,
 * processing at concurrency 10 with prefetch 500 (bench/postgres.ts' shape), WAL bytes per job
 * in that processing run and in the bulk enqueue, processing of jobs that each wait 1 ms (a timer)
 * at concurrency 50 with prefetch 500, where the Worker's claims ride with its completions
 * (`completeAndClaim`; no-op jobs drain the buffer within one turn of the event loop, so their
 * claims go alone), the server's CPU time per job in both processing runs (every server process,
 * from /proc; left out with DATABASE_URL), processing at concurrency 10 without prefetch (the
 * Worker's default: claims of about ten jobs), enqueue→start latency p50 and p99 (bench/postgres.ts'
 * figure), and the many-queues claim (bench/pg-scale.ts: ms per claim of 5, one worker naming 1,000 queues).
 *
 * A third subject, "this, event log off", is this tree's backend with `eventLog: false`
 * (PostgresBackendOptions.eventLog): what the event log costs, beside main, in the same run.
 *
 * `npm run bench -- --backend postgres --ab [--main /work/main] [--jobs 20000] [--runs 3]`
 */
import { loadavg } from "node:os";
import { pathToFileURL } from "node:url";
import pg from "pg";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { Queue, silentLogger } from "../src/index.js";
import { startThrowawayPostgres, type ThrowawayPostgres } from "../testkit/servers/postgres.js";
import {
  chunks,
  conveyorLatency,
  conveyorProcessFilled,
  FILL_CHUNK,
  fmt,
  formatLoad,
  interleaved,
  machineLine,
  median,
  noopJobs,
  pairedRatio,
  percentile,
  rate,
  serverCpuMs,
} from "./lib.js";
import { freshDatabase, manyQueues } from "./pg-scale.js";

type BackendClass = typeof PostgresBackend;

interface Variant {
  readonly name: string;
  readonly make: (url: string) => PostgresBackend;
}

async function walLsn(url: string): Promise<string> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query("CHECKPOINT");
    return (await c.query<{ lsn: string }>("SELECT pg_current_wal_lsn() AS lsn")).rows[0]!.lsn;
  } finally {
    await c.end();
  }
}

async function walBytesSince(url: string, from: string): Promise<number> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return Number((await c.query<{ n: string }>("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1) AS n", [from])).rows[0]!.n);
  } finally {
    await c.end();
  }
}

/** Enqueue→start samples per latency run (bench/postgres.ts takes 300). */
const LATENCY_SAMPLES = 300;

export async function main(options: { mainDir: string; jobs: number; runs: number }): Promise<void> {
  const mainModule = (await import(pathToFileURL(`${options.mainDir}/src/backend/postgres/index.ts`).href)) as { PostgresBackend: BackendClass };
  const variants: Variant[] = [
    { name: "main", make: (url) => new mainModule.PostgresBackend({ connectionString: url, logger: silentLogger }) },
    { name: "this branch", make: (url) => new PostgresBackend({ connectionString: url, logger: silentLogger }) },
    { name: "this, event log off", make: (url) => new PostgresBackend({ connectionString: url, logger: silentLogger, eventLog: false }) },
  ];
  let server: ThrowawayPostgres | null = null;
  let url = process.env.DATABASE_URL;
  if (!url) {
    server = await startThrowawayPostgres({ database: "bench" });
    url = server.url;
  }
  const base = url;
  const loadStart = loadavg();
  console.log(`A/B: main (${options.mainDir}) against this tree; ${options.jobs} jobs; ${machineLine()}\n`);
  const withBackend = async <T>(v: Variant, fn: (b: PostgresBackend, url: string) => Promise<T>): Promise<T> => {
    const db = await freshDatabase(base, "ab");
    const b = v.make(db.url);
    try {
      await b.migrate();
      return await fn(b, db.url);
    } finally {
      await b.close();
      await db.drop();
    }
  };
  const rows: { label: string; unit: string; runs: number[][] }[] = [];
  const figure = async (label: string, unit: string, measure: (v: Variant) => Promise<number>) => {
    rows.push({ label, unit, runs: await interleaved(variants, options.runs, label, measure, (x) => `${fmt(x)} ${unit}`) });
  };
  try {
    const n = options.jobs;
    const enqueueWal: number[][] = variants.map(() => []);
    await figure(`bulk enqueue (${n} jobs)`, "jobs/s", (v) =>
      withBackend(v, async (b, dbUrl) => {
        const q = new Queue("bench", { backend: b });
        const all = noopJobs(0, n);
        const from = await walLsn(dbUrl);
        const jobsPerS = await rate(n, () => q.addBulk(all));
        enqueueWal[variants.indexOf(v)]!.push((await walBytesSince(dbUrl, from)) / n);
        return jobsPerS;
      }),
    );
    rows.push({ label: "WAL per job, bulk enqueue", unit: "bytes", runs: enqueueWal });
    const dataDir = server?.dataDir ?? null;
    /** One processing figure: jobs/s, and beside it the server's CPU µs per job (and WAL bytes per job when `wal`). */
    const processing = async (label: string, concurrency: number, handler: () => unknown, options: { wal?: boolean; prefetch?: number } = {}) => {
      const wal: number[][] = variants.map(() => []);
      const cpu: number[][] = variants.map(() => []);
      await figure(label, "jobs/s", (v) =>
        withBackend(v, async (b, dbUrl) => {
          const q = new Queue("bench", { backend: b });
          // Filled first, so the WAL and CPU figures count processing alone.
          for (const [start, length] of chunks(n, FILL_CHUNK)) await q.addBulk(noopJobs(start, length));
          const from = await walLsn(dbUrl);
          const cpu0 = dataDir === null ? 0 : await serverCpuMs(dataDir);
          const jobsPerS = await conveyorProcessFilled(b, n, concurrency, options.prefetch ?? 500, handler);
          if (dataDir !== null) cpu[variants.indexOf(v)]!.push((((await serverCpuMs(dataDir)) - cpu0) * 1000) / n);
          wal[variants.indexOf(v)]!.push((await walBytesSince(dbUrl, from)) / n);
          return jobsPerS;
        }),
      );
      if (options.wal === true) rows.push({ label: "WAL per job, processing", unit: "bytes", runs: wal });
      if (dataDir !== null) rows.push({ label: `server CPU per job, ${label}`, unit: "µs", runs: cpu });
    };
    await processing("processing, concurrency 10, prefetch 500", 10, () => null, { wal: true });
    await processing("processing, 1 ms jobs, concurrency 50, prefetch 500", 50, () => new Promise((resolve) => setTimeout(resolve, 1)));
    // The Worker's default (no prefetch): each claim asks for the slots free, about ten jobs.
    await processing("processing, concurrency 10, no prefetch", 10, () => null, { prefetch: 0 });
    // Enqueue→start across two backends (bench/postgres.ts' latency figure), p50 and p99 of one set
    // of samples; conveyorLatency closes both backends (withBackend's close comes after, a no-op).
    const p99: number[][] = variants.map(() => []);
    await figure(`latency p50 (${LATENCY_SAMPLES} samples)`, "ms", (v) =>
      withBackend(v, async (b, dbUrl) => {
        const samples = await conveyorLatency(b, v.make(dbUrl), LATENCY_SAMPLES);
        p99[variants.indexOf(v)]!.push(percentile(samples, 99));
        return percentile(samples, 50);
      }),
    );
    rows.push({ label: `latency p99 (${LATENCY_SAMPLES} samples)`, unit: "ms", runs: p99 });
    for (const [label, queues, perQueue, emptyButFirst] of [
      ["claim of 5, 1 queue × 5,000 jobs", 1, 5_000, false],
      ["claim of 5, 1,000 queues × 5 jobs", 1_000, 5, false],
      ["claim of 5, 1 queue × 5,000 + 999 empty", 1_000, 5_000, true],
    ] as const) {
      await figure(label, "ms", (v) => manyQueues(base, queues, perQueue, 200, emptyButFirst, v.make));
    }
  } finally {
    await server?.stop();
  }
  const others = variants.slice(1);
  console.log(`\nMedians of ${options.runs} runs, interleaved; ratios ÷ main, paired per round.\n`);
  console.log(
    `| figure | unit | ${variants.map((v) => v.name).join(" | ")} | ${others.map((v) => `${v.name} ÷ main`).join(" | ")} |\n` +
      `| --- | --- |${" ---: |".repeat(variants.length + others.length)}`,
  );
  for (const r of rows) {
    const ratios = others.map((_, i) => `${pairedRatio(r.runs[i + 1]!, r.runs[0]!).toFixed(2)}x`);
    console.log(`| ${r.label} | ${r.unit} | ${r.runs.map((x) => fmt(median(x))).join(" | ")} | ${ratios.join(" | ")} |`);
  }
  console.log("\nEvery run:");
  for (const r of rows) console.log(`  ${r.label}: ${variants.map((v, i) => `${v.name} ${r.runs[i]!.map(fmt).join(" / ")}`).join("; ")}`);
  console.log(`\nLoad average at start ${formatLoad(loadStart)}, at end ${formatLoad(loadavg())}.`);
}
