/**
 * PostgreSQL: Conveyor, graphile-worker and pg-boss side by side on one server, beside the floor (a
 * throwaway one from testkit/servers/postgres.ts, or DATABASE_URL). Every measurement gets a fresh database of its
 * own, so no system sees another's tables, indexes or dead tuples, and each peer runs with the
 * fast settings its own documentation gives for the version installed (see each subject below).
 * All three wake idle workers through LISTEN/NOTIFY, so every enqueue pays for a NOTIFY alike.
 * Conveyor runs three ways: as configured by default, with its event log off, and with its event
 * log off and every job deleted as it completes, which keeps what graphile-worker keeps.
 */
import { Logger, makeWorkerUtils, run, type Runner, type WorkerUtils } from "graphile-worker";
import pg from "pg";
import { PgBoss } from "pg-boss";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { silentLogger } from "../src/index.js";
import { startThrowawayPostgres, type ThrowawayPostgres } from "../testkit/servers/postgres.js";
import {
  type BenchSizes,
  chunks,
  conveyorLatency,
  conveyorThroughput,
  deferred,
  FILL_CHUNK,
  latencySamples,
  machineLine,
  peerVersions,
  printReport,
  rate,
  runSideBySide,
  sleep,
  type Subject,
  type WithFreshBackend,
} from "./lib.js";
import { floorSubject } from "./pg-floor.js";

/**
 * Jobs fetched per round trip in processing runs: Conveyor's `prefetch` (jobs claimed ahead of
 * free slots), graphile-worker's local queue size (500 is what its performance page runs with)
 * and pg-boss's `batchSize`.
 */
export const PREFETCH = 500;

/** Creates and later drops one database per measurement on the server at `baseUrl`. */
export class Databases {
  private readonly made: string[] = [];
  /** Databases dropIdle found still in use: dropAll's. */
  private readonly inUse: string[] = [];
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

  /**
   * Drops the databases made since the last call that nothing is connected to any more: without
   * FORCE, since a pool whose end() has resolved may still be closing its idle connections, and
   * one terminated by a forced drop then raised an unhandled 'error' on that pool. PostgreSQL
   * itself waits up to five seconds for a database's sessions to end before refusing the drop
   * (55006, object in use). A database still in use then is named on stderr and left to dropAll,
   * not tried again after every later measurement.
   */
  async dropIdle(): Promise<void> {
    while (this.made.length > 0) {
      const name = this.made[0]!;
      try {
        await this.admin((c) => c.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)}`));
      } catch (error) {
        if ((error as { code?: string }).code !== "55006") throw error;
        console.error(`bench: database ${name} is still in use after its measurement; dropped at the end of the run`);
        this.inUse.push(name);
      }
      // Only once dropped or set aside: a failure above leaves the rest for dropAll.
      this.made.shift();
    }
  }

  async dropAll(): Promise<void> {
    // FORCE: a peer that left a connection behind must not keep its database alive (PG 13+).
    for (const name of [...this.inUse.splice(0), ...this.made.splice(0)]) {
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

/**
 * `subject` with the databases of each measurement dropped as soon as it ends. Kept until the
 * end of the run, the databases of the processing figures (20,000 finished jobs each, sixty
 * of them at `--runs 5`) were still being vacuumed while later figures ran on the same two
 * cores; with them dropped, every subject's latency p99 read lower (docs/performance-postgres.md,
 * "Session 33"). A drop also makes PostgreSQL checkpoint, so each measurement now starts just
 * after one. Every subject is wrapped alike.
 */
function droppingEachDatabase(subject: Subject, dbs: Databases): Subject {
  const dropping =
    <A extends unknown[], R>(measure: (...args: A) => Promise<R>) =>
    async (...args: A): Promise<R> => {
      try {
        return await measure(...args);
      } finally {
        await dbs.dropIdle();
      }
    };
  return {
    ...subject,
    bulk: dropping(subject.bulk.bind(subject)),
    single: dropping(subject.single.bind(subject)),
    processing: dropping(subject.processing.bind(subject)),
    latency: dropping(subject.latency.bind(subject)),
    ...(subject.prefetched && {
      prefetched: { prefetch: subject.prefetched.prefetch, processing: dropping(subject.prefetched.processing.bind(subject.prefetched)) },
    }),
    ...(subject.crossProcessLatency && { crossProcessLatency: dropping(subject.crossProcessLatency.bind(subject)) }),
    ...(subject.memory && { memory: dropping(subject.memory.bind(subject)) }),
  };
}

/**
 * Conveyor as configured by default; with `eventLog` false, the schema's event log off
 * (PostgresBackendOptions.eventLog); with `removeOnComplete`, every job deleted as it completes
 * (the job option): with both, Conveyor keeps what graphile-worker keeps, no finished job and no
 * log of events.
 */
function conveyor(dbs: Databases, { eventLog = true, removeOnComplete = false } = {}): Subject {
  const defaults = removeOnComplete ? { removeOnComplete: true } : undefined;
  const withFreshBackend: WithFreshBackend = async (fn) => {
    const backend = new PostgresBackend({ connectionString: await dbs.create("conveyor"), logger: silentLogger, eventLog });
    try {
      await backend.migrate();
      return await fn(backend);
    } finally {
      await backend.close();
    }
  };
  return {
    name: ["Conveyor", ...(eventLog ? [] : ["event log off"]), ...(removeOnComplete ? ["removeOnComplete"] : [])].join(", "),
    // `prefetch`, its documented setting for many short jobs, at graphile-worker's local queue
    // size; completions made in the same tick, or while the batch before was on its way, already
    // go out as one statement (its settler).
    ...conveyorThroughput(withFreshBackend, PREFETCH, defaults),
    async latency(samples) {
      const url = await dbs.create("conveyor");
      const workerBackend = new PostgresBackend({ connectionString: url, logger: silentLogger, eventLog });
      await workerBackend.migrate();
      // A second pool: the wake-up has to travel through PostgreSQL's NOTIFY.
      return conveyorLatency(workerBackend, new PostgresBackend({ connectionString: url, logger: silentLogger, eventLog }), samples, defaults);
    },
  };
}

/** graphile-worker's logger, silenced: it logs every worker start and stop at info level. */
const quietGraphile = new Logger(() => () => undefined);

export function graphileWorker(dbs: Databases): Subject {
  const fresh = async (): Promise<{ url: string; utils: WorkerUtils }> => {
    const url = await dbs.create("graphile");
    const utils = await makeWorkerUtils({ connectionString: url, logger: quietGraphile });
    await utils.migrate();
    return { url, utils };
  };
  /**
   * graphile-worker 0.18 as its performance page runs it for throughput
   * (https://worker.graphile.org/docs/performance; 0.18 added no new tuning options):
   * - `localQueue.size` 500: the pool fetches and locks jobs 500 at a time and hands them to its
   *   workers without a round trip each ("much higher" than concurrency + 1 is what the docs
   *   suggest for very fast tasks; 500 is their perfTest's value and Conveyor's `prefetch` here).
   * - `completeJobBatchDelay` / `failJobBatchDelay` 0: completions (failures) made in the same
   *   tick go to the database in one statement, as Conveyor's settler batches them.
   * - `maxPoolSize`: "10 or concurrentJobs + 2, whichever is larger", the docs' advice.
   * - `pollInterval` stays at its 2 s default: new jobs arrive by LISTEN/NOTIFY, polling only
   *   finds future-dated ones.
   */
  const start = (url: string, concurrency: number, taskList: Parameters<typeof run>[0]["taskList"]): Promise<Runner> =>
    run({
      connectionString: url,
      concurrency,
      maxPoolSize: Math.max(10, concurrency + 2),
      noHandleSignals: true,
      logger: quietGraphile,
      taskList,
      preset: { worker: { localQueue: { size: PREFETCH }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
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
      const out = await latencySamples(
        [],
        samples,
        (i) => utils.addJob("noop", { i }),
        (fn) => (onStart = fn),
      );
      await runner.stop();
      await utils.release();
      return out;
    },
  };
}

/**
 * pg-boss 12 with the settings its docs give for speed (https://pgboss.io/api/workers):
 * - `useListenNotify: true` on the instance and `notify: true` on the queue ("Low-latency dispatch
 *   with LISTEN/NOTIFY", new in 12): a created job wakes the workers at once instead of at their
 *   next poll, polling staying on as a backstop. Before 12 it could only poll (0.5 s at the least).
 * - processing: `localConcurrency` workers in the one `work()` call (its per-process concurrency),
 *   each fetching and completing a batch of `batchSize` jobs per round trip (its batching), with
 *   `burstWhenBatchFull` so a worker whose fetch came back full fetches again at once rather than
 *   sleeping out its polling interval.
 * - no cron scheduling and no maintenance supervisor: neither is part of what is measured (the
 *   other two run no maintenance during the bench either).
 */
function pgBoss(dbs: Databases): Subject {
  const fresh = async (max = 10): Promise<{ url: string; boss: PgBoss }> => {
    const url = await dbs.create("pgboss");
    const boss = new PgBoss({ connectionString: url, max, schedule: false, supervise: false, useListenNotify: true });
    boss.on("error", (error: unknown) => console.error("pg-boss:", error));
    // listen_notify_unavailable would mean the latency figure measures polling: say so loudly.
    boss.on("warning", (warning: { message: string }) => console.error("pg-boss warning:", warning.message));
    await boss.start();
    await boss.createQueue("bench", { notify: true }); // queues must exist before send/work (10+)
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
      // `concurrency` workers, so at most that many handler calls run at once, each fetching
      // PREFETCH jobs per round trip, the batch the other two fetch. Holding only as many jobs as
      // they do (concurrency + PREFETCH, spread over the workers: batches of 51 at concurrency
      // 10, 11 at 50) measured 2-3x slower here, since each worker waits out its own
      // fetch-run-complete loop: the peer gets its fastest documented shape, not a handicap.
      // A connection per worker, one for LISTEN and one to spare, as graphile-worker's pool.
      const { url, boss } = await fresh(concurrency + 2);
      for (const [s, len] of chunks(n, FILL_CHUNK)) await boss.insert("bench", jobs(s, len));
      const done = deferred();
      let seen = 0;
      const r = await rate(n, async () => {
        await boss.work("bench", { localConcurrency: concurrency, batchSize: PREFETCH, burstWhenBatchFull: true }, async (batch: unknown[]) => {
          seen += batch.length;
          if (seen >= n) done.resolve();
        });
        await done.promise;
        // A batch is completed after its handler returns: done once the database says so.
        await settled(url, "SELECT count(*) AS n FROM pgboss.job WHERE state <> 'completed'");
      });
      await stop(boss);
      return r;
    },
    async latency(samples) {
      const { boss } = await fresh();
      let onStart: (() => void) | null = null;
      // Ten workers of one job each, as the others run ten handlers at once; woken by NOTIFY.
      await boss.work("bench", { localConcurrency: 10 }, async () => void onStart?.());
      await sleep(200);
      const out = await latencySamples(
        [],
        samples,
        (i) => boss.send("bench", { i }),
        (fn) => (onStart = fn),
      );
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
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    const { rows } = await c
      .query<{ v: string; sc: string }>("SELECT current_setting('server_version') AS v, current_setting('synchronous_commit') AS sc")
      .finally(() => c.end());
    console.log(
      `PostgreSQL ${rows[0]?.v} (synchronous_commit ${rows[0]?.sc}${server ? ", throwaway server" : ", DATABASE_URL"}); ` +
        `${peerVersions(["graphile-worker", "pg-boss"])}; ${sizes.jobs} jobs; ${machineLine()}\n`,
    );
    // The floors last: their columns and the fractions of the deleting floor follow the peers
    // (bench/pg-floor.ts). The floor keeping finished jobs is what a queue that keeps them
    // readable, as Conveyor does by default, can reach at best; graphile-worker deletes them.
    // "Conveyor, event log off" right after Conveyor: its column is the switch's effect, and
    // graphile-worker's ratio to it is Conveyor's with the log off. The next one also deletes each
    // job as it completes: it keeps what graphile-worker keeps (no finished job, no event log).
    const subjects = [
      conveyor(dbs),
      conveyor(dbs, { eventLog: false }),
      conveyor(dbs, { eventLog: false, removeOnComplete: true }),
      graphileWorker(dbs),
      pgBoss(dbs),
      floorSubject(() => dbs.create("floor"), PREFETCH),
      floorSubject(() => dbs.create("floor"), PREFETCH, { keepFinished: true }),
    ].map((subject) => droppingEachDatabase(subject, dbs));
    const report = await runSideBySide(subjects, sizes);
    console.log("");
    printReport(subjects, report);
  } finally {
    await dbs.dropAll();
    await server?.stop();
  }
}
