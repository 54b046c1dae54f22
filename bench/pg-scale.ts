/**
 * `npm run bench -- --backend postgres --scale [--sizes 10000,100000,1000000] [--runs 3] [--samples 100] [--retained N] [--only conveyor]`
 *
 * How PostgreSQL claim+complete throughput and enqueue-to-start latency grow with the backlog,
 * Conveyor beside graphile-worker, each on a fresh database of one server (a throwaway one unless
 * DATABASE_URL). The size loop, the table and the curves are bench/scale.ts's (shared with SQLite
 * and Redis); this file says how each system gets a fresh database, and adds:
 * - graphile-worker's latency work is another task identifier (its workers filter by task over
 *   one shared index), where Conveyor's is another queue: each system's way of keeping work a
 *   worker does not take out of its way;
 * - `--retained N`: N completed jobs kept under the default retention beside every backlog,
 *   copied from one really completed job by one INSERT … SELECT generate_series (graphile-worker
 *   deletes finished jobs, so it gets none);
 * - many queues: 1,000 queues holding 5 jobs each and one worker on all of them, against one
 *   queue of 5,000: the time per claim round trip.
 *
 * Prints tables and writes docs/performance-postgres-scale.svg (throughput and p50 latency by
 * backlog size, log scale).
 */
import { Logger, makeWorkerUtils, run, type Runner, type WorkerUtils } from "graphile-worker";
import pg from "pg";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { silentLogger } from "../src/index.js";
import { startThrowawayPostgres, type ThrowawayPostgres } from "../testkit/servers/postgres.js";
import { chunks, deferred, FILL_CHUNK, fmt, latencySamples, median, peerVersions, sleep } from "./lib.js";
import { fillQueues, queueNames } from "./queues.js";
import { conveyorScale, PREFETCH, runScale, TAKE, type ScaleOptions, type ScaleSystem } from "./scale.js";

const quietGraphile = new Logger(() => () => undefined);

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

/**
 * Copies completed job `templateId` `n` times with fresh ids in one statement: every column
 * as the template has it (finished now, expiring under the default retention) except the id
 * (and seq, an identity column, left to its default).
 */
async function retainCopies(url: string, templateId: string, n: number): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const { rows } = await c.query<{ column_name: string }>(
      "SELECT column_name FROM information_schema.columns WHERE table_schema = 'conveyor' AND table_name = 'jobs' AND column_name NOT IN ('id', 'seq') ORDER BY ordinal_position",
    );
    const columns = rows.map((r) => pg.escapeIdentifier(r.column_name)).join(", ");
    await c.query(
      `INSERT INTO conveyor.jobs (id, ${columns}) SELECT j.id || '-r' || g, ${rows.map((r) => `j.${pg.escapeIdentifier(r.column_name)}`).join(", ")} ` +
        "FROM conveyor.jobs j, generate_series(1, $2::int) AS g WHERE j.id = $1",
      [templateId, n],
    );
  } finally {
    await c.end();
  }
}

function conveyor(baseUrl: string): ScaleSystem {
  return conveyorScale(
    "Conveyor",
    async () => {
      const db = await freshDatabase(baseUrl, "conveyor");
      const backend = new PostgresBackend({ connectionString: db.url, logger: silentLogger });
      await backend.migrate();
      return {
        backend,
        producer: () => new PostgresBackend({ connectionString: db.url, logger: silentLogger }),
        retain: (templateId, n) => retainCopies(db.url, templateId, n),
        settle: () => vacuumAnalyze(db.url),
        async drop() {
          await backend.close();
          await db.drop();
        },
      };
    },
    { prefetch: PREFETCH },
  );
}

function graphile(baseUrl: string): ScaleSystem {
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
    async open({ waiting, delayed }) {
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
    const names = queueNames(queueCount);
    // Every queue is known to the store (it had a job once); with onlyFirstFilled all but the first are empty now.
    await fillQueues(backend, names, perQueue, onlyFirstFilled);
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

export async function main(options: Omit<ScaleOptions, "svgPath"> & { svgPath: string }): Promise<void> {
  let server: ThrowawayPostgres | null = null;
  let url = process.env.DATABASE_URL;
  if (!url) {
    server = await startThrowawayPostgres({ database: "bench" });
    url = server.url;
  }
  try {
    await runScale("PostgreSQL growth", peerVersions(["graphile-worker"]), [conveyor(url), graphile(url)], options);
    if (options.only.length > 0 && !options.only.some((o) => "conveyor".includes(o.toLowerCase()))) return;
    console.log("\n## Many queues (Conveyor): median ms per claim of 5 jobs, one worker over every queue\n");
    const one = await manyQueues(url, 1, 5_000, 200);
    const many = await manyQueues(url, 1_000, 5, 200);
    const empty = await manyQueues(url, 1_000, 5_000, 200, true);
    console.log(
      `| queues × jobs | ms per claim |\n| --- | ---: |\n| 1 × 5,000 | ${fmt(one)} |\n| 1,000 × 5 | ${fmt(many)} |\n` +
        `| 1 × 5,000 + 999 empty | ${fmt(empty)} |`,
    );
  } finally {
    await server?.stop();
  }
}
