/**
 * PostgreSQL's stats() reads per-(queue, state) counts kept by statement-level triggers
 * (migration 0007, job_counts) instead of counting the jobs table. These tests hold those counts
 * against a count of the table itself after every kind of change (enqueue, claim, complete, fail,
 * retry, dead, cancel, replay, remove, rescue, prune; two workers at once), check that prune folds
 * the deltas, and that the migration counts the jobs stored before it. And JIT stays off on the
 * backend's own connections (at a million stored jobs every claim paid a JIT compilation), and
 * off in the functions that turn plan types off, on any connection (migration 0018).
 */
import pg from "pg";
import { describe, expect, it } from "vitest";
import type { ClaimedJob } from "../../src/backend/contract.js";
import { PostgresBackend } from "../../src/backend/postgres/index.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { Queue, silentLogger, Worker } from "../../src/index.js";
import { postgresTestStores } from "../helpers/postgres-stores.js";
import { migrateUpTo } from "../helpers/postgres-migrations.js";
import { waitFor } from "../helpers/wait-for.js";
import { CLAIM_PARAMETER_TYPES, nodes, statementsOf, type PlanNode } from "../helpers/postgres-plans.js";

const stores = postgresTestStores();
const { url, schemas, admin } = stores;
const backend = (schema: string) => stores.open({ schema });

type Counts = Record<string, Record<string, number>>;

/** What stats() must report, counted from the jobs table itself (a due scheduled job is waiting). */
async function countedFromTable(schema: string): Promise<Counts> {
  const s = pg.escapeIdentifier(schema);
  const { rows } = await admin.query<{ queue: string; state: string; n: string }>(
    `SELECT queue, CASE WHEN state = 'scheduled' AND run_at <= ${s}.now_ms(NULL) THEN 'waiting' ELSE state END AS state, count(*) AS n
     FROM ${s}.jobs GROUP BY 1, 2`,
  );
  const out: Counts = {};
  for (const r of rows) (out[r.queue] ??= {})[r.state] = (out[r.queue]?.[r.state] ?? 0) + Number(r.n);
  return out;
}

async function reported(b: PostgresBackend): Promise<Counts> {
  const out: Counts = {};
  for (const s of await b.stats()) {
    const nonZero = Object.entries(s.counts).filter(([, n]) => n !== 0);
    if (nonZero.length > 0) out[s.queue] = Object.fromEntries(nonZero);
  }
  return out;
}

const job = (queue: string, options: Parameters<typeof buildJobSpec>[0]["options"] = {}) => buildJobSpec({ queue, name: "job", data: null, options });
const worker = { id: "w", host: "h", pid: 1 };
const error = { name: "Error", message: "boom", stack: null };

describe("stats() counts kept by triggers (PostgreSQL)", () => {
  it("match a count of the table after every kind of change, and prune folds them to one row per queue and state", async () => {
    const schema = schemas.create();
    const b = await backend(schema);
    const check = async () => expect(await reported(b)).toEqual(await countedFromTable(schema));

    await b.enqueue([...Array.from({ length: 20 }, () => job("a")), job("a", { delayMs: 3_600_000 }), job("b", { priority: 5 }), job("b", { attempts: 1 })]);
    await b.enqueue([job("a", { jobId: "dup" })]);
    await b.enqueue([job("a", { jobId: "dup" })]); // a duplicate: stores nothing, counts nothing
    await check();
    const claimed = await b.claim({ queues: ["a", "b"], names: ["job"], worker, limit: 10, leaseMs: 30_000 });
    await b.heartbeat(
      claimed.map((c) => c.lease),
      30_000,
    );
    await check();
    await b.complete(claimed.slice(0, 4).map((c) => ({ lease: c.lease, result: null })));
    await b.fail(claimed.slice(4, 6).map((c) => ({ lease: c.lease, error, retryDelayMs: 0 }))); // due retries: waiting
    await b.fail(claimed.slice(6, 7).map((c) => ({ lease: c.lease, error, retryDelayMs: null }))); // dead
    await b.release(claimed.slice(7, 8).map((c) => c.lease));
    await check();
    expect(await b.cancel("dup")).toBe("cancelled");
    const dead = claimed[6]!.job.id;
    expect(await b.replay(dead)).toBe("replayed");
    expect(await b.remove(claimed[0]!.job.id)).toBe("removed");
    await b.promoteDue();
    await check();
    // Short leases, then rescued: back to waiting (attempts left) or dead.
    const short = await b.claim({ queues: ["a", "b"], names: ["job"], worker, limit: 5, leaseMs: 1 });
    expect(short.length).toBeGreaterThan(0);
    await new Promise((resolve) => setTimeout(resolve, 20));
    await b.rescueExpired();
    await check();

    // Two workers at once on one queue, each with its own connections.
    const other = await backend(schema);
    await new Queue("c", { backend: b }).addBulk(Array.from({ length: 400 }, (_, i) => ({ name: "job", data: { i } })));
    let completed = 0;
    const workers: Array<{ close(): Promise<unknown> }> = [];
    for (const store of [b, other]) {
      const w = new Worker({
        backend: store,
        queues: "c",
        concurrency: 4,
        prefetch: 20,
        logger: silentLogger,
        maintenance: false,
        handlers: { job: () => null },
      });
      w.on("job:completed", () => void completed++);
      workers.push(stores.closeAfterTest({ close: () => w.close() }));
    }
    await waitFor(() => completed === 400, { timeoutMs: 60_000 });
    await stores.closeNow(...workers);
    await check();

    const deltas = async () =>
      (
        await admin.query<{ rows: string; pairs: string }>(
          `SELECT count(*) AS rows, count(DISTINCT (queue, state)) AS pairs FROM ${pg.escapeIdentifier(schema)}.job_counts`,
        )
      ).rows[0]!;
    const before = await deltas();
    expect(Number(before.rows)).toBeGreaterThan(Number(before.pairs));
    const pruned = await b.prune({ maxCompletedPerQueue: 100 });
    expect(pruned.jobs).toBeGreaterThan(0);
    await check();
    // The prune's own deletes add one delta row per (queue, state) they touched; a second prune folds those too.
    await b.prune({ maxCompletedPerQueue: 100 });
    const after = await deltas();
    expect(after.rows).toBe(after.pairs);
    await check();
  }, 90_000);

  it("stay bounded without maintenance: every 64th statement on jobs folds them (migration 0010)", async () => {
    const schema = schemas.create();
    const b = await backend(schema);
    const q = new Queue("g", { backend: b });
    const rowsStored = async () => Number((await admin.query<{ n: string }>(`SELECT count(*) AS n FROM ${pg.escapeIdentifier(schema)}.job_counts`)).rows[0]!.n);
    // 1,000 enqueue statements, one delta row each: unfolded, 1,000 rows.
    let most = 0;
    for (let i = 0; i < 1_000; i++) {
      await q.add("job", { i });
      if (i % 50 === 0) most = Math.max(most, await rowsStored());
    }
    most = Math.max(most, await rowsStored());
    // At most 64 statements' deltas plus the folded row: never near the 1,000 written.
    expect(most).toBeLessThanOrEqual(70);
    expect(await reported(b)).toEqual(await countedFromTable(schema));

    // Claims and completions one job at a time (two delta rows per statement), no maintenance.
    let completed = 0;
    const w = new Worker({ backend: b, queues: "g", concurrency: 1, logger: silentLogger, maintenance: false, handlers: { job: () => null } });
    w.on("job:completed", () => void completed++);
    const closing = stores.closeAfterTest({ close: () => w.close() });
    await waitFor(
      async () => {
        most = Math.max(most, await rowsStored());
        return completed === 1_000;
      },
      { timeoutMs: 60_000 },
    );
    await stores.closeNow(closing);
    most = Math.max(most, await rowsStored());
    expect(most).toBeLessThanOrEqual(140);
    expect(await reported(b)).toEqual(await countedFromTable(schema));
  }, 90_000);

  it("the migration counts the jobs stored before it", async () => {
    const schema = schemas.create();
    const quoted = pg.escapeIdentifier(schema);
    // Every migration before job_counts', applied by hand, then jobs stored through the SQL enqueue.
    await migrateUpTo(admin, schema, "postgres_performance");
    for (let i = 0; i < 5; i++) await admin.query(`SELECT ${quoted}.add_job('old', 'job')`);
    await admin.query(`SELECT ${quoted}.add_job('old', 'job', '{}', '{"delayMs": 3600000}')`);
    const b = await backend(schema);
    expect(await reported(b)).toEqual({ old: { waiting: 5, scheduled: 1 } });
    expect(await reported(b)).toEqual(await countedFromTable(schema));
  });
});

describe("claims naming many queues (PostgreSQL)", () => {
  // claim.sql finds the named queues holding waiting jobs by a loose scan of jobs_claim when
  // there are at most as many such queues as names, and probes every named queue otherwise.
  const claimAll = async (b: PostgresBackend, queues: string[], limit: number) =>
    (await b.claim({ queues, names: ["job"], worker, limit, leaseMs: 30_000 })).map((c) => `${c.job.queue}/${c.job.priority}`).sort();

  it("take every runnable job of the named queues, in priority order, whichever way the queues are found", async () => {
    const b = await backend(schemas.create());
    // Busy queues a, b, c, m, z; 200 named queues of which only a and z hold jobs; due retries in e.
    for (const queue of ["a", "b", "c", "m", "z"]) await b.enqueue([job(queue, { priority: 2 }), job(queue, { priority: 1 })]);
    await b.enqueue([job("e", { delayMs: 1 })]);
    await new Promise((resolve) => setTimeout(resolve, 20));
    const named = [...Array.from({ length: 198 }, (_, i) => `n${String(i).padStart(3, "0")}`), "a", "z", "e"];
    // Loose scan: a, b, c, e?, m, n…, z are fewer than the 201 names: the claim takes a's, z's and the due e.
    expect(await claimAll(b, named, 3)).toEqual(["a/1", "e/0", "z/1"]);
    // More busy queues than names (a, b, c, m, z against 2 names): every named queue is probed.
    expect(await claimAll(b, ["c", "a"], 10)).toEqual(["a/2", "c/1", "c/2"]);
    // A paused queue found by the loose scan (b, c, m, z: fewer than the 5 names) is still skipped.
    await b.pause("m");
    expect(await claimAll(b, ["m", "z", "b", "x1", "x2"], 10)).toEqual(["b/1", "b/2", "z/2"]);
    expect(await claimAll(b, named, 10)).toEqual([]);
    // More than 32 busy queues among the names: the scan gives up and every named queue is probed.
    const busy = Array.from({ length: 40 }, (_, i) => `busy${String(i).padStart(2, "0")}`);
    await b.enqueue(busy.map((queue) => job(queue, { priority: 3 })));
    expect(await claimAll(b, [...busy, "zz1", "zz2"], 100)).toEqual(busy.map((queue) => `${queue}/3`));
  });
});

/** The claim statement as the backend renders it (queries/claim.sql; `one`: claim-one.sql, what a claim of one queue runs). */
const claimSql = (b: PostgresBackend, one = false) => statementsOf(b)[one ? "claim-one" : "claim"]!;

describe("claims over many busy queues lock only the winners (PostgreSQL)", () => {
  it("lock the claim's limit of rows, not the limit per queue, and take the best jobs across queues", async () => {
    const schema = schemas.create();
    const b = await backend(schema);
    // 200 queues of 5 jobs; the best 5 (priority 0) are spread over queues q007, q050 (three) and q199.
    const queues = Array.from({ length: 200 }, (_, i) => `q${String(i).padStart(3, "0")}`);
    const best: Record<string, number> = { q007: 1, q050: 3, q199: 1 };
    for (const queue of queues) {
      await b.enqueue(Array.from({ length: 5 }, (_, k) => job(queue, { priority: k < (best[queue] ?? 0) ? 0 : 5 })));
    }
    await admin.query(`VACUUM ANALYZE ${pg.escapeIdentifier(schema)}.jobs`);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query("BEGIN");
      const { rows } = await client.query<{ "QUERY PLAN": Array<{ Plan: PlanNode }> }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${claimSql(b)}`, [
        null,
        queues,
        ["job"],
        5,
        30_000,
        "w",
        "h",
        1,
        false,
        null,
        // $11/$12: the queues' first and last name, byte-wise (the backend computes them once per list).
        [...queues].sort()[0],
        [...queues].sort().at(-1),
      ]);
      await client.query("ROLLBACK");
      const all = nodes(rows[0]!["QUERY PLAN"][0]!.Plan);
      // Rows locked: the 5 winners, where every queue's walk locked its best 5 (1,000 locks for a
      // claim of 5). EXPLAIN gives rows per loop: the sum over LockRows nodes of rows × loops.
      const locked = all.filter((n) => n["Node Type"] === "LockRows").reduce((sum, n) => sum + n["Actual Rows"]! * n["Actual Loops"]!, 0);
      expect(locked).toBe(5);
    } finally {
      await client.end();
    }
    const claimed = await b.claim({ queues, names: ["job"], worker, limit: 5, leaseMs: 30_000 });
    expect(claimed.map((c) => `${c.job.queue}/${c.job.priority}`).sort()).toEqual(["q007/0", "q050/0", "q050/0", "q050/0", "q199/0"]);
  });

  it("keep the merged order when another claimer holds one of the winners", async () => {
    const schema = schemas.create();
    const b = await backend(schema);
    const [a1] = await b.enqueue([job("a", { priority: 0 })]);
    await b.enqueue([job("a", { priority: 1 }), job("a", { priority: 9 }), job("b", { priority: 2 }), job("b", { priority: 8 })]);
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    try {
      // Another claim in flight holds a's best job: of the winners a/0 and a/1 only a/1 can be
      // locked, and the next best claimable job is b's, not a's next.
      await holder.query("BEGIN");
      await holder.query(`SELECT 1 FROM ${pg.escapeIdentifier(schema)}.jobs WHERE id = $1 FOR UPDATE`, [a1!.id]);
      const claimed = await b.claim({ queues: ["a", "b"], names: ["job"], worker, limit: 2, leaseMs: 30_000 });
      expect(claimed.map((c) => `${c.job.queue}/${c.job.priority}`).sort()).toEqual(["a/1", "b/2"]);
    } finally {
      await holder.query("ROLLBACK");
      await holder.end();
    }
  });
});

describe("claims beside a large delayed set (PostgreSQL)", () => {
  /**
   * Copies job `id` `n` times with fresh ids (seq is an identity column, left to its default),
   * each copy's run_at a millisecond after the last, as a stream of enqueues would leave them.
   */
  async function copies(schema: string, id: string, n: number): Promise<void> {
    const { rows } = await admin.query<{ c: string }>(
      "SELECT column_name AS c FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'jobs' AND column_name NOT IN ('id', 'seq') ORDER BY ordinal_position",
      [schema],
    );
    const columns = rows.map((r) => pg.escapeIdentifier(r.c));
    const s = pg.escapeIdentifier(schema);
    await admin.query(
      `INSERT INTO ${s}.jobs (id, ${columns.join(", ")}) SELECT j.id || '-' || g, ${columns.map((c) => (c === '"run_at"' ? "j.run_at + g / 5000" : `j.${c}`)).join(", ")} FROM ${s}.jobs j, generate_series(1, $2::int) g WHERE j.id = $1`,
      [id, n],
    );
  }

  // At 200,000 delayed jobs the due walk was a sequential scan of every scheduled row (210 ms per
  // claim, 1,039 jobs/s; docs/performance-growth.md): `run_at <= now` was a join filter.
  it("walk only the due part of jobs_scheduled in the plan production runs (no scan of the delayed rows)", async () => {
    const schema = schemas.create();
    const b = await backend(schema);
    const [delayed, waiting] = await b.enqueue([job("q", { delayMs: 86_400_000 }), job("q", { priority: 5 })]);
    await copies(schema, delayed!.id, 100_000);
    await copies(schema, waiting!.id, 10_000);
    await b.enqueue([job("q", { priority: 1 }), job("q", { priority: 2 }), job("q", { delayMs: 1 })]);
    // Current statistics on every table the claim reads, as autovacuum keeps them.
    for (const table of ["jobs", "queues", "flow_queues"]) await admin.query(`VACUUM ANALYZE ${pg.escapeIdentifier(schema)}.${table}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
    // A connection of its own: the session settings below must not leak into the admin pool.
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query("SET jit = off");
      // claim.sql's $1..$12: now, queues, names, limit, lease_ms, worker id, host, pid, flow_checked, starts_at_once, first and last queue.
      await client.query(`PREPARE claim_probe(${CLAIM_PARAMETER_TYPES}) AS ${claimSql(b)}`);
      await client.query(`PREPARE claim_one_probe(${CLAIM_PARAMETER_TYPES}) AS ${claimSql(b, true)}`);
      // The generic plan is the one a pooled connection keeps after five executions; the custom
      // plan the first five get. Each must find the one due job without reading the 100,000 future
      // ones, through claim.sql (a claim of several queues) and claim-one.sql (of one).
      for (const [statement, mode] of ["claim_probe", "claim_one_probe"].flatMap((st) =>
        ["force_generic_plan", "force_custom_plan"].map((m) => [st, m] as const),
      )) {
        await client.query(`SET plan_cache_mode = ${mode}`);
        await client.query("BEGIN");
        const { rows } = await client.query<{ "QUERY PLAN": Array<{ Plan: PlanNode }> }>(
          `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE ${statement}(NULL, '{q}', '{job}', 10, 30000, 'w', 'h', 1, false, NULL, 'q', 'q')`,
        );
        await client.query("ROLLBACK");
        const all = nodes(rows[0]!["QUERY PLAN"][0]!.Plan);
        const seqScans = all.filter((n) => n["Node Type"] === "Seq Scan" && n["Relation Name"] === "jobs");
        const label = `${statement} ${mode}`;
        expect(seqScans, label).toEqual([]);
        // The walk of jobs_scheduled (a plain or a bitmap index scan) is bounded by now and reads the one due row.
        const scheduledWalk = all.find((n) => n["Index Name"] === "jobs_scheduled");
        expect(scheduledWalk?.["Index Cond"], label).toMatch(/run_at <= /);
        expect(scheduledWalk!["Actual Rows"], label).toBe(1);
        expect(all.find((n) => n["Node Type"] === "ModifyTable")!["Actual Rows"], label).toBe(10);
      }
    } finally {
      await client.end();
    }
    // And the claim takes the due job and the best waiting ones, in priority order, none of the future ones.
    const claimed = await b.claim({ queues: ["q"], names: ["job"], worker, limit: 10, leaseMs: 30_000 });
    expect(claimed.map((c) => c.job.priority)).toEqual([0, 1, 2, 5, 5, 5, 5, 5, 5, 5]);
    expect(claimed.every((c) => c.job.runAt <= Date.now())).toBe(true);
  });
});

describe("claims beside a deep backlog (PostgreSQL)", () => {
  // The look-then-lock part of the claim (`won`) compared the state as a literal, and the planner
  // ANDed a bitmap of the whole jobs_waiting_seq index (every waiting job) with the winners' ids:
  // 10,865 index entries read per claim of one queue at 20,000 jobs, even with no winner at all.
  it("read about the jobs they take, not the waiting set, in both plans, over one queue and over several", async () => {
    const schema = schemas.create();
    const b = await backend(schema);
    const s = pg.escapeIdentifier(schema);
    await b.enqueue([job("q"), job("r")]);
    // 20,000 more waiting jobs in q (seq and run_at left to their defaults), and 2,000 in r.
    const { rows: columns } = await admin.query<{ c: string }>(
      "SELECT column_name AS c FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'jobs' AND column_name NOT IN ('id', 'seq') ORDER BY ordinal_position",
      [schema],
    );
    const list = columns.map((r) => pg.escapeIdentifier(r.c)).join(", ");
    for (const [queue, n] of [
      ["q", 20_000],
      ["r", 2_000],
    ] as const) {
      await admin.query(
        `INSERT INTO ${s}.jobs (id, ${list}) SELECT j.id || '-' || g, ${columns.map((r) => `j.${pg.escapeIdentifier(r.c)}`).join(", ")} FROM ${s}.jobs j, generate_series(1, $2::int) g WHERE j.queue = $1`,
        [queue, n],
      );
    }
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query("SET jit = off");
      await client.query(`PREPARE claim_probe(${CLAIM_PARAMETER_TYPES}) AS ${claimSql(b)}`);
      await client.query(`PREPARE claim_one_probe(${CLAIM_PARAMETER_TYPES}) AS ${claimSql(b, true)}`);
      // First as a freshly filled queue is (autovacuum has not analysed the table yet: the case
      // that went wrong), then with current statistics. One queue through claim.sql and through
      // claim-one.sql (what the backend runs for it), two through claim.sql.
      for (const [queues, analysed, statement] of [
        ["{q}", false, "claim_probe"],
        ["{q}", false, "claim_one_probe"],
        ["{q,r}", false, "claim_probe"],
        ["{q}", true, "claim_probe"],
        ["{q}", true, "claim_one_probe"],
        ["{q,r}", true, "claim_probe"],
      ] as const) {
        if (analysed) for (const table of ["jobs", "queues", "flow_queues"]) await admin.query(`VACUUM ANALYZE ${s}.${table}`);
        for (const mode of ["force_generic_plan", "force_custom_plan"]) {
          await client.query(`SET plan_cache_mode = ${mode}`);
          await client.query("BEGIN");
          const { rows } = await client.query<{ "QUERY PLAN": Array<{ Plan: PlanNode }> }>(
            `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE ${statement}(NULL, '${queues}', '{job}', 10, 30000, 'w', 'h', 1, false, NULL, 'q', '${queues === "{q}" ? "q" : "r"}')`,
          );
          await client.query("ROLLBACK");
          const all = nodes(rows[0]!["QUERY PLAN"][0]!.Plan);
          expect(all.find((n) => n["Node Type"] === "ModifyTable")!["Actual Rows"], `${statement} ${queues} ${mode} ${analysed}`).toBe(10);
          // Every scan of jobs or of one of its indexes yields a few rows per loop: the claim's
          // 10 per queue walked, and the loose scan's one per queue. None reads the backlog.
          const scans = all.filter((n) => n["Index Name"] !== undefined || n["Relation Name"] === "jobs");
          const widest = Math.max(...scans.map((n) => n["Actual Rows"] ?? 0));
          expect(
            widest,
            `${statement} ${queues} ${mode} ${analysed ? "analysed" : "not analysed"}: ${JSON.stringify(scans.map((n) => [n["Node Type"], n["Index Name"], n["Actual Rows"]]))}`,
          ).toBeLessThanOrEqual(20);
        }
      }
    } finally {
      await client.end();
    }
  });
});

describe("the queues a reconnected listener looks at (PostgreSQL)", () => {
  // runnable-queues.sql runs when the LISTEN connection (re)connects. Its EXISTS looks read every
  // waiting job of a queue through a bitmap on a table not analysed yet (20,000 at 20,000 waiting).
  it("stop at the first job of each queue, whatever the backlog, in both plans", async () => {
    const schema = schemas.create();
    const b = await backend(schema);
    const s = pg.escapeIdentifier(schema);
    await b.enqueue([job("q"), job("r", { delayMs: 1 }), job("idle", { delayMs: 86_400_000 })]);
    await b.enqueue(Array.from({ length: 20_000 }, () => job("q")));
    await new Promise((resolve) => setTimeout(resolve, 20));
    const sql = statementsOf(b)["runnable-queues"]!;
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query("SET jit = off");
      await client.query(`PREPARE runnable_probe(bigint) AS ${sql}`);
      for (const analysed of [false, true]) {
        if (analysed) await admin.query(`VACUUM ANALYZE ${s}.jobs`);
        for (const mode of ["force_generic_plan", "force_custom_plan"]) {
          await client.query(`SET plan_cache_mode = ${mode}`);
          const { rows } = await client.query<{ "QUERY PLAN": Array<{ Plan: PlanNode }> }>("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE runnable_probe(NULL)");
          const scans = nodes(rows[0]!["QUERY PLAN"][0]!.Plan).filter((n) => n["Index Name"] !== undefined || n["Relation Name"] === "jobs");
          const widest = Math.max(...scans.map((n) => n["Actual Rows"] ?? 0));
          expect(
            widest,
            `${mode} ${analysed ? "analysed" : "not analysed"}: ${JSON.stringify(scans.map((n) => [n["Node Type"], n["Index Name"], n["Actual Rows"]]))}`,
          ).toBeLessThanOrEqual(2);
        }
      }
      // And the answer: q (waiting) and r (due), not idle (its job is a day away).
      const { rows } = await client.query<{ name: string }>("EXECUTE runnable_probe(NULL)");
      expect(rows.map((r) => r.name).sort()).toEqual(["q", "r"]);
    } finally {
      await client.end();
    }
  });
});

describe("settling a batch (PostgreSQL)", () => {
  /**
   * EXPLAIN (ANALYZE, BUFFERS) of complete.sql and of fail.sql burying (no retry delay), each
   * settling a batch in a transaction rolled back after, under a plan_cache_mode; both statements
   * prepared once on a connection of their own, closed after the test.
   */
  async function settlePlans(b: PostgresBackend) {
    const sql = statementsOf(b);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    stores.closeAfterTest({ close: () => client.end() });
    await client.query("SET jit = off");
    await client.query(`PREPARE complete_probe(bigint, text[], bigint[], text[]) AS ${sql.complete}`);
    await client.query(`PREPARE fail_probe(bigint, text[], bigint[], text[], bigint[]) AS ${sql.fail}`);
    return async (batch: readonly ClaimedJob[], mode: "force_generic_plan" | "force_custom_plan") => {
      await client.query(`SET plan_cache_mode = ${mode}`);
      const n = batch.length;
      // EXPLAIN EXECUTE takes no bind parameters: the arrays as literals (ids are [0-9a-z]).
      const arrays = `'{${batch.map((c) => c.lease.jobId).join(",")}}'::text[], '{${batch.map((c) => c.lease.token).join(",")}}'::bigint[]`;
      const plans: Array<{ label: string; all: PlanNode[]; deletion: PlanNode }> = [];
      for (const [statement, rest] of [
        ["complete_probe", `array_fill('null'::text, ARRAY[${n}])`],
        ["fail_probe", `array_fill('{"message":"x"}'::text, ARRAY[${n}]), array_fill(NULL::bigint, ARRAY[${n}])`],
      ] as const) {
        await client.query("BEGIN");
        const { rows } = await client.query<{ "QUERY PLAN": Array<{ Plan: PlanNode }> }>(
          `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE ${statement}(NULL, ${arrays}, ${rest})`,
        );
        await client.query("ROLLBACK");
        const all = nodes(rows[0]!["QUERY PLAN"][0]!.Plan);
        const deletion = all.find((node) => node["Node Type"] === "ModifyTable" && node.Operation === "Delete")!;
        plans.push({ label: `${statement} ${mode}`, all, deletion });
      }
      return plans;
    };
  }
  const buffers = (node: PlanNode) => node["Shared Hit Blocks"]! + (node["Shared Read Blocks"] ?? 0);

  // complete.sql and fail.sql delete the jobs kept for 0 ms instead of updating them. Looking for
  // those among the batch's ids cost a jobs_pkey probe per job (2,407 buffers for 510 jobs), or a
  // sequential scan of the table in a custom plan, to find none; the partial indexes of migration
  // removal_on_settle hold only such running jobs, so the look reads one page of an empty index.
  it("find the jobs to delete without reading every job of the batch, in both plans", async () => {
    const b = await backend(schemas.create());
    await b.enqueue(Array.from({ length: 2_000 }, () => job("q")));
    const explain = await settlePlans(b);
    for (const mode of ["force_generic_plan", "force_custom_plan"] as const) {
      const claimed = await b.claim({ queues: ["q"], names: ["job"], worker, limit: 500, leaseMs: 60_000 });
      expect(claimed).toHaveLength(500);
      for (const { label, all, deletion } of await explain(claimed, mode)) {
        // complete has one UPDATE; fail two (retried, buried): every job is settled by one of them.
        const settled = all.filter((n) => n["Node Type"] === "ModifyTable" && n.Operation === "Update").reduce((sum, n) => sum + n["Actual Rows"]!, 0);
        expect(settled, label).toBe(500);
        expect(deletion["Actual Rows"], label).toBe(0);
        expect(buffers(deletion), label).toBeLessThanOrEqual(5);
      }
      await b.complete(claimed.map((c) => ({ lease: c.lease, result: null })));
    }
  });

  // With removeOnComplete / removeOnFail those partial indexes hold every running job kept for
  // 0 ms: a worker's prefetched jobs, and every job whose completion is still on its way. The
  // generic plan (estimated from an index seen empty: 1 row) walked the whole index and compared
  // each entry with each job of the batch: 12,860 × 510 comparisons and 1.8 s per completion in a
  // bench of 20,000 such jobs, where processing fell to 645 jobs/s, and the slower the completions
  // the more jobs ran unacknowledged and the longer the walk. Checked on a table never analyzed and
  // on one analyzed while every job waited (statistics that say no job is active).
  for (const analyzed of [false, true]) {
    it(`delete the jobs kept for 0 ms by a look per job of the batch, however many such jobs run, in both plans${analyzed ? ", statistics taken before the claim" : ""}`, async () => {
      const schema = schemas.create();
      const b = await backend(schema);
      await b.enqueue(Array.from({ length: 2_000 }, () => job("q", { removeOnComplete: true, removeOnFail: true })));
      if (analyzed) await admin.query(`ANALYZE ${pg.escapeIdentifier(schema)}.jobs`);
      const claimed = await b.claim({ queues: ["q"], names: ["job"], worker, limit: 2_000, leaseMs: 60_000 });
      expect(claimed).toHaveLength(2_000);
      const explain = await settlePlans(b);
      for (const mode of ["force_generic_plan", "force_custom_plan"] as const) {
        for (const { label, all, deletion } of await explain(claimed.slice(0, 500), mode)) {
          expect(deletion["Actual Rows"], label).toBe(500);
          // Over the whole statement (the deleted jobs' events included), not only the delete.
          const compared = all.reduce((sum, n) => sum + (n["Rows Removed by Join Filter"] ?? 0), 0);
          expect(compared, `${label}: rows compared and thrown away`).toBeLessThanOrEqual(500);
          // The probe that finds the job, the delete's own look-up and its heap page: about 11 pages per job on this table.
          expect(buffers(deletion), label).toBeLessThanOrEqual(16 * 500);
        }
      }
    });
  }
});

/** Whether the test server can JIT-compile at all (built with LLVM, as Debian's PostgreSQL is): without it nothing can compile to be caught. */
const jitAvailable = (await admin.query<{ available: boolean }>("SELECT pg_jit_available() AS available")).rows[0]!.available;
const itCompiling = jitAvailable ? it : (title: string, body: () => Promise<void>) => it.skip(`${title} [skipped: this PostgreSQL cannot JIT-compile]`, body);

describe("JIT (PostgreSQL)", () => {
  itCompiling(
    "a caller's pool that keeps JIT on compiles neither the event trigger's statement nor stats(), nor any plan of a claim, completion, failure, list or flow function (plan types turned off, or tables never analyzed, cost past every JIT threshold)",
    async () => {
      // auto_explain logs every plan this pool's sessions run, the triggers' statements included,
      // and sends it to the client as a notice: a plan that was JIT-compiled has a "JIT:" section.
      const pool = new pg.Pool({
        connectionString: url,
        max: 3,
        options:
          "-c session_preload_libraries=auto_explain -c auto_explain.log_min_duration=0 -c auto_explain.log_nested_statements=on -c client_min_messages=log",
      });
      stores.closeAfterTest({ close: () => pool.end() });
      const plans: string[] = [];
      pool.on("connect", (client) => client.on("notice", (notice) => plans.push(notice.message ?? "")));
      expect((await pool.query<{ jit: string }>("SELECT current_setting('jit') AS jit")).rows[0]!.jit).toBe("on");

      const warnings: string[] = [];
      const b = await stores.open({ connectionString: undefined, pool, logger: { ...silentLogger, warn: (_fields, message) => warnings.push(message) } });
      await b.enqueue(Array.from({ length: 300 }, () => job("a", { attempts: 2 })));
      const claimed = await b.claim({ queues: ["a"], names: ["job"], worker, limit: 300, leaseMs: 30_000 });
      expect(claimed).toHaveLength(300);
      await b.complete(claimed.slice(0, 200).map((c) => ({ lease: c.lease, result: null })));
      await b.fail(claimed.slice(200).map((c) => ({ lease: c.lease, error, retryDelayMs: 0 })));
      const s = pg.escapeIdentifier(b.schema);
      await pool.query(`SELECT * FROM ${s}.flow_running('a')`);
      await pool.query(`SELECT * FROM ${s}.flow_windows(ARRAY['a'], ARRAY[0::bigint])`);
      await pool.query(`SELECT * FROM ${s}.flow_forget(ARRAY['a'], ARRAY[0::bigint])`);
      // The reads planned with their values on each call (their estimates, with tables never analyzed, passed the JIT threshold).
      expect((await b.stats()).find((q) => q.queue === "a")?.counts).toMatchObject({ completed: 200, waiting: 100 });
      expect(await b.stats("a")).toHaveLength(1);
      expect(await b.list({ queue: "a", state: "completed" }, { limit: 10 })).toHaveLength(10);
      expect(await b.list({ queue: "a", state: "waiting" }, { limit: 10 })).toHaveLength(10);
      // The caller's session keeps its own setting (and is told once, below, what Conveyor cannot turn off for it).
      expect((await pool.query<{ jit: string }>("SELECT current_setting('jit') AS jit")).rows[0]!.jit).toBe("on");

      // The trigger's statement of a many-job UPDATE (the event batch) was planned and logged.
      expect(plans.filter((plan) => plan.includes("batch_events") && plan.includes("changed_after")).length).toBeGreaterThanOrEqual(2);
      // Each flow function's own statement, by its text.
      for (const text of ["grouping(j.name)", "coalesce(sum(s.n), 0)", "s.at <= cutoffs[i] RETURNING"])
        expect(plans.filter((plan) => plan.includes(text)).length, text).toBeGreaterThanOrEqual(1);
      expect(plans.filter((plan) => plan.includes("-- stats:")).length).toBeGreaterThanOrEqual(2);
      // Each compiled plan named by its statement's first line.
      expect(plans.filter((plan) => plan.includes("JIT:")).map((plan) => /Query Text: (.*)/.exec(plan)?.[1] ?? plan.slice(0, 120))).toEqual([]);
      expect(warnings.filter((w) => w.includes("compiles with JIT"))).toHaveLength(1);
    },
  );

  it("is off on every connection of the backend's own pool, whatever the server's default", async () => {
    const b = await backend(schemas.create());
    expect((await admin.query<{ jit: string }>("SHOW jit")).rows[0]!.jit).toBe("on");
    const pool = (b as unknown as { pool: pg.Pool }).pool;
    const clients = await Promise.all([pool.connect(), pool.connect(), pool.connect()]);
    try {
      for (const client of clients) expect((await client.query<{ jit: string }>("SHOW jit")).rows[0]!.jit).toBe("off");
    } finally {
      for (const client of clients) client.release();
    }
  });
});
