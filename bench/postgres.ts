/**
 * PostgreSQL: Conveyor, graphile-worker and pg-boss side by side on one server (a throwaway one
 * from test/helpers/postgres.ts, or DATABASE_URL). Every measurement gets a fresh database of its
 * own, so no system sees another's tables, indexes or dead tuples, and each peer runs with the
 * fast settings its own documentation recommends.
 */
import { Logger, makeWorkerUtils, run, type Runner, type WorkerUtils } from "graphile-worker";
import pg from "pg";
import { PgBoss } from "pg-boss";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { Queue, silentLogger } from "../src/index.js";
import { startThrowawayPostgres, type ThrowawayPostgres } from "../test/helpers/postgres.js";
import { type BenchSizes, conveyorLatency, conveyorProcessing, deferred, latencySamples, printTable, rate, runSideBySide, sleep, type Subject } from "./lib.js";

/** Conveyor's `prefetch` in processing runs: the same 500 as graphile-worker's local queue. */
const PREFETCH = 500;

/** Jobs per enqueue call when filling a queue before a processing run. */
const FILL_CHUNK = 5_000;

/** `[0, n)` cut into chunks of at most `size`, as [start, length] pairs. */
function chunks(n: number, size: number): [number, number][] {
  const out: [number, number][] = [];
  for (let i = 0; i < n; i += size) out.push([i, Math.min(size, n - i)]);
  return out;
}

/** Creates and later drops one database per measurement on the server at `baseUrl`. */
class Databases {
  private readonly made: string[] = [];
  private n = 0;

  constructor(private readonly baseUrl: string) {}

  /** A fresh, empty database; returns its connection string. */
  async create(prefix: string): Promise<string> {
    const name = `bench_${prefix}_${process.pid}_${this.n++}`;
    await this.admin((c) => c.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`));
    this.made.push(name);
    const url = new URL(this.baseUrl);
    url.pathname = `/${name}`;
    return url.toString();
  }

  /** Counts rows of a query's first column in database `url` (a short-lived connection). */
  static async count(url: string, sql: string): Promise<number> {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows } = await client.query<{ n: string }>(sql);
      return Number(rows[0]?.n ?? 0);
    } finally {
      await client.end();
    }
  }

  async dropAll(): Promise<void> {
    // FORCE: a peer that left a connection behind must not keep its database alive (PG 13+).
    for (const name of this.made.splice(0)) {
      await this.admin((c) => c.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`));
    }
  }

  private async admin(fn: (c: pg.Client) => Promise<unknown>): Promise<void> {
    const client = new pg.Client({ connectionString: this.baseUrl });
    await client.connect();
    try {
      await fn(client);
    } finally {
      await client.end();
    }
  }
}

/**
 * Waits until `sql` (a count of jobs not yet finished in the database) reaches 0. Handlers see
 * the last job before its completion is written; peers that batch completions (graphile-worker)
 * or complete after the handler returns (pg-boss) are only done once the database says so.
 */
async function settled(url: string, sql: string): Promise<void> {
  while ((await Databases.count(url, sql)) > 0) await sleep(10);
}

function conveyor(dbs: Databases): Subject {
  const fresh = async () => {
    const backend = new PostgresBackend({ connectionString: await dbs.create("conveyor"), logger: silentLogger });
    await backend.migrate();
    return backend;
  };
  const jobs = (start: number, n: number) => Array.from({ length: n }, (_, k) => ({ name: "noop", data: { i: start + k } }));
  return {
    name: "Conveyor",
    async bulk(n) {
      const backend = await fresh();
      const q = new Queue("bench", { backend });
      const all = jobs(0, n);
      const r = await rate(n, () => q.addBulk(all));
      await backend.close();
      return r;
    },
    async single(n) {
      const backend = await fresh();
      const q = new Queue("bench", { backend });
      const r = await rate(n, async () => {
        for (let i = 0; i < n; i++) await q.add("noop", { i });
      });
      await backend.close();
      return r;
    },
    async processing(n, concurrency) {
      const backend = await fresh();
      // Its documented setting for many short jobs, like graphile-worker's local queue below.
      const r = await conveyorProcessing(backend, n, concurrency, PREFETCH);
      await backend.close();
      return r;
    },
    async latency(samples) {
      const url = await dbs.create("conveyor");
      const workerBackend = new PostgresBackend({ connectionString: url, logger: silentLogger });
      await workerBackend.migrate();
      // A second pool: the wake-up has to travel through PostgreSQL's NOTIFY.
      return conveyorLatency(workerBackend, new PostgresBackend({ connectionString: url, logger: silentLogger }), samples);
    },
  };
}

/** graphile-worker's logger, silenced: it logs every worker start and stop at info level. */
const quietGraphile = new Logger(() => () => undefined);

function graphileWorker(dbs: Databases): Subject {
  const fresh = async (): Promise<{ url: string; utils: WorkerUtils }> => {
    const url = await dbs.create("graphile");
    const utils = await makeWorkerUtils({ connectionString: url, logger: quietGraphile });
    await utils.migrate();
    return { url, utils };
  };
  /**
   * The batching settings of https://worker.graphile.org/docs/performance#batching: a local queue
   * (jobs fetched and locked many at a time; "much higher" than concurrency + 1 is what the docs
   * suggest for high throughput of very fast tasks) and batched completion/failure.
   */
  const start = (url: string, concurrency: number, taskList: Parameters<typeof run>[0]["taskList"]): Promise<Runner> =>
    run({
      connectionString: url,
      concurrency,
      // One pool connection per concurrent job plus a few for the local queue and LISTEN.
      maxPoolSize: concurrency + 2,
      noHandleSignals: true,
      logger: quietGraphile,
      taskList,
      preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
    });
  const jobs = (start: number, n: number) => Array.from({ length: n }, (_, k) => ({ identifier: "noop", payload: { i: start + k } }));
  return {
    name: "graphile-worker",
    async bulk(n) {
      const { utils } = await fresh();
      const all = jobs(0, n);
      const r = await rate(n, () => utils.addJobs(all));
      await utils.release();
      return r;
    },
    async single(n) {
      const { utils } = await fresh();
      const r = await rate(n, async () => {
        for (let i = 0; i < n; i++) await utils.addJob("noop", { i });
      });
      await utils.release();
      return r;
    },
    async processing(n, concurrency) {
      const { url, utils } = await fresh();
      for (const [s, len] of chunks(n, FILL_CHUNK)) await utils.addJobs(jobs(s, len));
      await utils.release();
      const done = deferred();
      let seen = 0;
      let runner: Runner | undefined;
      const r = await rate(n, async () => {
        runner = await start(url, concurrency, {
          noop: () => {
            if (++seen === n) done.resolve();
          },
        });
        await done.promise;
        // Completed jobs are deleted: done once the table is empty.
        await settled(url, "SELECT count(*) AS n FROM graphile_worker._private_jobs");
      });
      await runner?.stop();
      return r;
    },
    async latency(samples) {
      const { url, utils } = await fresh();
      let onStart: (() => void) | null = null;
      const runner = await start(url, 10, { noop: () => void onStart?.() });
      await sleep(200);
      const out = await latencySamples([], samples, (i) => utils.addJob("noop", { i }), (fn) => (onStart = fn));
      await runner.stop();
      await utils.release();
      return out;
    },
  };
}

/**
 * pg-boss's batch size for processing: jobs fetched (and completed) per round trip. It must be
 * large: a work() loop that found jobs still sleeps out the rest of its polling interval (0.5 s at
 * the least) before fetching again, so one loop does at most 2 batches a second.
 */
const PGBOSS_BATCH = 1_000;

function pgBoss(dbs: Databases): Subject {
  const fresh = async (max = 10): Promise<{ url: string; boss: PgBoss }> => {
    const url = await dbs.create("pgboss");
    // No cron scheduling and no maintenance supervisor: neither is part of what is measured.
    const boss = new PgBoss({ connectionString: url, max, schedule: false, supervise: false });
    boss.on("error", (error: unknown) => console.error("pg-boss:", error));
    await boss.start();
    await boss.createQueue("bench"); // v10: queues must exist before send/work
    return { url, boss };
  };
  const stop = (boss: PgBoss) => boss.stop({ graceful: true, timeout: 30_000 });
  const jobs = (start: number, n: number) => Array.from({ length: n }, (_, k) => ({ data: { i: start + k } }));
  return {
    name: "pg-boss",
    async bulk(n) {
      const { boss } = await fresh();
      const all = jobs(0, n);
      const r = await rate(n, () => boss.insert("bench", all));
      await stop(boss);
      return r;
    },
    async single(n) {
      const { boss } = await fresh();
      const r = await rate(n, async () => {
        for (let i = 0; i < n; i++) await boss.send("bench", { i });
      });
      await stop(boss);
      return r;
    },
    async processing(n, concurrency) {
      // pg-boss 10 has no per-worker concurrency setting: each work() call is one fetch-run-complete
      // loop over a batch, and concurrency comes from calling work() several times. We start one
      // loop per 10 of `concurrency` (1 at c=10, 5 at c=50), each fetching and completing
      // PGBOSS_BATCH jobs per round trip, at the minimum polling interval.
      const loops = Math.max(1, Math.round(concurrency / 10));
      const { url, boss } = await fresh(loops + 2);
      for (const [s, len] of chunks(n, FILL_CHUNK)) await boss.insert("bench", jobs(s, len));
      const done = deferred();
      let seen = 0;
      const r = await rate(n, async () => {
        for (let i = 0; i < loops; i++) {
          await boss.work("bench", { batchSize: PGBOSS_BATCH, pollingIntervalSeconds: 0.5 }, async (batch: unknown[]) => {
            seen += batch.length;
            if (seen >= n) done.resolve();
          });
        }
        await done.promise;
        await settled(url, "SELECT count(*) AS n FROM pgboss.job WHERE state <> 'completed'");
      });
      await stop(boss);
      return r;
    },
    async latency(samples) {
      // pg-boss polls (no LISTEN/NOTIFY); 0.5 s is the smallest interval it accepts.
      const { boss } = await fresh();
      let onStart: (() => void) | null = null;
      await boss.work("bench", { batchSize: 1, pollingIntervalSeconds: 0.5 }, async () => void onStart?.());
      await sleep(200);
      const out = await latencySamples([], samples, (i) => boss.send("bench", { i }), (fn) => (onStart = fn), () => 2 + Math.random() * 500);
      await stop(boss);
      return out;
    },
  };
}

export async function main(sizes: BenchSizes): Promise<void> {
  let server: ThrowawayPostgres | null = null;
  let url = process.env.DATABASE_URL;
  if (!url) {
    server = await startThrowawayPostgres({ database: "bench" });
    url = server.url;
  }
  const dbs = new Databases(url);
  try {
    const { rows } = await (async () => {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      try {
        return await c.query<{ v: string; sc: string }>("SELECT current_setting('server_version') AS v, current_setting('synchronous_commit') AS sc");
      } finally {
        await c.end();
      }
    })();
    console.log(
      `PostgreSQL ${rows[0]?.v} (synchronous_commit ${rows[0]?.sc}${server ? ", throwaway server" : ", DATABASE_URL"}), ` +
        `${sizes.jobs} jobs, ${sizes.runs === 1 ? "1 run" : `medians of ${sizes.runs} runs`}, node ${process.version}\n`,
    );
    const subjects = [conveyor(dbs), graphileWorker(dbs), pgBoss(dbs)];
    const table = await runSideBySide(subjects, sizes);
    console.log("");
    printTable(subjects, table);
  } finally {
    await dbs.dropAll();
    await server?.stop();
  }
}
