/**
 * `node scripts/bench.mjs bench/pg-contract-floor.ts [--jobs 20000] [--runs 3] [--concurrency 10] [--only 1,2,3] [--statements]`
 *
 * Where PostgreSQL processing's time goes between the floor that keeps finished jobs and
 * Conveyor's Worker, step by step, beside graphile-worker in the same run (docs/performance-postgres.md,
 * "Session 27"). Every subject processes `--jobs` pre-filled no-op jobs at `--concurrency` (default 10) with
 * 500 jobs claimed per round trip, on its own fresh database of one throwaway server, the
 * subjects interleaved run by run; every loop but graphile-worker's sends one completion
 * statement at a time, as Conveyor's Worker does. Per subject, medians over `--runs`: jobs/s, the paired ratio to
 * graphile-worker, CPU time per job of this process (the client) and of the server (every
 * server process, from /proc), and WAL bytes per job (the server's WAL position before and after;
 * `--statements` adds each step's costliest statements, execution µs per job from
 * pg_stat_statements). On this 2-core machine the client and the server's two busy
 * backends share the cores, so both columns count.
 *
 * The steps, each one piece more than the one before:
 * 1. "floor, keeping finished" (bench/pg-floor.ts): the least table that keeps finished jobs
 *    readable (5 columns, a bigint id, an index of waiting and one of finished rows), the least
 *    statements and the least client loop.
 * 2. "narrow table": the same loop and statements over a table with the 18 columns a job's
 *    claim and completion read or write (text ids, queue, name, priority, run_at, seq, state,
 *    attempt, lease token and expiry, worker, start and finish, retention deadline, payload,
 *    result) and the four indexes its contract needs: waiting jobs in claim order, running jobs
 *    (the rescue of expired leases), finished jobs by queue and time (retention by count, the
 *    dashboard), retention deadlines (retention by age). No trigger.
 * 2b. "finished jobs in a table of their own (narrow)": step 2's columns and indexes split in two
 *    tables, a completion moving the row (SPLIT_TABLES below): the finished-job path the issue
 *    proposes, as a ceiling (no cross-table dedup).
 * 2c. "narrow table partitioned" (`--only 10`): step 2's table partitioned by state
 *    (PARTITIONED_TABLE below): the same move done by PostgreSQL's row movement, step 2's
 *    statements with the claim's state named.
 * 3. "Conveyor's rows, no statement triggers": the same loop and statements over Conveyor's own
 *    `jobs` table as its migrations make it and its enqueue fills it (every column and index),
 *    with the statement triggers (event log, counts, fold) dropped.
 * 3b. "Conveyor's rows, no statement triggers, finished jobs in a table of their own": step 3
 *    with step 2b's design over every column of Conveyor's (CONVEYOR_SPLIT_TABLE below).
 * 4. "Conveyor's rows": the same with the triggers, as shipped.
 * 4b. "Conveyor's rows, finished jobs in a table of their own (triggers on both)": step 3b with
 *    the statement triggers, their work for a completion done on the move (CONVEYOR_SPLIT_TRIGGERS).
 * 4c. "Conveyor's rows, partitioned" (`--only 11`): step 4 over Conveyor's table partitioned by state, its
 *    statement triggers on the parent (PARTITIONED_CONVEYOR below): a pricing, the least loop's
 *    statements, not Conveyor's own (docs/performance-postgres.md, "Session 31").
 * 5. "Conveyor's calls, least loop": Conveyor's own claim and complete (`backend.claim`,
 *    `backend.complete`: its statements, their parameters and rows parsed into jobs), driven by
 *    the floor's loop instead of the Worker.
 * 6. "Conveyor's Worker": what bench/postgres.ts measures (prefetch 500).
 *
 * Steps 2 and 3 are measurements, not designs: a table without Conveyor's other columns has no
 * history, options or flow fields, and one without triggers has no event log and no counts.
 */
import { parseArgs } from "node:util";
import pg from "pg";
import type { ClaimedJob } from "../src/backend/contract.js";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { Queue, silentLogger } from "../src/index.js";
import { startThrowawayPostgres } from "../testkit/servers/postgres.js";
import { chunks, conveyorProcessFilled, FILL_CHUNK, fmt, interleaved, machineLine, median, noopJobs, pairedRatio, rate, serverCpuMs } from "./lib.js";
import { drainLoop, KEEPING, processAll, type FloorStatements } from "./pg-floor.js";
import { Databases, graphileWorker, PREFETCH } from "./postgres.js";

const { values } = parseArgs({
  options: {
    jobs: { type: "string", default: "20000" },
    runs: { type: "string", default: "3" },
    concurrency: { type: "string", default: "10" },
    only: { type: "string" },
    statements: { type: "boolean" },
  },
});
const jobs = Number(values.jobs);
const runs = Number(values.runs);
/** Handlers running at once in every subject (the goals name 10 and 50). */
const CONCURRENCY = Number(values.concurrency);

/** The store's clock in ms, as Conveyor's statements compute it. */
const NOW_MS = "(floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint";

/**
 * The least claim and completion over a table of Conveyor's columns (`table`), for the floor's loop.
 * `partitioned`: the claim's UPDATE also names the state it takes, as Conveyor's claim does on the
 * branch pg-partition (docs/performance-postgres.md, "Session 31"): by its ids alone the UPDATE
 * reaches the finished partition too, and what that costs follows the plan, which followed
 * whether the parent or its partitions were analyzed (0.97x against 1.33x graphile-worker in one
 * run).
 */
function leastStatements(table: string, laneColumn: boolean, { partitioned = false } = {}): FloorStatements {
  return {
    schema: "",
    claim: `UPDATE ${table} AS j SET state = 'active', attempt = j.attempt + 1, lease_token = j.lease_token + 1,
        lease_expires_at = ${NOW_MS} + 30000, worker_id = 'w', worker_host = 'h', worker_pid = 1, started_at = ${NOW_MS}
      WHERE j.id IN (SELECT id FROM ${table} WHERE queue = 'bench' AND state = 'waiting'${laneColumn ? " AND lane IS NULL" : ""}
                     ORDER BY priority, run_at, seq LIMIT $1 FOR UPDATE SKIP LOCKED)${partitioned ? " AND j.state = 'waiting'" : ""}
      RETURNING j.id, j.name, j.payload, j.attempt, j.lease_token`,
    complete: `UPDATE ${table} SET state = 'completed', finished_at = ${NOW_MS}, result = 'null', expires_at = ${NOW_MS} + 86400000
      WHERE id = ANY ($1::text[]) AND state = 'active'`,
  };
}

/** Step 2's table, filled from Conveyor's own rows so both hold the same jobs. */
const NARROW_TABLE = `
CREATE TABLE narrow_jobs (
  id text COLLATE "C" PRIMARY KEY, queue text COLLATE "C" NOT NULL, name text COLLATE "C" NOT NULL,
  priority integer NOT NULL, run_at bigint NOT NULL, seq bigint NOT NULL, state text NOT NULL,
  attempt integer NOT NULL, lease_token bigint NOT NULL, lease_expires_at bigint,
  worker_id text, worker_host text, worker_pid integer, started_at bigint, finished_at bigint, expires_at bigint,
  payload json NOT NULL, result json
) WITH (fillfactor = 80);
INSERT INTO narrow_jobs
  SELECT id, queue, name, priority, run_at, seq, state, attempt, lease_token, lease_expires_at, worker_id, worker_host,
         worker_pid, started_at, finished_at, expires_at, payload, result
  FROM conveyor.jobs;
CREATE INDEX narrow_jobs_claim ON narrow_jobs (queue, priority, run_at, seq) WHERE state = 'waiting';
CREATE INDEX narrow_jobs_active ON narrow_jobs (id) WHERE state = 'active';
CREATE INDEX narrow_jobs_finished ON narrow_jobs (queue, state, finished_at, seq) WHERE state IN ('completed', 'dead', 'cancelled');
CREATE INDEX narrow_jobs_expires ON narrow_jobs (expires_at) WHERE expires_at IS NOT NULL;`;

/**
 * Step 2b's tables: the design the issue proposes for the finished-job path. The jobs not finished
 * (waiting, running) in a table of step 2's columns less the finish's (finish time, retention
 * deadline, result), with its indexes of waiting and running jobs; a completion moves the row
 * into a table of finished jobs by one `WITH … DELETE … RETURNING` + `INSERT`, which has step 2's
 * two indexes of finished rows besides its primary key (by id: a finished job stays readable).
 * The claim is step 2's over `split_jobs`. Dedup by id across the two tables (a shared id table,
 * or a re-check after the insert) is not built, so this step is a ceiling for the design.
 */
const SPLIT_TABLES = `
CREATE TABLE split_jobs (
  id text COLLATE "C" PRIMARY KEY, queue text COLLATE "C" NOT NULL, name text COLLATE "C" NOT NULL,
  priority integer NOT NULL, run_at bigint NOT NULL, seq bigint NOT NULL, state text NOT NULL,
  attempt integer NOT NULL, lease_token bigint NOT NULL, lease_expires_at bigint,
  worker_id text, worker_host text, worker_pid integer, started_at bigint, payload json NOT NULL
) WITH (fillfactor = 80);
INSERT INTO split_jobs
  SELECT id, queue, name, priority, run_at, seq, state, attempt, lease_token, lease_expires_at, worker_id, worker_host,
         worker_pid, started_at, payload
  FROM conveyor.jobs;
CREATE INDEX split_jobs_claim ON split_jobs (queue, priority, run_at, seq) WHERE state = 'waiting';
CREATE INDEX split_jobs_active ON split_jobs (id) WHERE state = 'active';
CREATE TABLE split_finished (
  id text COLLATE "C" PRIMARY KEY, queue text COLLATE "C" NOT NULL, name text COLLATE "C" NOT NULL,
  seq bigint NOT NULL, state text NOT NULL, attempt integer NOT NULL, worker_id text, worker_host text,
  worker_pid integer, started_at bigint, finished_at bigint NOT NULL, expires_at bigint, payload json NOT NULL, result json
);
CREATE INDEX split_finished_window ON split_finished (queue, state, finished_at, seq);
CREATE INDEX split_finished_expires ON split_finished (expires_at) WHERE expires_at IS NOT NULL;`;

/**
 * Step 2c's table: step 2's, partitioned by state into the jobs not finished and the finished
 * ones (PostgreSQL's own row movement: an UPDATE that changes the partition key deletes the row
 * from one partition and inserts it into the other). Step 2's statements, the claim naming the
 * state it takes (leastStatements); the primary key must hold the partition key, so `id` is unique
 * per partition only.
 */
const PARTITIONED_TABLE = `
CREATE TABLE part_jobs (
  id text COLLATE "C" NOT NULL, queue text COLLATE "C" NOT NULL, name text COLLATE "C" NOT NULL,
  priority integer NOT NULL, run_at bigint NOT NULL, seq bigint NOT NULL, state text COLLATE "C" NOT NULL,
  attempt integer NOT NULL, lease_token bigint NOT NULL, lease_expires_at bigint,
  worker_id text, worker_host text, worker_pid integer, started_at bigint, finished_at bigint, expires_at bigint,
  payload json NOT NULL, result json
) PARTITION BY LIST (state);
CREATE TABLE part_jobs_finished PARTITION OF part_jobs FOR VALUES IN ('completed', 'dead', 'cancelled');
CREATE TABLE part_jobs_live PARTITION OF part_jobs DEFAULT WITH (fillfactor = 80);
ALTER TABLE part_jobs_live ADD PRIMARY KEY (id);
ALTER TABLE part_jobs_finished ADD PRIMARY KEY (id);
INSERT INTO part_jobs
  SELECT id, queue, name, priority, run_at, seq, state, attempt, lease_token, lease_expires_at, worker_id, worker_host,
         worker_pid, started_at, finished_at, expires_at, payload, result
  FROM conveyor.jobs;
CREATE INDEX part_jobs_claim ON part_jobs_live (queue, priority, run_at, seq) WHERE state = 'waiting';
CREATE INDEX part_jobs_active ON part_jobs_live (id) WHERE state = 'active';
CREATE INDEX part_jobs_window ON part_jobs_finished (queue, state, finished_at, seq);
CREATE INDEX part_jobs_expires ON part_jobs_finished (expires_at) WHERE expires_at IS NOT NULL;`;

const SPLIT_STATEMENTS: FloorStatements = {
  schema: "",
  claim: leastStatements("split_jobs", false).claim,
  complete: `WITH moved AS (DELETE FROM split_jobs WHERE id = ANY ($1::text[]) AND state = 'active'
      RETURNING id, queue, name, seq, attempt, worker_id, worker_host, worker_pid, started_at, payload)
    INSERT INTO split_finished
      SELECT id, queue, name, seq, 'completed', attempt, worker_id, worker_host, worker_pid, started_at,
             ${NOW_MS}, ${NOW_MS} + 86400000, payload, 'null' FROM moved`,
};

/**
 * Step 3b: step 3 with the design of step 2b. Conveyor's own rows after its enqueue, its
 * statement triggers dropped, and a table of finished jobs made like `jobs` (every column) with
 * the primary key and the window and retention-deadline indexes; the completion moves the row with
 * every column. `job_logs`' foreign key to `jobs` (ON DELETE CASCADE) is dropped: with it a move
 * would delete the job's logs, so the design cannot keep it (the logs would go when the finished
 * row is pruned or removed instead).
 */
const CONVEYOR_SPLIT_TABLE = `
ALTER TABLE conveyor.job_logs DROP CONSTRAINT job_logs_job_id_fkey;
CREATE TABLE conveyor.jobs_done (LIKE conveyor.jobs INCLUDING DEFAULTS);
ALTER TABLE conveyor.jobs_done ADD PRIMARY KEY (id);
CREATE INDEX jobs_done_window ON conveyor.jobs_done (queue, state, finished_at, seq);
CREATE INDEX jobs_done_expires ON conveyor.jobs_done (expires_at) WHERE expires_at IS NOT NULL;`;

/**
 * Step "Conveyor's rows, partitioned": Conveyor's `jobs` (as its
 * migrations make it, filled) turned into a table partitioned by state, the jobs not finished in
 * `jobs_live` and the finished ones in `jobs_finished`: a completion, a failure to dead or a
 * cancel is PostgreSQL's row movement (the UPDATE deletes the row from one partition and inserts
 * it into the other), so the backend's statements keep their text but for the states a few must
 * name (the claim's, for one: leastStatements). A pricing of the design
 * (docs/performance-postgres.md, "Session 31"), not a migration: the migration built from it,
 * with what it also needs (dedup by id across the partitions, the flow triggers and `job_logs`'
 * cascade rewritten, statements that meet a moved row run again), is on the branch pg-partition.
 */
const PARTITIONED_CONVEYOR = `
ALTER TABLE conveyor.job_logs DROP CONSTRAINT job_logs_job_id_fkey;
ALTER TABLE conveyor.jobs RENAME TO jobs_unpartitioned;
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT c.relname FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
           WHERE i.indrelid = 'conveyor.jobs_unpartitioned'::regclass LOOP
    EXECUTE format('ALTER INDEX conveyor.%I RENAME TO %I', r.relname, r.relname || '_unpartitioned');
  END LOOP;
END $$;
CREATE SEQUENCE conveyor.jobs_seq;
SELECT setval('conveyor.jobs_seq', (SELECT max(seq) FROM conveyor.jobs_unpartitioned));
CREATE TABLE conveyor.jobs (LIKE conveyor.jobs_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
  PARTITION BY LIST (state);
ALTER TABLE conveyor.jobs ALTER seq SET DEFAULT nextval('conveyor.jobs_seq');
CREATE TABLE conveyor.jobs_live PARTITION OF conveyor.jobs
  FOR VALUES IN ('scheduled', 'waiting', 'waiting-children', 'active')
  WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 5000,
        autovacuum_vacuum_cost_limit = 2000, autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 10000);
CREATE TABLE conveyor.jobs_finished PARTITION OF conveyor.jobs
  FOR VALUES IN ('completed', 'dead', 'cancelled')
  WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_cost_limit = 2000, autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 10000);
INSERT INTO conveyor.jobs SELECT * FROM conveyor.jobs_unpartitioned;
DROP TABLE conveyor.jobs_unpartitioned;

ALTER TABLE conveyor.jobs_live ADD PRIMARY KEY (id);
ALTER TABLE conveyor.jobs_finished ADD PRIMARY KEY (id);
CREATE INDEX jobs_claim ON conveyor.jobs_live (queue, priority, run_at, seq) WHERE state = 'waiting' AND lane IS NULL;
CREATE INDEX jobs_lanes ON conveyor.jobs_live (queue, lane, priority, run_at, seq)
  WHERE lane IS NOT NULL AND state IN ('waiting', 'scheduled');
CREATE INDEX jobs_scheduled ON conveyor.jobs_live (run_at) WHERE state = 'scheduled';
CREATE INDEX jobs_waiting_seq ON conveyor.jobs_live (queue, seq) WHERE state = 'waiting';
CREATE INDEX jobs_active ON conveyor.jobs_live (id) WHERE state = 'active';
CREATE INDEX jobs_active_removed_on_complete ON conveyor.jobs_live (id) WHERE state = 'active' AND retain_completed_ms = 0;
CREATE INDEX jobs_active_removed_on_fail ON conveyor.jobs_live (id) WHERE state = 'active' AND retain_dead_ms = 0;
CREATE INDEX jobs_live_expires ON conveyor.jobs_live (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX jobs_live_parent ON conveyor.jobs_live (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX jobs_finished_window ON conveyor.jobs_finished (queue, state, finished_at, seq);
CREATE INDEX jobs_finished_expires ON conveyor.jobs_finished (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX jobs_finished_parent ON conveyor.jobs_finished (parent_id) WHERE parent_id IS NOT NULL;

-- The statement triggers on the root, as 0007 and 0010 make them: a move is an UPDATE to them
-- (its rows are in the UPDATE's transition tables), so they count and log it as shipped.
CREATE TRIGGER jobs_counts_added AFTER INSERT ON conveyor.jobs
  REFERENCING NEW TABLE AS added_jobs FOR EACH STATEMENT EXECUTE FUNCTION conveyor.count_added_jobs();
CREATE TRIGGER jobs_counts_changed AFTER UPDATE ON conveyor.jobs
  REFERENCING OLD TABLE AS changed_before NEW TABLE AS changed_after FOR EACH STATEMENT EXECUTE FUNCTION conveyor.count_changed_jobs();
CREATE TRIGGER jobs_counts_removed AFTER DELETE ON conveyor.jobs
  REFERENCING OLD TABLE AS removed_jobs FOR EACH STATEMENT EXECUTE FUNCTION conveyor.count_removed_jobs();
CREATE TRIGGER jobs_counts_then_fold AFTER INSERT OR UPDATE OR DELETE ON conveyor.jobs
  FOR EACH STATEMENT EXECUTE FUNCTION conveyor.fold_job_counts_every_64();
CREATE TRIGGER jobs_events_added AFTER INSERT ON conveyor.jobs
  REFERENCING NEW TABLE AS added_jobs FOR EACH STATEMENT EXECUTE FUNCTION conveyor.record_added_events();
CREATE TRIGGER jobs_events_changed AFTER UPDATE ON conveyor.jobs
  REFERENCING OLD TABLE AS changed_before NEW TABLE AS changed_after FOR EACH STATEMENT EXECUTE FUNCTION conveyor.record_changed_events();
-- A child's settle is a row arriving in jobs_finished (row-level AFTER UPDATE triggers do not fire
-- on a move): the flow triggers' conditions, on the arriving row. Their functions read OLD and
-- would be rewritten on NEW; this bench's jobs have no parent, so the conditions are what is priced.
CREATE TRIGGER flow_child_settled AFTER INSERT ON conveyor.jobs_finished FOR EACH ROW
  WHEN (NEW.parent_id IS NOT NULL) EXECUTE FUNCTION conveyor.flow_child_settled();
CREATE TRIGGER flow_parent_cancelled AFTER INSERT ON conveyor.jobs_finished FOR EACH ROW
  WHEN (NEW.state = 'cancelled' AND NEW.on_child_failure IS NOT NULL) EXECUTE FUNCTION conveyor.flow_parent_cancelled();`;

/** Step 3b's statements: the claim of step 3, a completion moving each row with all of `jobs`' columns (read from the catalog). */
async function conveyorSplitStatements(url: string): Promise<FloorStatements> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ name: string }>(
      "SELECT column_name AS name FROM information_schema.columns WHERE table_schema = 'conveyor' AND table_name = 'jobs' ORDER BY ordinal_position",
    );
    const finished: Record<string, string> = { state: "'completed'", finished_at: NOW_MS, result: "'null'", expires_at: `${NOW_MS} + 86400000` };
    const names = rows.map((r) => r.name);
    return {
      schema: "",
      claim: leastStatements("conveyor.jobs", true).claim,
      complete: `WITH moved AS (DELETE FROM conveyor.jobs WHERE id = ANY ($1::text[]) AND state = 'active' RETURNING *)
        INSERT INTO conveyor.jobs_done (${names.join(", ")}) SELECT ${names.map((n) => finished[n] ?? n).join(", ")} FROM moved`,
    };
  } finally {
    await client.end();
  }
}

/**
 * Step 4b: step 3b with Conveyor's statement triggers kept on `jobs` and the same work done for the
 * move on `jobs_done`. The claim fires `jobs`' update triggers as in step 4; the completion's
 * deletion from `jobs` fires its delete triggers (the counts: active less the moved jobs; the
 * event log has none; the fold, 0010, counts that statement), and its insert into `jobs_done`
 * fires these: the counts (completed plus the moved jobs, through 0007's count_added_jobs) and the
 * "completed" events as one row per statement (0017's event_row, what `record_changed_events`
 * writes for a completion; without its one-event form, which batches of 500 never take).
 */
const CONVEYOR_SPLIT_TRIGGERS = `
CREATE FUNCTION conveyor.record_moved_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO conveyor.events (at, type, queue, name, job_id, attempt, data, batch_events, batch_newest_at, batch_at,
                               batch_type, batch_queue, batch_name, batch_job_id, batch_attempt, batch_data)
  SELECT r.*
  FROM (SELECT array_agg(n.finished_at) AS ats, array_agg('completed'::text) AS types, array_agg(n.queue) AS queues,
               array_agg(n.name) AS names, array_agg(n.id) AS ids, array_agg(n.attempt) AS attempts,
               array_agg(json_build_object('result', n.result)) AS datas
        FROM moved_jobs AS n) AS a
  CROSS JOIN LATERAL conveyor.event_row(a.ats, a.types, a.queues, a.names, a.ids, a.attempts, a.datas) AS r;
  RETURN NULL;
END $$;
CREATE TRIGGER jobs_done_events AFTER INSERT ON conveyor.jobs_done
  REFERENCING NEW TABLE AS moved_jobs FOR EACH STATEMENT EXECUTE FUNCTION conveyor.record_moved_events();
CREATE TRIGGER jobs_done_counts AFTER INSERT ON conveyor.jobs_done
  REFERENCING NEW TABLE AS added_jobs FOR EACH STATEMENT EXECUTE FUNCTION conveyor.count_added_jobs();`;

/** Conveyor's statement triggers on jobs (migrations 0007, 0010, 0012): the event log, the counts, their fold. */
const STATEMENT_TRIGGERS = [
  "jobs_events_added",
  "jobs_events_changed",
  "jobs_counts_added",
  "jobs_counts_changed",
  "jobs_counts_removed",
  "jobs_counts_then_fold",
];

interface Measured {
  jobsPerSecond: number;
  clientUs: number;
  serverUs: number;
  walBytes: number;
  /** --statements: each statement's execution µs per job in the timed run (its first words as its name). */
  statements: Map<string, number>;
}

interface Step {
  readonly name: string;
  /** Prepares a fresh database and returns the timed processing of every job in it. */
  readonly run: () => Promise<() => Promise<number>>;
}

// Autovacuum off: each step's table is vacuumed before its run, and a vacuum waking during a run
// would land its CPU on whichever step ran then.
const server = await startThrowawayPostgres({
  database: "bench",
  settings: { autovacuum: "off", ...(values.statements === true ? { shared_preload_libraries: "pg_stat_statements", "pg_stat_statements.track": "top" } : {}) },
});
const dbs = new Databases(server.url);
/** The server's own connection: WAL positions, and pg_stat_statements with --statements. */
const admin = new pg.Client({ connectionString: server.url });
await admin.connect();
if (values.statements === true) await admin.query("CREATE EXTENSION pg_stat_statements");
const walPosition = async (): Promise<bigint> => BigInt((await admin.query<{ at: string }>("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn AS at")).rows[0]!.at);

/** A fresh database migrated and filled by Conveyor's own enqueue (`jobs` no-op jobs). */
async function conveyorFilled(): Promise<{ url: string; backend: PostgresBackend }> {
  const url = await dbs.create("contract");
  const backend = new PostgresBackend({ connectionString: url, logger: silentLogger });
  await backend.migrate();
  const queue = new Queue("bench", { backend });
  for (const [start, length] of chunks(jobs, FILL_CHUNK)) await queue.addBulk(noopJobs(start, length));
  return { url, backend };
}

/**
 * Runs `prepare` (outside the timing and the CPU window), then returns the floor's loop
 * (bench/pg-floor.ts) over `sql`, on a pool of its own.
 */
async function leastLoop(url: string, sql: FloorStatements, prepare: string[], finishedCount?: string): Promise<() => Promise<number>> {
  const setup = new pg.Client({ connectionString: url });
  await setup.connect();
  try {
    for (const statement of prepare) await setup.query(statement);
  } finally {
    await setup.end();
  }
  return async () => {
    const pool = new pg.Pool({ connectionString: url, max: CONCURRENCY + 2 });
    try {
      const jobsPerSecond = await rate(jobs, () => processAll(pool, sql, jobs, CONCURRENCY, PREFETCH, { oneCompletionAtATime: true }));
      // A completion that moved nothing would still count its batch: the moves are counted where they land.
      if (finishedCount !== undefined) {
        const moved = Number((await pool.query<{ n: string }>(finishedCount)).rows[0]!.n);
        if (moved !== jobs) throw new Error(`${moved} of ${jobs} jobs reached the finished table (${finishedCount})`);
      }
      return jobsPerSecond;
    } finally {
      await pool.end();
    }
  };
}

/**
 * Conveyor's rows filled as its enqueue stores them (conveyorFilled), then the least loop over
 * `sql` after `prepare` (leastLoop): the steps whose table is made from those rows.
 */
async function filledLeastLoop(sql: FloorStatements, prepare: string[], finishedCount?: string): Promise<() => Promise<number>> {
  const { url, backend } = await conveyorFilled();
  await backend.close();
  return leastLoop(url, sql, prepare, finishedCount);
}

/** Steps 3 and 3b: Conveyor's statement triggers dropped. */
const DROP_STATEMENT_TRIGGERS = STATEMENT_TRIGGERS.map((t) => `DROP TRIGGER ${t} ON conveyor.jobs`);

/**
 * Steps 3, 3b, 4 and 4b: Conveyor's own rows (conveyorFilled) through the least loop, `prepare`
 * run first; a completion updates each row in place, or with `moved` moves it into `jobs_done`
 * (CONVEYOR_SPLIT_TABLE, made before `prepare`), checked after the run.
 */
async function conveyorRowsLoop(prepare: string[], { moved }: { moved: boolean }): Promise<() => Promise<number>> {
  if (!moved) return filledLeastLoop(leastStatements("conveyor.jobs", true), [...prepare, "VACUUM ANALYZE conveyor.jobs"]);
  const { url, backend } = await conveyorFilled();
  await backend.close();
  return leastLoop(
    url,
    await conveyorSplitStatements(url),
    [CONVEYOR_SPLIT_TABLE, ...prepare, "VACUUM ANALYZE conveyor.jobs", "ANALYZE conveyor.jobs_done"],
    "SELECT count(*) AS n FROM conveyor.jobs_done",
  );
}

/**
 * The floor's loop (drainLoop) over Conveyor's own calls: claims of PREFETCH when fewer jobs than
 * handlers are left, every completion of one tick in one `complete`, the next one sent after it
 * returns (as the Worker's settler does).
 */
async function conveyorCallsLoop(backend: PostgresBackend): Promise<void> {
  const request = { queues: ["bench"], names: ["noop"], worker: { id: "w", host: "h", pid: 1 }, limit: PREFETCH, leaseMs: 600_000 };
  await drainLoop<ClaimedJob>(
    {
      claim: () => backend.claim(request),
      complete: (batch) => backend.complete(batch.map((claimed) => ({ lease: claimed.lease, result: null }))),
    },
    jobs,
    CONCURRENCY,
    { oneCompletionAtATime: true },
  );
}

const gw = graphileWorker(dbs);
const allSteps: Step[] = [
  { name: "graphile-worker", run: async () => () => gw.processing(jobs, CONCURRENCY) },
  {
    name: "floor, keeping finished",
    run: async () => {
      const url = await dbs.create("keeping");
      const pool = new pg.Pool({ connectionString: url, max: 2 });
      try {
        await pool.query(KEEPING.schema);
        for (const [start, length] of chunks(jobs, FILL_CHUNK)) {
          await pool.query("INSERT INTO floor_jobs (payload) SELECT unnest($1::jsonb[])", [Array.from({ length }, (_, k) => JSON.stringify({ i: start + k }))]);
        }
      } finally {
        await pool.end();
      }
      return leastLoop(url, KEEPING, ["VACUUM ANALYZE floor_jobs"]);
    },
  },
  {
    name: "narrow table (18 columns, 4 indexes)",
    run: () => filledLeastLoop(leastStatements("narrow_jobs", false), [NARROW_TABLE, "VACUUM ANALYZE narrow_jobs"]),
  },
  {
    name: "finished jobs in a table of their own (narrow)",
    run: () =>
      filledLeastLoop(SPLIT_STATEMENTS, [SPLIT_TABLES, "VACUUM ANALYZE split_jobs", "ANALYZE split_finished"], "SELECT count(*) AS n FROM split_finished"),
  },
  { name: "Conveyor's rows, no statement triggers", run: () => conveyorRowsLoop(DROP_STATEMENT_TRIGGERS, { moved: false }) },
  {
    name: "Conveyor's rows, no statement triggers, finished jobs in a table of their own",
    run: () => conveyorRowsLoop(DROP_STATEMENT_TRIGGERS, { moved: true }),
  },
  { name: "Conveyor's rows", run: () => conveyorRowsLoop([], { moved: false }) },
  {
    name: "Conveyor's rows, finished jobs in a table of their own (triggers on both)",
    run: () => conveyorRowsLoop([CONVEYOR_SPLIT_TRIGGERS], { moved: true }),
  },
  {
    name: "Conveyor's calls, least loop",
    run: async () => {
      const { backend } = await conveyorFilled();
      return async () => {
        try {
          return await rate(jobs, () => conveyorCallsLoop(backend));
        } finally {
          await backend.close();
        }
      };
    },
  },
  {
    name: "Conveyor's Worker",
    run: async () => {
      const { backend } = await conveyorFilled();
      return async () => {
        try {
          return await conveyorProcessFilled(backend, jobs, CONCURRENCY, PREFETCH);
        } finally {
          await backend.close();
        }
      };
    },
  },
  {
    name: "narrow table partitioned: not finished | finished",
    run: () =>
      filledLeastLoop(
        leastStatements("part_jobs", false, { partitioned: true }),
        [PARTITIONED_TABLE, "VACUUM ANALYZE part_jobs_live", "ANALYZE part_jobs_finished"],
        "SELECT count(*) AS n FROM part_jobs_finished",
      ),
  },
  {
    name: "Conveyor's rows, partitioned: not finished | finished (triggers on the root)",
    run: () =>
      filledLeastLoop(
        leastStatements("conveyor.jobs", true, { partitioned: true }),
        // Each partition on its own, as autovacuum does (it never analyzes a partitioned parent).
        [PARTITIONED_CONVEYOR, "VACUUM ANALYZE conveyor.jobs_live", "ANALYZE conveyor.jobs_finished"],
        "SELECT count(*) AS n FROM conveyor.jobs_finished",
      ),
  },
];

/** `--only 1,2`: the steps of those positions (0 is graphile-worker, kept always: the ratios are to it). */
const chosen = values.only === undefined ? null : new Set(values.only.split(",").map(Number));
if (chosen !== null && [...chosen].some((i) => !Number.isInteger(i) || i < 0 || i >= allSteps.length)) {
  console.error(`--only ${values.only}: expected step positions from 0 to ${allSteps.length - 1}, by commas`);
  process.exit(2);
}
const steps = allSteps.filter((_, i) => i === 0 || chosen === null || chosen.has(i));

/** graphile-worker fills its own database inside `processing`: its fill falls inside the CPU window, so its CPU columns are left out. */
const FILLS_INSIDE = new Set(["graphile-worker"]);

async function measure(step: Step): Promise<Measured> {
  const timed = await step.run();
  if (values.statements === true) await admin.query("SELECT pg_stat_statements_reset()");
  const wal0 = await walPosition();
  const client0 = process.cpuUsage();
  const server0 = await serverCpuMs(server.dataDir);
  const jobsPerSecond = await timed();
  const client = process.cpuUsage(client0);
  const server1 = await serverCpuMs(server.dataDir);
  const wal1 = await walPosition();
  const statements = new Map<string, number>();
  if (values.statements === true) {
    const { rows } = await admin.query<{ query: string; ms: number }>(
      `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, total_exec_time AS ms FROM pg_stat_statements
       WHERE calls > 0 AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_current_wal_lsn%' ORDER BY total_exec_time DESC LIMIT 4`,
    );
    // Named by their first 48 characters: statements that share them are counted together.
    for (const row of rows) statements.set(row.query.slice(0, 48), (statements.get(row.query.slice(0, 48)) ?? 0) + (row.ms * 1000) / jobs);
  }
  return {
    jobsPerSecond,
    clientUs: (client.user + client.system) / jobs,
    serverUs: ((server1 - server0) * 1000) / jobs,
    walBytes: Number(wal1 - wal0) / jobs,
    statements,
  };
}

try {
  console.log(`PostgreSQL processing, step by step: ${jobs} no-op jobs, concurrency ${CONCURRENCY}, ${PREFETCH} per claim; ${machineLine()}\n`);
  // One unreported run of each first: the JIT and the server's caches warm for every subject alike.
  for (const step of steps) await measure(step);
  const results = await interleaved(steps, runs, "processing", measure, (m) => `${fmt(m.jobsPerSecond)} jobs/s`);
  const gwRates = results[0]!.map((m) => m.jobsPerSecond);
  console.log("| --only | step | jobs/s | ÷ graphile-worker (paired) | client CPU µs/job | server CPU µs/job | WAL bytes/job |");
  console.log("| ---: | --- | ---: | ---: | ---: | ---: | ---: |");
  steps.forEach((step, i) => {
    const r = results[i]!;
    const column = (pick: (m: Measured) => number) => (FILLS_INSIDE.has(step.name) ? "(fill inside)" : median(r.map(pick)).toFixed(1));
    console.log(
      `| ${allSteps.indexOf(step)} | ${step.name} | ${fmt(median(r.map((m) => m.jobsPerSecond)))} | ${pairedRatio(
        r.map((m) => m.jobsPerSecond),
        gwRates,
      ).toFixed(2)}x | ${column((m) => m.clientUs)} | ${column((m) => m.serverUs)} | ${column((m) => m.walBytes)} |`,
    );
  });
  if (values.statements === true) {
    console.log("\nThe statements' execution µs per job (pg_stat_statements, the four costliest of each timed run; medians):");
    steps.forEach((step, i) => {
      if (FILLS_INSIDE.has(step.name)) return;
      const names = new Set(results[i]!.flatMap((m) => [...m.statements.keys()]));
      for (const name of names) {
        const each = results[i]!.map((m) => m.statements.get(name)).filter((us): us is number => us !== undefined);
        console.log(`  ${step.name}: ${median(each).toFixed(1)} µs  ${name}`);
      }
    });
  }
} finally {
  await admin.end();
  await dbs.dropAll();
  await server.stop();
}
process.exit(0);
