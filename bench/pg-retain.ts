/**
 * `npm run bench -- --backend postgres --retain-processed [--retained 10000000] [--runs 3] [--samples 100] [--fillers 2]`
 * (bench/run.ts parses the options)
 *
 * Issue #12 on PostgreSQL: do finished jobs kept under retention slow claims? One throwaway server,
 * one database, queue "bench":
 * 1. a backlog of 10,000 waiting jobs on the empty table, measured `--runs` times (claim+complete
 *    throughput of 5,000 jobs by one Worker, concurrency 10, prefetch 500, the backlog topped up
 *    after each run; then enqueue-to-start latency of `--samples` jobs into an idle worker on
 *    another queue);
 * 2. `--retained` jobs enqueued, claimed and completed through the store's own statements, kept;
 * 3. the backlog topped up to 10,000 waiting again and the same measurement.
 * Both phases start from `VACUUM ANALYZE` (as `--scale` does), with pg_stat_statements reset.
 *
 * The fill is what a Worker with prefetch does, minus the handler and the timers: `--fillers`
 * loops side by side, each enqueueing 500 jobs (`addBulk`), then claiming 500 with 10 started at
 * once (the claim records the other 490 as buffered), marking those 490 started
 * (`markBuffered(…, false)`) and completing the 500 together with its next claim
 * (`completeAndClaim`): the same statements, row versions and dead tuples as the Worker's, with
 * autovacuum at the server's defaults. `--retained`'s copy fill of bench/pg-scale.ts is not used:
 * copies of one row leave every heap page room for exactly one more row, which scatters the next
 * backlog one job per page (docs/performance-growth.md §3).
 *
 * Retention: the default keeps a completed job 24 h and at most 1,000 per queue, both applied by
 * `prune` (the Worker's maintenance). Nothing here prunes (maintenance off, no prune call), so
 * every filled job stays; the run checks the completed count before measuring.
 *
 * Prints, per phase: every run's jobs/s and p50/p99, the server's CPU per job of the throughput
 * runs (every server process, /proc), shared buffers per call of the phase's statements
 * (pg_stat_statements), and table and index sizes; then the ratios "with ÷ without" and the load.
 */
import { loadavg } from "node:os";
import pg from "pg";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import type { ClaimedJob, ClaimRequest } from "../src/backend/contract.js";
import { Queue, silentLogger } from "../src/index.js";
import { startThrowawayPostgres } from "../testkit/servers/postgres.js";
import { chunks, FILL_CHUNK, fmt, formatLoad, machineLine, median, percentile, serverCpuMs } from "./lib.js";
import { drain, PREFETCH, TAKE, wakeLatency } from "./scale.js";

/** Waiting jobs in queue "bench" when a phase is measured. */
export const BACKLOG = 10_000;
/** Jobs a filler enqueues, and claims, per round: a Worker's prefetch. */
const FILL_BATCH = PREFETCH;
/** Jobs of each claim the Worker starts at once (its concurrency); the rest wait buffered. */
const STARTS_AT_ONCE = 10;

export interface RetainOptions {
  retained: number;
  runs: number;
  samples: number;
  fillers: number;
}

export interface PhaseResult {
  rates: number[];
  p50s: number[];
  p99s: number[];
  /** Server CPU (all its processes) per job of the throughput runs, µs. */
  cpuUsPerJob: number;
  /** The phase's statements (throughput, refill and latency runs), most buffers first. */
  statements: { query: string; calls: number; buffersPerCall: number; msPerCall: number }[];
  sizes: { relation: string; mb: number }[];
  /** Waiting jobs in queue "bench" when measuring began. */
  backlog: number;
  load: string;
}

const noop = (start: number, n: number) => Array.from({ length: n }, (_, k) => ({ name: "noop", data: { i: start + k } }));

/**
 * Enqueues, claims and completes `n` jobs in queue "bench" the way a Worker with prefetch does
 * (see the header), `fillers` loops at once, each on a backend `open()` gives (closed here).
 * Waiting jobs already in the queue may be among the `n`, and up to `fillers` × 500 enqueued
 * here may be left waiting (a loop claims what another enqueued). Returns jobs/s.
 */
export async function fillProcessed(
  open: () => PostgresBackend,
  n: number,
  fillers: number,
  report: (done: number, rate: number) => void = () => {},
): Promise<number> {
  if (!Number.isInteger(n) || n < 1) throw new Error(`--retained must be a positive integer, got ${n}`);
  if (!Number.isInteger(fillers) || fillers < 1) throw new Error(`--fillers must be a positive integer, got ${fillers}`);
  const started = performance.now();
  let done = 0;
  let lastReport = 0;
  const share = chunks(n, Math.ceil(n / fillers));
  await Promise.all(
    share.map(async ([, quota], f) => {
      const backend = open();
      const q = new Queue("bench", { backend });
      const request: ClaimRequest = {
        queues: ["bench"],
        names: ["noop"],
        worker: { id: `filler-${f}`, host: "bench", pid: process.pid },
        limit: FILL_BATCH,
        leaseMs: 600_000,
        startsAtOnce: STARTS_AT_ONCE,
      };
      try {
        let held: ClaimedJob[] = [];
        let mine = 0;
        while (mine < quota) {
          const len = Math.min(FILL_BATCH, quota - mine);
          await q.addBulk(noop(mine, len));
          const claimed =
            held.length === 0
              ? await backend.claim({ ...request, limit: len })
              : (await backend.completeAndClaim(completions(held), { ...request, limit: len })).claimed;
          const buffered = claimed.filter((c) => c.markedBuffered).map((c) => c.lease);
          if (buffered.length > 0) await backend.markBuffered(buffered, false);
          held = claimed;
          mine += claimed.length;
          done += claimed.length;
          if (done - lastReport >= 100_000) {
            lastReport = done;
            report(done, done / ((performance.now() - started) / 1000));
          }
        }
        if (held.length > 0) await backend.complete(completions(held));
      } finally {
        await backend.close();
      }
    }),
  );
  return n / ((performance.now() - started) / 1000);
}

const completions = (held: readonly ClaimedJob[]) => held.map((c) => ({ lease: c.lease, result: null }));

async function measurePhase(url: string, dataDir: string, admin: pg.Client, options: RetainOptions): Promise<PhaseResult> {
  const backend = new PostgresBackend({ connectionString: url, logger: silentLogger });
  const producer = new PostgresBackend({ connectionString: url, logger: silentLogger });
  const q = new Queue("bench", { backend });
  try {
    const waiting = async () => (await backend.stats("bench"))[0]?.counts.waiting ?? 0;
    for (const [s, len] of chunks(BACKLOG - (await waiting()), FILL_CHUNK)) await q.addBulk(noop(s, len));
    const backlog = await waiting();
    await admin.query("VACUUM ANALYZE");
    await admin.query("SELECT pg_stat_statements_reset()");
    const rates: number[] = [];
    const p50s: number[] = [];
    const p99s: number[] = [];
    let cpuMs = 0;
    let jobs = 0;
    for (let r = 0; r < options.runs; r++) {
      const cpu0 = await serverCpuMs(dataDir);
      const t0 = performance.now();
      const consumed = await drain(backend, TAKE, PREFETCH);
      rates.push(TAKE / ((performance.now() - t0) / 1000));
      cpuMs += (await serverCpuMs(dataDir)) - cpu0;
      jobs += consumed;
      for (const [s, len] of chunks(consumed, FILL_CHUNK)) await q.addBulk(noop(s, len));
      const samples = await wakeLatency(backend, producer, options.samples);
      p50s.push(percentile(samples, 50));
      p99s.push(percentile(samples, 99));
    }
    // Every statement of the phase: the throughput runs, the refills and the latency runs (whose
    // claims are the same statement, one or two per sample, each reading little: they lower the
    // claim's buffers per call in both phases alike, so compare phases, not absolute values).
    const { rows } = await admin.query<{ query: string; calls: string; buffers: string; ms: number }>(
      `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls, shared_blks_hit + shared_blks_read AS buffers, total_exec_time AS ms
         FROM pg_stat_statements WHERE query ILIKE '%conveyor%' AND calls > 0 ORDER BY shared_blks_hit + shared_blks_read DESC LIMIT 6`,
    );
    const sizes = await admin.query<{ relation: string; mb: number }>(
      `SELECT c.relname AS relation, pg_relation_size(c.oid) / 1048576.0 AS mb FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'conveyor' AND (c.relname = 'jobs' OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'conveyor.jobs'::regclass))
        ORDER BY pg_relation_size(c.oid) DESC`,
    );
    return {
      rates,
      p50s,
      p99s,
      cpuUsPerJob: (cpuMs * 1000) / jobs,
      statements: rows.map((s) => ({
        query: s.query.slice(0, 90),
        calls: Number(s.calls),
        buffersPerCall: Number(s.buffers) / Number(s.calls),
        msPerCall: s.ms / Number(s.calls),
      })),
      sizes: sizes.rows.map((s) => ({ relation: s.relation, mb: Number(s.mb) })),
      backlog,
      load: formatLoad(loadavg()),
    };
  } finally {
    await backend.close();
    await producer.close();
  }
}

function printPhase(title: string, p: PhaseResult): void {
  console.log(`\n### ${title} (${fmt(p.backlog)} waiting when measured; load ${p.load} at end)\n`);
  console.log(
    `jobs/s ${p.rates.map(fmt).join(" / ")} (median ${fmt(median(p.rates))}); p50 ${p.p50s.map(fmt).join(" / ")} ms; p99 ${p.p99s.map(fmt).join(" / ")} ms; ` +
      `server CPU ${fmt(p.cpuUsPerJob)} µs per job\n`,
  );
  console.log("| statement | calls | buffers per call | ms per call |\n| --- | ---: | ---: | ---: |");
  for (const s of p.statements) console.log(`| \`${s.query.replaceAll("|", "\\|")}…\` | ${s.calls} | ${fmt(s.buffersPerCall)} | ${fmt(s.msPerCall)} |`);
  console.log(`\nsizes (MB): ${p.sizes.map((s) => `${s.relation} ${fmt(s.mb)}`).join(", ")}`);
}

export async function main(options: RetainOptions): Promise<void> {
  const loadStart = formatLoad(loadavg());
  const server = await startThrowawayPostgres({
    database: "bench",
    settings: { shared_preload_libraries: "pg_stat_statements", "pg_stat_statements.track": "top", jit: "off" },
  });
  const admin = new pg.Client({ connectionString: server.url });
  try {
    await admin.connect();
    await admin.query("CREATE EXTENSION pg_stat_statements");
    console.log(`# PostgreSQL: ${fmt(options.retained)} jobs processed and kept, against none\n\n${machineLine()}`);
    const setup = new PostgresBackend({ connectionString: server.url, logger: silentLogger });
    await setup.migrate();
    await setup.close();
    const without = await measurePhase(server.url, server.dataDir, admin, options);
    printPhase(`${fmt(BACKLOG)} waiting, nothing retained`, without);

    const fillStart = performance.now();
    const fillLoad = formatLoad(loadavg());
    const rate = await fillProcessed(
      () => new PostgresBackend({ connectionString: server.url, logger: silentLogger, poolSize: 2 }),
      options.retained,
      options.fillers,
      (done, r) => process.stderr.write(`  .. filled ${fmt(done)} at ${fmt(r)} jobs/s, load ${formatLoad(loadavg())}\n`),
    );
    const minutes = (performance.now() - fillStart) / 60_000;
    const { rows } = await admin.query<{ n: string }>("SELECT count(*) AS n FROM conveyor.jobs WHERE queue = 'bench' AND state = 'completed'");
    console.log(
      `\nfill: ${fmt(options.retained)} jobs enqueued, claimed and completed in ${minutes.toFixed(1)} min (${fmt(rate)} jobs/s, ${options.fillers} fillers, ` +
        `load ${fillLoad} at start, ${formatLoad(loadavg())} at end); completed jobs in queue "bench": ${fmt(Number(rows[0]!.n))}`,
    );
    const withRetained = await measurePhase(server.url, server.dataDir, admin, options);
    printPhase(`${fmt(BACKLOG)} waiting + ${fmt(Number(rows[0]!.n))} processed and kept`, withRetained);

    // Buffers per call of the processing statements, matched by the comment each statement opens with.
    const perCall = (p: PhaseResult, name: string) => p.statements.find((s) => s.query.startsWith(`-- ${name}:`))?.buffersPerCall ?? NaN;
    // A statement absent from one phase (e.g. a path the run never took) is named, not printed as NaNx.
    const buffers = ["claim", "complete", "enqueue"].map((name) => {
      const [after, before] = [perCall(withRetained, name), perCall(without, name)];
      if (Number.isNaN(after) || Number.isNaN(before)) return `${name} not run in ${Number.isNaN(before) ? "the phase without" : "the phase with"}`;
      return `${name} ${(after / before).toFixed(2)}x`;
    });
    console.log(
      `\nwith ÷ without: throughput ${(median(withRetained.rates) / median(without.rates)).toFixed(2)}x, p50 ${(median(withRetained.p50s) / median(without.p50s)).toFixed(2)}x, ` +
        `server CPU per job ${(withRetained.cpuUsPerJob / without.cpuUsPerJob).toFixed(2)}x; buffers per call: ${buffers.join(", ")}`,
    );
    console.log(`\nload average ${loadStart} at start, ${formatLoad(loadavg())} at end; ${machineLine()}`);
  } finally {
    await admin.end();
    await server.stop();
  }
}
