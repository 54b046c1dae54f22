/**
 * `npm run bench -- --backend postgres --explain [--backlog 100000] [--jobs 20000]`
 *
 * What each hot statement of the PostgreSQL backend costs inside the server, and how much WAL a
 * job writes over its life, beside graphile-worker doing the same work:
 *
 * 1. EXPLAIN (ANALYZE, BUFFERS) of claim, complete, fail (a retry) and enqueue, each on a batch
 *    of 500 (the bench's prefetch), over `--backlog` waiting jobs. The statements are the ones
 *    the backend sends (its rendered queries/*.sql), run through EXPLAIN with the same
 *    parameters, so the plan is the one production gets.
 * 2. WAL bytes per job: `pg_current_wal_lsn()` before and after enqueueing `--jobs` jobs in bulk
 *    and processing them with one worker (concurrency 10, prefetch 500), divided by the jobs, in
 *    total and per phase (enqueue, processing). A CHECKPOINT before each measured phase makes
 *    every system pay full-page images alike (the first change of a page after a checkpoint
 *    logs the whole page).
 *
 * Each system gets a fresh database on one server (a throwaway one unless DATABASE_URL).
 */
import { makeWorkerUtils, run, Logger } from "graphile-worker";
import pg from "pg";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { Queue, silentLogger, Worker } from "../src/index.js";
import { startThrowawayPostgres, type ThrowawayPostgres } from "../testkit/servers/postgres.js";
import { chunks, deferred, FILL_CHUNK, fmt, machineLine, noopJobs, peerVersions, sleep } from "./lib.js";

const BATCH = 500;
const quietGraphile = new Logger(() => () => undefined);

/** The backend's rendered statements (queries/*.sql with schema, channel and columns filled in). */
export function statements(backend: PostgresBackend): Record<string, string> {
  return (backend as unknown as { sql: Record<string, string> }).sql;
}

async function createDatabase(baseUrl: string, name: string): Promise<string> {
  const admin = new pg.Client({ connectionString: baseUrl });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`);
  } finally {
    await admin.end();
  }
  const url = new URL(baseUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

async function dropDatabase(baseUrl: string, name: string): Promise<void> {
  const admin = new pg.Client({ connectionString: baseUrl });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
  } finally {
    await admin.end();
  }
}

export async function walLsn(client: pg.Client): Promise<string> {
  const { rows } = await client.query<{ lsn: string }>("SELECT pg_current_wal_lsn()::text AS lsn");
  return rows[0]!.lsn;
}

export async function walSince(client: pg.Client, lsn: string): Promise<number> {
  const { rows } = await client.query<{ n: string }>("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint AS n", [lsn]);
  return Number(rows[0]!.n);
}

/** How many parameters a statement takes: its highest `$n` outside comments. */
export function parameterCount(sql: string): number {
  const code = sql.replace(/--[^\n]*/g, "");
  return Math.max(0, ...[...code.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));
}

/**
 * claim.sql's parameters as PostgresBackend.claimParams makes them for a worker on queue "bench"
 * (now, queues, names, limit, lease ms, worker id, host, pid, flow checked, starts at once, the
 * queue list's first and last name); complete-and-claim takes the same after the completions'.
 * For one queue the backend sends claim-one.sql (and complete-and-claim over it), which take the
 * same parameters.
 */
export const CLAIM_ARGS: unknown[] = [null, ["bench"], ["noop"], BATCH, 30_000, "explain-worker", "host", 1, false, null, "bench", "bench"];

/** EXPLAIN (ANALYZE, BUFFERS) of `sql` with `values`; prints and returns the plan text. */
export async function explain(client: pg.Client, label: string, sql: string, values: unknown[]): Promise<void> {
  // The parameter lists here are written by hand: say which one fell behind its statement.
  const placeholders = parameterCount(sql);
  if (placeholders !== values.length) {
    throw new Error(`bench/pg-explain.ts: "${label}" passes ${values.length} parameters, its statement takes ${placeholders}: update its argument list`);
  }
  // A custom plan, as the first five executions of a prepared statement get; the claim hides its
  // parameters in a MATERIALIZED CTE, so its custom and generic plans are the same.
  const { rows } = await client.query<{ "QUERY PLAN": string }>(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ${sql}`, values);
  console.log(`\n### ${label}\n\n\`\`\`\n${rows.map((r) => r["QUERY PLAN"]).join("\n")}\n\`\`\``);
}

const textArray = (xs: readonly (string | null)[]) => xs;

/** enqueue.sql's parameters for no-op jobs `ids` in queue "bench" carrying `data`, the way Queue.addBulk sends them. */
export function enqueueArgs(ids: readonly string[], data: readonly unknown[]): unknown[] {
  return [
    null,
    textArray(ids),
    ids.map(() => "bench"),
    ids.map(() => "noop"),
    data.map((d) => JSON.stringify(d)),
    ids.map(() => 0),
    ids.map(() => null),
    ids.map(() => 0),
    ids.map(() => 3),
    ids.map(() => '{"type":"exponential","delayMs":1000}'),
    ids.map(() => null),
    ids.map(() => 86_400_000),
    ids.map(() => null),
    ids.map(() => null),
    ["bench"],
    // Flow control's six columns (lane, group key and concurrency, limiter key, max and window):
    // NULL for a batch without groups or limiter keys.
    null,
    null,
    null,
    null,
    null,
    null,
  ];
}

async function explainConveyor(baseUrl: string, backlog: number): Promise<void> {
  const url = await createDatabase(baseUrl, `explain_conveyor_${process.pid}`);
  const backend = new PostgresBackend({ connectionString: url, logger: silentLogger });
  const client = new pg.Client({ connectionString: url });
  try {
    await backend.migrate();
    await client.connect();
    // As on the backend's own connections (src/backend/postgres/pool-client.ts).
    await client.query("SET jit = off");
    const q = new Queue("bench", { backend });
    for (const [s, n] of chunks(backlog, FILL_CHUNK)) await q.addBulk(noopJobs(s, n));
    await client.query("VACUUM ANALYZE conveyor.jobs");
    const sql = statements(backend);
    console.log(`\n## Conveyor, ${backlog} waiting jobs in queue "bench", batches of ${BATCH}`);
    // enqueue: a batch of BATCH more, as Queue.addBulk sends them.
    const specs = noopJobs(backlog, BATCH);
    const ids = specs.map((_, i) => `explain-${i}`);
    await explain(
      client,
      `enqueue (${BATCH} jobs, one statement)`,
      sql.enqueue!,
      enqueueArgs(
        ids,
        specs.map((s) => s.data),
      ),
    );
    await explain(client, `claim (${BATCH} jobs, claim-one.sql: what a worker of one queue sends)`, sql["claim-one"]!, CLAIM_ARGS);
    const claimed = await client.query<{ id: string; lease_token: string }>(
      "SELECT id, lease_token::text FROM conveyor.jobs WHERE state = 'active' ORDER BY seq",
    );
    const half = claimed.rows.slice(0, BATCH / 2);
    const rest = claimed.rows.slice(BATCH / 2);
    await explain(client, `complete (${half.length} jobs, one statement)`, sql.complete!, [
      null,
      half.map((r) => r.id),
      half.map((r) => r.lease_token),
      half.map(() => "null"),
    ]);
    const error = JSON.stringify({ name: "Error", message: "boom", stack: null });
    await explain(client, `fail, retried at once (${rest.length} jobs, one statement)`, sql.fail!, [
      null,
      rest.map((r) => r.id),
      rest.map((r) => r.lease_token),
      rest.map(() => error),
      rest.map(() => 0),
    ]);
    if (sql["complete-and-claim-one"] !== undefined) {
      // Complete-and-claim in one statement (what the worker sends when it wants more work).
      await explain(client, `claim (${BATCH} jobs, claim-one.sql: what a worker of one queue sends)`, sql["claim-one"]!, CLAIM_ARGS);
      const again = await client.query<{ id: string; lease_token: string }>(
        "SELECT id, lease_token::text FROM conveyor.jobs WHERE state = 'active' ORDER BY seq",
      );
      await explain(
        client,
        `complete-and-claim: complete ${again.rows.length} + claim ${BATCH} (one statement, over claim-one.sql)`,
        sql["complete-and-claim-one"],
        [null, again.rows.map((r) => r.id), again.rows.map((r) => r.lease_token), again.rows.map(() => "null"), ...CLAIM_ARGS.slice(1)],
      );
    }
    const t0 = performance.now();
    await backend.stats();
    const statsMs = performance.now() - t0;
    const t1 = performance.now();
    await backend.stats();
    console.log(`\nstats() over ${backlog} waiting: ${fmt(Math.min(statsMs, performance.now() - t1))} ms (best of 2)`);
    await explain(client, "stats (all queues)", sql.stats!, [null, null]);
  } finally {
    await client.end().catch(() => undefined);
    await backend.close();
    await dropDatabase(baseUrl, `explain_conveyor_${process.pid}`);
  }
}

interface Wal {
  enqueue: number;
  processing: number;
}

/** WAL bytes per job of `enqueue()` and then `processAll()`, each phase after a CHECKPOINT. */
async function walPerJob(client: pg.Client, jobs: number, enqueue: () => Promise<void>, processAll: () => Promise<void>): Promise<Wal> {
  await client.query("CHECKPOINT");
  let lsn = await walLsn(client);
  await enqueue();
  const enqueued = await walSince(client, lsn);
  await client.query("CHECKPOINT");
  lsn = await walLsn(client);
  await processAll();
  const processed = await walSince(client, lsn);
  return { enqueue: enqueued / jobs, processing: processed / jobs };
}

async function walConveyor(baseUrl: string, jobs: number): Promise<Wal> {
  const name = `wal_conveyor_${process.pid}`;
  const url = await createDatabase(baseUrl, name);
  const backend = new PostgresBackend({ connectionString: url, logger: silentLogger });
  const client = new pg.Client({ connectionString: url });
  try {
    await backend.migrate();
    await client.connect();
    const q = new Queue("bench", { backend });
    return await walPerJob(
      client,
      jobs,
      async () => {
        for (const [s, n] of chunks(jobs, FILL_CHUNK)) await q.addBulk(noopJobs(s, n));
      },
      async () => {
        const done = deferred();
        let completed = 0;
        const worker = new Worker({
          backend,
          queues: "bench",
          concurrency: 10,
          prefetch: BATCH,
          logger: silentLogger,
          maintenance: false,
          handlers: { noop: () => null },
        });
        worker.on("job:completed", () => {
          if (++completed === jobs) done.resolve();
        });
        await done.promise;
        await worker.close();
      },
    );
  } finally {
    await client.end().catch(() => undefined);
    await backend.close();
    await dropDatabase(baseUrl, name);
  }
}

async function walGraphile(baseUrl: string, jobs: number): Promise<Wal> {
  const name = `wal_graphile_${process.pid}`;
  const url = await createDatabase(baseUrl, name);
  const utils = await makeWorkerUtils({ connectionString: url, logger: quietGraphile });
  const client = new pg.Client({ connectionString: url });
  try {
    await utils.migrate();
    await client.connect();
    return await walPerJob(
      client,
      jobs,
      async () => {
        for (const [s, n] of chunks(jobs, FILL_CHUNK)) {
          await utils.addJobs(Array.from({ length: n }, (_, k) => ({ identifier: "noop", payload: { i: s + k } })));
        }
      },
      async () => {
        const done = deferred();
        let seen = 0;
        const runner = await run({
          connectionString: url,
          concurrency: 10,
          maxPoolSize: 12,
          noHandleSignals: true,
          logger: quietGraphile,
          taskList: { noop: () => void (++seen === jobs && done.resolve()) },
          preset: { worker: { localQueue: { size: BATCH }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
        });
        await done.promise;
        // Completed jobs are deleted: the batched completions are committed once the table is empty.
        for (;;) {
          const { rows } = await client.query<{ n: string }>("SELECT count(*) AS n FROM graphile_worker._private_jobs");
          if (Number(rows[0]!.n) === 0) break;
          await sleep(10);
        }
        await runner.stop();
      },
    );
  } finally {
    await client.end().catch(() => undefined);
    await utils.release();
    await dropDatabase(baseUrl, name);
  }
}

export async function main(options: { backlog: number; jobs: number }): Promise<void> {
  let server: ThrowawayPostgres | null = null;
  let url = process.env.DATABASE_URL;
  if (!url) {
    server = await startThrowawayPostgres({ database: "bench" });
    url = server.url;
  }
  try {
    console.log(`# PostgreSQL statement plans and WAL per job\n\n${peerVersions(["graphile-worker"])}; ${machineLine()}`);
    await explainConveyor(url, options.backlog);
    console.log(`\n## WAL bytes per job (${options.jobs} jobs: bulk enqueue, then one worker at concurrency 10, prefetch ${BATCH})\n`);
    console.log("| system | enqueue | processing (claim + complete) | total |\n| --- | ---: | ---: | ---: |");
    for (const [label, measure] of [
      ["Conveyor", walConveyor],
      ["graphile-worker", walGraphile],
    ] as const) {
      const wal = await measure(url, options.jobs);
      console.log(`| ${label} | ${fmt(wal.enqueue)} | ${fmt(wal.processing)} | ${fmt(wal.enqueue + wal.processing)} |`);
    }
  } finally {
    await server?.stop();
  }
}
