/**
 * `npm run bench -- --backend postgres --event-log-cost [--jobs 20000] [--runs 5]`
 *
 * What the durable event log (and the flow and stats-count triggers) cost PostgreSQL's processing and bulk
 * enqueue, with the triggers as each migration writes them, in one run:
 *
 * - `row-level (0004)`: migration 0004's FOR EACH ROW trigger, re-created from that file's text
 *   (one PL/pgSQL call and one single-row INSERT per job changed);
 * - `statement-level (0007)`: the schema as migrated today (one INSERT … SELECT per statement,
 *   from its transition tables);
 * - `statement-level, flow triggers off`: as above with the flow triggers disabled, so the
 *   figure shows what their WHEN clauses cost jobs that belong to no flow;
 * - `statement-level, stats counts off`: the job_counts triggers (stats(), also 0007) disabled,
 *   so the figure shows what keeping those counts costs;
 * - `event log off`: every event trigger disabled (no event written at all; counts kept).
 *
 * Each variant has its own database on one server (a throwaway one unless DATABASE_URL); every
 * run empties the tables (TRUNCATE fires no trigger), bulk-enqueues `--jobs` no-op jobs (timed)
 * and processes them with one Worker at concurrency 10, 500 per fetch, maintenance off (timed
 * until the last completion is committed), with the WAL bytes per job of each phase. The variants
 * take turns within each run. Medians.
 *
 * Then, for the row-level and the statement-level designs: the plans of enqueue, claim and
 * complete of 500 jobs (EXPLAIN (ANALYZE, BUFFERS); the "Trigger …" lines are the event log's
 * time inside the statement), and those trigger times as medians of 15 rolled-back runs per
 * statement, the designs taking turns (steadier than throughput on a loaded machine).
 */
import { readFileSync } from "node:fs";
import pg from "pg";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { Queue, silentLogger, Worker } from "../src/index.js";
import { startThrowawayPostgres, type ThrowawayPostgres } from "../testkit/servers/postgres.js";
import { chunks, deferred, FILL_CHUNK, fmt, formatLoad, interleaved, machineLine, median, noopJobs, rate } from "./lib.js";
import { loadavg } from "node:os";
import { CLAIM_ARGS, enqueueArgs, explain, statements, walLsn, walSince } from "./pg-explain.js";

const PREFETCH = 500;
const CONCURRENCY = 10;

interface Variant {
  readonly name: string;
  /** SQL run once on the migrated schema `conveyor` to turn it into this variant. */
  readonly setup: string;
}

/** Migration 0004's row-level event trigger (function and trigger), for schema `conveyor`. */
function rowLevelTrigger(): string {
  const text = readFileSync(new URL("../src/backend/postgres/migrations/0004_job_logs.sql", import.meta.url), "utf8");
  const from = text.indexOf("CREATE FUNCTION {{schema}}.record_job_event()");
  const end = "FOR EACH ROW EXECUTE FUNCTION {{schema}}.record_job_event();";
  const to = text.indexOf(end);
  if (from < 0 || to < 0) throw new Error("migration 0004 no longer holds the row-level event trigger this bench re-creates");
  return text.slice(from, to + end.length).replaceAll("{{schema}}", "conveyor");
}

const variants: readonly Variant[] = [
  {
    name: "row-level (0004)",
    setup: `DROP TRIGGER jobs_events_added ON conveyor.jobs; DROP TRIGGER jobs_events_changed ON conveyor.jobs; ${rowLevelTrigger()}`,
  },
  { name: "statement-level (0007)", setup: "" },
  {
    name: "statement-level, flow triggers off",
    setup: "ALTER TABLE conveyor.jobs DISABLE TRIGGER flow_child_settled; ALTER TABLE conveyor.jobs DISABLE TRIGGER flow_parent_cancelled",
  },
  {
    name: "statement-level, stats counts off",
    setup:
      "ALTER TABLE conveyor.jobs DISABLE TRIGGER jobs_counts_added; ALTER TABLE conveyor.jobs DISABLE TRIGGER jobs_counts_changed; " +
      "ALTER TABLE conveyor.jobs DISABLE TRIGGER jobs_counts_removed",
  },
  {
    name: "event log off",
    setup: "ALTER TABLE conveyor.jobs DISABLE TRIGGER jobs_events_added; ALTER TABLE conveyor.jobs DISABLE TRIGGER jobs_events_changed",
  },
];

async function adminQuery(baseUrl: string, sql: string): Promise<void> {
  const admin = new pg.Client({ connectionString: baseUrl });
  await admin.connect();
  try {
    await admin.query(sql);
  } finally {
    await admin.end();
  }
}

interface Store {
  readonly name: string;
  readonly database: string;
  readonly backend: PostgresBackend;
  readonly client: pg.Client;
}

async function openStore(baseUrl: string, variant: Variant, index: number): Promise<Store> {
  const database = `event_log_cost_${process.pid}_${index}`;
  await adminQuery(baseUrl, `DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
  await adminQuery(baseUrl, `CREATE DATABASE ${database}`);
  const url = new URL(baseUrl);
  url.pathname = `/${database}`;
  const backend = new PostgresBackend({ connectionString: url.toString(), logger: silentLogger });
  await backend.migrate();
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  // As on the backend's own connections (src/backend/postgres/pool-client.ts), for the EXPLAINs.
  await client.query("SET jit = off");
  if (variant.setup !== "") await client.query(variant.setup);
  return { name: variant.name, database, backend, client };
}

interface Figures {
  bulk: number;
  processing: number;
  events: number;
  /** WAL bytes per job of the bulk enqueue, and of the processing, each after a CHECKPOINT. */
  walEnqueue: number;
  walProcessing: number;
}

async function measure(store: Store, jobs: number): Promise<Figures> {
  await store.client.query("TRUNCATE conveyor.jobs, conveyor.events, conveyor.job_counts CASCADE");
  const q = new Queue("bench", { backend: store.backend });
  await store.client.query("CHECKPOINT");
  let lsn = await walLsn(store.client);
  const bulk = await rate(jobs, async () => {
    for (const [s, n] of chunks(jobs, FILL_CHUNK)) await q.addBulk(noopJobs(s, n));
  });
  const walEnqueue = (await walSince(store.client, lsn)) / jobs;
  await store.client.query("VACUUM ANALYZE conveyor.jobs");
  await store.client.query("CHECKPOINT");
  lsn = await walLsn(store.client);
  const done = deferred();
  let completed = 0;
  let worker: Worker | undefined;
  const processing = await rate(jobs, async () => {
    worker = new Worker({
      backend: store.backend,
      queues: "bench",
      concurrency: CONCURRENCY,
      prefetch: PREFETCH,
      logger: silentLogger,
      maintenance: false,
      handlers: { noop: () => null },
    });
    worker.on("job:completed", () => {
      if (++completed === jobs) done.resolve();
    });
    await done.promise;
  });
  await worker?.close();
  const walProcessing = (await walSince(store.client, lsn)) / jobs;
  const { rows } = await store.client.query<{ n: string }>("SELECT count(*) AS n FROM conveyor.events");
  return { bulk, processing, events: Number(rows[0]!.n), walEnqueue, walProcessing };
}

const BATCH = 500;

/** EXPLAIN (ANALYZE, BUFFERS) of enqueue, claim and complete of BATCH jobs over 20,000 waiting, with `store`'s triggers. */
async function explainStatements(store: Store): Promise<void> {
  await store.client.query("TRUNCATE conveyor.jobs, conveyor.events, conveyor.job_counts CASCADE");
  const q = new Queue("bench", { backend: store.backend });
  for (const [s, n] of chunks(20_000, FILL_CHUNK)) await q.addBulk(noopJobs(s, n));
  await store.client.query("VACUUM ANALYZE conveyor.jobs");
  const sql = statements(store.backend);
  console.log(`\n## ${store.name}: statements over 20,000 waiting jobs, batches of ${BATCH}`);
  const ids = Array.from({ length: BATCH }, (_, i) => `explain-${i}`);
  await explain(
    store.client,
    `enqueue (${BATCH} jobs)`,
    sql.enqueue!,
    enqueueArgs(
      ids,
      ids.map((_, i) => ({ i })),
    ),
  );
  await explain(store.client, `claim (${BATCH} jobs, claim-one.sql)`, sql["claim-one"]!, CLAIM_ARGS);
  const { rows } = await store.client.query<{ id: string; lease_token: string }>(
    "SELECT id, lease_token::text FROM conveyor.jobs WHERE state = 'active' ORDER BY seq",
  );
  await explain(store.client, `complete (${rows.length} jobs)`, sql.complete!, [
    null,
    rows.map((r) => r.id),
    rows.map((r) => r.lease_token),
    rows.map(() => "null"),
  ]);
}

const REPEATS = 15;

interface StatementTimes {
  events: number;
  counts: number;
  execution: number;
}

/** EXPLAIN ANALYZE of `sql` in a transaction rolled back: the time in the event and count triggers, and in all. */
async function timedOnce(client: pg.Client, sql: string, values: unknown[]): Promise<StatementTimes> {
  await client.query("BEGIN");
  try {
    const { rows } = await client.query<{ "QUERY PLAN": string }>(`EXPLAIN (ANALYZE, COSTS OFF) ${sql}`, values);
    const times: StatementTimes = { events: 0, counts: 0, execution: 0 };
    for (const { "QUERY PLAN": line } of rows) {
      const trigger = /^Trigger (jobs_events\w*|jobs_counts\w*)[^:]*: time=([\d.]+)/.exec(line);
      if (trigger) times[trigger[1]!.startsWith("jobs_events") ? "events" : "counts"] += Number(trigger[2]);
      const total = /^Execution Time: ([\d.]+)/.exec(line);
      if (total) times.execution = Number(total[1]);
    }
    return times;
  } finally {
    await client.query("ROLLBACK");
  }
}

/**
 * The event triggers' own time inside enqueue, claim and complete of BATCH jobs, row-level
 * against statement-level: each statement run REPEATS times under EXPLAIN ANALYZE and rolled
 * back, the two designs taking turns, medians. On a loaded machine this is steadier than
 * throughput: it times only the statement, not the worker around it.
 */
async function triggerTimes(stores: readonly Store[]): Promise<void> {
  const prepared: Array<{ store: Store; run: Record<string, () => Promise<StatementTimes>> }> = [];
  for (const store of stores) {
    await store.client.query("TRUNCATE conveyor.jobs, conveyor.events, conveyor.job_counts CASCADE");
    const q = new Queue("bench", { backend: store.backend });
    for (const [s, n] of chunks(20_000, FILL_CHUNK)) await q.addBulk(noopJobs(s, n));
    await store.client.query("VACUUM ANALYZE conveyor.jobs");
    const sql = statements(store.backend);
    const claimArgs = CLAIM_ARGS;
    // A batch claimed for good, for the completions to settle (each rolled back).
    await store.client.query(sql["claim-one"]!, claimArgs);
    const { rows } = await store.client.query<{ id: string; lease_token: string }>(
      "SELECT id, lease_token::text FROM conveyor.jobs WHERE state = 'active' ORDER BY seq",
    );
    const ids = Array.from({ length: BATCH }, (_, i) => `timed-${i}`);
    prepared.push({
      store,
      run: {
        enqueue: () =>
          timedOnce(
            store.client,
            sql.enqueue!,
            enqueueArgs(
              ids,
              ids.map((_, i) => ({ i })),
            ),
          ),
        claim: () => timedOnce(store.client, sql["claim-one"]!, claimArgs),
        complete: () => timedOnce(store.client, sql.complete!, [null, rows.map((r) => r.id), rows.map((r) => r.lease_token), rows.map(() => "null")]),
      },
    });
  }
  const names = ["enqueue", "claim", "complete"];
  const samples = new Map<string, StatementTimes[]>();
  for (let rep = 0; rep < REPEATS; rep++) {
    for (const { store, run } of prepared) {
      for (const name of names) {
        const key = `${store.name}|${name}`;
        samples.set(key, [...(samples.get(key) ?? []), await run[name]!()]);
      }
    }
  }
  console.log(`\n## Time inside the statement (EXPLAIN ANALYZE, ${BATCH} jobs, 20,000 waiting; medians of ${REPEATS}, rolled back, designs taking turns)\n`);
  console.log("| statement | triggers | event trigger ms | count triggers ms | whole statement ms |\n| --- | --- | ---: | ---: | ---: |");
  for (const name of names) {
    for (const { store } of prepared) {
      const xs = samples.get(`${store.name}|${name}`)!;
      console.log(
        `| ${name} | ${store.name} | ${fmt(median(xs.map((x) => x.events)))} | ${fmt(median(xs.map((x) => x.counts)))} | ${fmt(median(xs.map((x) => x.execution)))} |`,
      );
    }
  }
}

export async function main(options: { jobs: number; runs: number }): Promise<void> {
  let server: ThrowawayPostgres | null = null;
  let url = process.env.DATABASE_URL;
  if (!url) {
    server = await startThrowawayPostgres({ database: "bench" });
    url = server.url;
  }
  const stores: Store[] = [];
  try {
    console.log(`# What the event log costs PostgreSQL\n\n${machineLine()}`);
    console.log(
      `\n${options.jobs} no-op jobs per run: bulk enqueue, then one worker at concurrency ${CONCURRENCY}, prefetch ${PREFETCH}; medians of ${options.runs} runs, variants taking turns\n`,
    );
    for (const [i, v] of variants.entries()) stores.push(await openStore(url, v, i));
    const results = await interleaved(
      stores,
      options.runs,
      "bulk / processing jobs/s",
      (s) => measure(s, options.jobs),
      (f) => `${fmt(f.bulk)} / ${fmt(f.processing)} (${f.events} events)`,
    );
    const base = median(results[1]!.map((f) => f.processing));
    console.log(
      "| triggers | bulk enqueue jobs/s | processing jobs/s | processing ÷ statement-level | events per job | WAL bytes/job enqueue + processing | every run (processing) |",
    );
    console.log("| --- | ---: | ---: | ---: | ---: | ---: | --- |");
    for (const [i, store] of stores.entries()) {
      const figures = results[i]!;
      const processing = median(figures.map((f) => f.processing));
      console.log(
        `| ${store.name} | ${fmt(median(figures.map((f) => f.bulk)))} | ${fmt(processing)} | ${(processing / base).toFixed(2)}x | ` +
          `${fmt(median(figures.map((f) => f.events)) / options.jobs)} | ` +
          `${fmt(median(figures.map((f) => f.walEnqueue)))} + ${fmt(median(figures.map((f) => f.walProcessing)))} | ${figures.map((f) => fmt(f.processing)).join(" / ")} |`,
      );
    }
    console.log(`\nload average ${formatLoad(loadavg())} (1/5/15 min)`);
    // The statements themselves under each trigger design: the "Trigger …" lines at the end of
    // each plan are the time the event log took inside the statement.
    for (const store of stores.slice(0, 2)) await explainStatements(store);
    await triggerTimes(stores.slice(0, 2));
    console.log(`\nload average at the end ${formatLoad(loadavg())} (1/5/15 min)`);
  } finally {
    for (const s of stores) {
      await s.client.end().catch(() => undefined);
      await s.backend.close().catch(() => undefined);
      await adminQuery(url, `DROP DATABASE IF EXISTS ${s.database} WITH (FORCE)`).catch(() => undefined);
    }
    await server?.stop();
  }
}
