/**
 * PostgreSQL bloat soak: `npm run bench -- --backend postgres --soak [--minutes 10] [--rate 2000]`
 *
 * A long run of churn on one queue: a producer enqueues `rate` jobs/s in small batches, a worker
 * processes them (no-op handlers), and the pruner keeps the default retention (1,000 completed
 * jobs per queue). Every job row is inserted, updated twice and deleted, so the jobs table makes
 * dead tuples as fast as the queue moves. Every sample reads `pg_stat_user_tables` and the
 * relation sizes; at the end the run says whether they stayed bounded: a table whose size keeps
 * growing while the number of live jobs does not is bloat (autovacuum falling behind).
 *
 * Verdict: bounded when, over the second half of the run, the total size (heap + indexes + TOAST)
 * never exceeds 1.5x the largest size seen in the first half, and dead tuples fall back at least
 * once below the first half's peak (autovacuum keeps up: a sawtooth, where bloat would be a
 * climb that never comes down). Exit code 1 otherwise, and when no autovacuum ran at all (a run
 * shorter than the server's autovacuum_naptime, 60 s by default, cannot tell; give it minutes).
 */
import { loadavg } from "node:os";
import pg from "pg";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { Queue, silentLogger, Worker } from "../src/index.js";
import { startThrowawayPostgres, type ThrowawayPostgres } from "../testkit/servers/postgres.js";
import { fmt, formatLoad, machineLine, sleep } from "./lib.js";

export interface SoakOptions {
  /** Connection string of the server to use (a schema of its own is created and dropped). */
  url: string;
  /**
   * How long the run goes on: `{ ms }` for a length of time (the long soak, whose question is
   * what happens over minutes), or `{ jobs }` until that many jobs have been processed, however
   * long this machine takes (the producer stops there). The in-suite version counts jobs, so it
   * asks only whether the table stays bounded, never how fast a shared machine is.
   */
  until: { ms: number } | { jobs: number };
  /** Jobs enqueued per second at most (the offered load; a slower machine takes them as it can). */
  ratePerSecond: number;
  /**
   * Most jobs enqueued and not yet processed: the producer waits beyond it, so on a slow machine
   * the waiting backlog stays this small and live rows measure retention, not the backlog.
   * Default: no limit (the producer keeps its rate).
   */
  maxBacklog?: number;
  /** Time between samples, ms. */
  sampleEveryMs: number;
  /** Called with each sample as it is taken. */
  onSample?: (sample: SoakSample) => void;
}

export interface SoakSample {
  /** Seconds since the start. */
  atS: number;
  /** Jobs completed so far. */
  processed: number;
  /** Rows in the jobs table by pg_stat (live) and dead tuples not yet vacuumed. */
  liveTuples: number;
  deadTuples: number;
  /** Bytes: the heap alone, and heap + indexes + TOAST. */
  heapBytes: number;
  totalBytes: number;
  /** Autovacuum runs on the jobs table so far. */
  autovacuums: number;
}

export interface SoakResult {
  samples: SoakSample[];
  bounded: boolean;
  /** Why the verdict is what it is, in one line. */
  reason: string;
}

export async function runSoak(options: SoakOptions): Promise<SoakResult> {
  const schema = `soak_${process.pid}`;
  const backend = new PostgresBackend({ connectionString: options.url, schema, logger: silentLogger });
  const admin = new pg.Client({ connectionString: options.url });
  await admin.connect();
  const samples: SoakSample[] = [];
  let worker: Worker | undefined;
  try {
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await backend.migrate();
    const queue = new Queue("soak", { backend });
    let processed = 0;
    worker = new Worker({
      backend,
      queues: "soak",
      concurrency: 20,
      prefetch: 100,
      logger: silentLogger,
      // The pruner at a soak's pace: every 5 s, default retention (1,000 completed per queue).
      maintenance: { pruneIntervalMs: 5_000, rescueIntervalMs: 5_000 },
      handlers: { churn: () => null },
    });
    worker.on("job:completed", () => processed++);

    const started = performance.now();
    const until = options.until;
    const deadline = "ms" in until ? started + until.ms : Infinity;
    const toSend = "jobs" in until ? until.jobs : Infinity;
    const running = () => ("ms" in until ? performance.now() < deadline : processed < until.jobs);
    // Producer: a batch every 50 ms, sized so the average rate is `ratePerSecond`.
    const batch = Math.max(1, Math.round(options.ratePerSecond / 20));
    let sent = 0;
    let stopProducer = false;
    const producer = (async () => {
      while (running() && sent < toSend && !stopProducer) {
        const due = ((performance.now() - started) / 1000) * options.ratePerSecond;
        if (sent < due && sent - processed < (options.maxBacklog ?? Infinity)) {
          const size = Math.min(batch, toSend - sent);
          await queue.addBulk(Array.from({ length: size }, (_, k) => ({ name: "churn", data: { n: sent + k } })));
          sent += size;
        } else {
          await sleep(50);
        }
      }
    })();

    const sample = async (): Promise<void> => {
      const { rows } = await admin.query<{ live: string; dead: string; heap: string; total: string; av: string }>(
        `SELECT n_live_tup AS live, n_dead_tup AS dead, pg_relation_size(relid) AS heap,
                pg_total_relation_size(relid) AS total, autovacuum_count AS av
           FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'`,
        [schema],
      );
      const r = rows[0]!;
      const s: SoakSample = {
        atS: Math.round((performance.now() - started) / 1000),
        processed,
        liveTuples: Number(r.live),
        deadTuples: Number(r.dead),
        heapBytes: Number(r.heap),
        totalBytes: Number(r.total),
        autovacuums: Number(r.av),
      };
      samples.push(s);
      options.onSample?.(s);
    };
    try {
      while (running()) {
        await sleep(Math.min(options.sampleEveryMs, Math.max(0, deadline - performance.now())));
        await sample();
      }
    } finally {
      // A failed sample must not leave the producer writing to a backend about to be closed.
      stopProducer = true;
      await producer;
    }
  } finally {
    await worker?.close({ graceMs: 5_000 });
    await backend.close();
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined);
    await admin.end();
  }
  return { samples, ...verdict(samples) };
}

/** Bounded: the second half never outgrows the first half's peaks (see the file comment). */
export function verdict(samples: readonly SoakSample[]): { bounded: boolean; reason: string } {
  if (samples.length < 4) return { bounded: false, reason: `only ${samples.length} samples; run longer` };
  const half = Math.floor(samples.length / 2);
  const first = samples.slice(0, half);
  const second = samples.slice(half);
  const peak = (xs: readonly SoakSample[], f: (s: SoakSample) => number) => Math.max(...xs.map(f));
  const sizeLimit = 1.5 * peak(first, (s) => s.totalBytes);
  const deadPeakBefore = peak(first, (s) => s.deadTuples);
  const size = peak(second, (s) => s.totalBytes);
  const deadLow = Math.min(...second.map((s) => s.deadTuples));
  // Without a single autovacuum there is nothing to judge: every table grows until the first one.
  if (samples.at(-1)!.autovacuums === 0) {
    return { bounded: false, reason: "no autovacuum ran during the run (the server's autovacuum_naptime is longer than it): run longer to judge" };
  }
  if (size > sizeLimit) return { bounded: false, reason: `table size grew to ${mb(size)} in the second half (limit ${mb(sizeLimit)})` };
  if (deadLow > deadPeakBefore) {
    return { bounded: false, reason: `dead tuples never fell below the first half's peak (${fmt(deadPeakBefore)}) in the second half: lowest ${fmt(deadLow)}` };
  }
  return {
    bounded: true,
    reason: `second half peaks ${mb(size)} (limit ${mb(sizeLimit)}); dead tuples fell to ${fmt(deadLow)} (first half peak ${fmt(deadPeakBefore)})`,
  };
}

const mb = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(1)} MB`;

export async function main(args: { minutes: number; rate: number }): Promise<void> {
  let server: ThrowawayPostgres | null = null;
  let url = process.env.DATABASE_URL;
  if (!url) {
    server = await startThrowawayPostgres({ database: "soak" });
    url = server.url;
  }
  try {
    console.log(
      `PostgreSQL bloat soak: ${args.minutes} min, ${args.rate} jobs/s, server defaults for autovacuum (naptime 60 s)` +
        `${server ? ", throwaway server" : ", DATABASE_URL"}; ${machineLine()}\n`,
    );
    console.log("    t  processed   live rows   dead tuples      heap     total  autovacuums");
    const result = await runSoak({
      url,
      until: { ms: args.minutes * 60_000 },
      ratePerSecond: args.rate,
      sampleEveryMs: Math.max(5_000, Math.round((args.minutes * 60_000) / 30)),
      onSample: (s) =>
        console.log(
          `${String(s.atS).padStart(5)}s ${fmt(s.processed).padStart(10)} ${fmt(s.liveTuples).padStart(11)} ${fmt(s.deadTuples).padStart(13)} ` +
            `${mb(s.heapBytes).padStart(9)} ${mb(s.totalBytes).padStart(9)} ${String(s.autovacuums).padStart(12)}`,
        ),
    });
    console.log(`\n${result.bounded ? "BOUNDED" : "NOT BOUNDED"}: ${result.reason}`);
    console.log(`Load average (1/5/15 min) at end ${formatLoad(loadavg())}.`);
    if (!result.bounded) process.exitCode = 1;
  } finally {
    await server?.stop();
  }
}
