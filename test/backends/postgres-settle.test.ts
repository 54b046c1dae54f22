/**
 * PostgreSQL only: the plain hot path's settle and claim statements (docs/performance-postgres.md,
 * "Sixth pass"): the events claim, complete, complete-and-claim and fail leave (read from the
 * `event_log` view directly, in (xid, seq, i) order: every statement here has committed, so no wait
 * for visibility is needed), the claim over several queues when a winner is held elsewhere, and
 * the one index of finished jobs (migration pg_settle_finished_index) that prune by count and the
 * finished window walk.
 */
import pg from "pg";
import { describe, expect, it } from "vitest";
import { PostgresBackend } from "../../src/backend/postgres/backend.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { Queue } from "../../src/index.js";
import { postgresTestStores } from "../helpers/postgres-stores.js";
import { migrateUpTo } from "../helpers/postgres-migrations.js";
import { nodes, type PlanNode } from "../helpers/postgres-plans.js";

const stores = postgresTestStores({ poolSize: 2 });
const { url, schemas, admin } = stores;
/** A migrated backend on a fresh schema, or on `schema`. */
const backend = (schema?: string) => stores.open({ schema });

const job = (jobId: string, options: Parameters<typeof buildJobSpec>[0]["options"] = {}) =>
  buildJobSpec({ queue: "q", name: "job", data: null, options: { jobId, ...options } });
const worker = { id: "w1", host: "h", pid: 1 };
const error = { name: "Error", message: "boom", stack: null };
const claimRequest = (limit: number, queues: readonly string[] = ["q"]) => ({ queues: [...queues], names: ["job"], worker, limit, leaseMs: 30_000 });

interface EventRow {
  job_id: string;
  type: string;
  attempt: number;
  at: string;
  data: unknown;
}

async function events(b: PostgresBackend): Promise<EventRow[]> {
  const s = pg.escapeIdentifier(b.schema);
  return (await admin.query<EventRow>(`SELECT job_id, type, attempt, at, data FROM ${s}.event_log ORDER BY xid, seq, i`)).rows;
}

const brief = (rows: EventRow[], jobId: string) => rows.filter((e) => e.job_id === jobId).map((e) => `${e.type}:${e.attempt}`);

interface TimesRow {
  started_at: string;
  finished_at: string | null;
  run_at: string;
}

async function row(b: PostgresBackend, id: string): Promise<TimesRow> {
  const s = pg.escapeIdentifier(b.schema);
  return (await admin.query<TimesRow>(`SELECT started_at, finished_at, run_at FROM ${s}.jobs WHERE id = $1`, [id])).rows[0]!;
}

describe("PostgreSQL: the events of the hot statements", () => {
  // A worker of one queue claims through claim-one.sql (and complete-and-claim over it), one of
  // several through claim.sql: both pairs, the second queue empty.
  for (const [queues, statements] of [
    [["q"], "claim-one.sql, complete-and-claim over it"],
    [["q", "other"], "claim.sql, complete-and-claim.sql"],
  ] as const) {
    it(`records each change of claim, complete, complete-and-claim and fail exactly once, with the trigger's times and details (${statements})`, async () => {
      const b = await backend();
      await b.enqueue(["j1", "j2", "j3", "j4", "j5", "j6"].map((id) => job(id, { attempts: id === "j4" ? 1 : 2 })));
      const first = await b.claim(claimRequest(4, queues)); // j1..j4
      expect(first.map((c) => c.job.id).sort()).toEqual(["j1", "j2", "j3", "j4"]);
      const lease = (id: string) => first.find((c) => c.job.id === id)!.lease;
      expect(await b.complete([{ lease: lease("j1"), result: { n: 1 } }])).toEqual(["applied"]); // complete.sql
      const both = await b.completeAndClaim([{ lease: lease("j2"), result: { n: 2 } }], claimRequest(2, queues));
      expect(both.settled).toEqual(["applied"]);
      expect(both.claimed.map((c) => c.job.id).sort()).toEqual(["j5", "j6"]);
      // fail.sql: j3 is retried at once (waiting again), j4 has no attempt left (dead).
      await b.fail([
        { lease: lease("j3"), error, retryDelayMs: 0 },
        { lease: lease("j4"), error, retryDelayMs: null },
      ]);

      const all = await events(b);
      expect(brief(all, "j1")).toEqual(["added:0", "active:1", "completed:1"]);
      expect(brief(all, "j2")).toEqual(["added:0", "active:1", "completed:1"]);
      expect(brief(all, "j3")).toEqual(["added:0", "active:1", "retrying:1"]);
      expect(brief(all, "j4")).toEqual(["added:0", "active:1", "dead:1"]);
      expect(brief(all, "j5")).toEqual(["added:0", "active:1"]);
      expect(brief(all, "j6")).toEqual(["added:0", "active:1"]);
      expect(all).toHaveLength(16);

      // The times and details record_changed_events (0007) gives: a start at started_at with the
      // worker, a completion at finished_at with the result, a retry at the failure with the error
      // and the next run time, a death at finished_at with the error.
      const of = (id: string, type: string) => all.find((e) => e.job_id === id && e.type === type)!;
      for (const id of ["j1", "j2", "j3", "j4", "j5", "j6"]) {
        expect(of(id, "active")).toMatchObject({ at: (await row(b, id)).started_at, data: { workerId: "w1" } });
      }
      expect(of("j1", "completed")).toMatchObject({ at: (await row(b, "j1")).finished_at, data: { result: { n: 1 } } });
      expect(of("j2", "completed")).toMatchObject({ at: (await row(b, "j2")).finished_at, data: { result: { n: 2 } } });
      const j3 = await row(b, "j3");
      expect(of("j3", "retrying")).toMatchObject({ at: j3.run_at, data: { error, runAt: Number(j3.run_at) } });
      expect(of("j4", "dead")).toMatchObject({ at: (await row(b, "j4")).finished_at, data: { error } });
    });
  }

  it("records the flow parent a child's completion or death releases (a nested change the trigger writes)", async () => {
    const b = await backend();
    const q = new Queue("q", { backend: b });
    await q.addFlow({ name: "parent", options: { jobId: "p1" }, children: [{ name: "job", options: { jobId: "c1" } }] });
    await q.addFlow({ name: "parent", options: { jobId: "p2" }, children: [{ name: "job", options: { jobId: "c2" } }] });
    // The default policy, "fail": a child that dies fails its parent.
    await q.addFlow({ name: "parent", options: { jobId: "p3" }, children: [{ name: "job", options: { jobId: "c3", attempts: 1 } }] });
    const claimed = await b.claim(claimRequest(3));
    const lease = (id: string) => claimed.find((c) => c.job.id === id)!.lease;
    await b.complete([{ lease: lease("c1"), result: null }]);
    await b.completeAndClaim([{ lease: lease("c2"), result: null }], { ...claimRequest(1), names: ["nothing"] });
    await b.fail([{ lease: lease("c3"), error, retryDelayMs: null }]);

    const all = await events(b);
    // A parent is added, linked to its children ('waiting' into waiting-children, by the flow's
    // own statement), then released ('waiting') or failed ('dead') inside its child's settle.
    expect(brief(all, "c1")).toEqual(["added:0", "active:1", "completed:1"]);
    expect(brief(all, "p1")).toEqual(["added:0", "waiting:0", "waiting:0"]);
    expect(brief(all, "c2")).toEqual(["added:0", "active:1", "completed:1"]);
    expect(brief(all, "p2")).toEqual(["added:0", "waiting:0", "waiting:0"]);
    expect(brief(all, "c3")).toEqual(["added:0", "active:1", "dead:1"]);
    expect(brief(all, "p3")).toEqual(["added:0", "waiting:0", "dead:0"]);
    expect(all.find((e) => e.job_id === "p3" && e.type === "dead")?.data).toMatchObject({ error: { name: "ChildFailedError" } });
  });
});

describe("PostgreSQL: the claim over several queues when another transaction holds one of its winners", () => {
  // claim.sql looks at each open queue's best jobs, locks the best `lim` of them all (`won`), and
  // when one is held elsewhere walks every queue again with locks (`walked`), which re-takes the
  // winners it locked already. `waiting` adds from `won` only those `walked` lacks: a winner
  // counted twice would take a place of the `lim` and the claim would come back short.
  it("takes the best jobs it can lock, each once, as many as asked", async () => {
    const b = await backend();
    await b.enqueue([
      ...[1, 3, 5].map((priority) => buildJobSpec({ queue: "a", name: "job", data: null, options: { jobId: `a${priority}`, priority } })),
      ...[2, 4, 6].map((priority) => buildJobSpec({ queue: "b", name: "job", data: null, options: { jobId: `b${priority}`, priority } })),
    ]);
    const holder = await admin.connect();
    try {
      await holder.query("BEGIN");
      await holder.query(`SELECT 1 FROM ${pg.escapeIdentifier(b.schema)}.jobs WHERE id = 'a3' FOR UPDATE`);
      const claimed = await b.claim({ ...claimRequest(4), queues: ["a", "b"] });
      expect(claimed.map((c) => c.job.id).sort()).toEqual(["a1", "a5", "b2", "b4"]);
    } finally {
      await holder.query("ROLLBACK");
      holder.release();
    }
    const all = await events(b);
    expect(
      all
        .filter((e) => e.type === "active")
        .map((e) => e.job_id)
        .sort(),
    ).toEqual(["a1", "a5", "b2", "b4"]);
  });
});

/**
 * Finishes every job of queue "q" by hand, in a spread that exercises prune by count: by seq k,
 * every 10th cancelled, the next dead, the next completed and kept forever (no expiry), the rest
 * completed; finish times out of insertion order and tied three ways (the order is finish time,
 * then seq).
 */
async function finishAll(schema: string): Promise<void> {
  const s = pg.escapeIdentifier(schema);
  await admin.query(
    `UPDATE ${s}.jobs AS j
     SET state = CASE WHEN o.k % 10 = 0 THEN 'cancelled' WHEN o.k % 10 = 1 THEN 'dead' ELSE 'completed' END,
         finished_at = 1000000 + (o.k * 37) % 500,
         expires_at = CASE WHEN o.k % 10 = 2 THEN NULL ELSE 9000000000000 END
     FROM (SELECT id, row_number() OVER (ORDER BY seq) AS k FROM ${s}.jobs WHERE queue = 'q') AS o
     WHERE j.id = o.id`,
  );
}

/** The ids prune by count must keep, computed from the table with a window function (the oracle). */
async function keptByCount(schema: string, maxDone: number, maxDead: number): Promise<string[]> {
  const s = pg.escapeIdentifier(schema);
  const { rows } = await admin.query<{ id: string }>(
    `SELECT id FROM (
       SELECT id, expires_at, state,
              row_number() OVER (PARTITION BY queue, state = 'dead' ORDER BY finished_at DESC, seq DESC) AS rank
       FROM ${s}.jobs WHERE expires_at IS NOT NULL
     ) AS r
     WHERE rank <= CASE WHEN state = 'dead' THEN $2::int ELSE $1::int END
     UNION ALL
     SELECT id FROM ${s}.jobs WHERE expires_at IS NULL
     ORDER BY 1`,
    [maxDone, maxDead],
  );
  return rows.map((r) => r.id);
}

const allIds = async (schema: string) =>
  (await admin.query<{ id: string }>(`SELECT id FROM ${pg.escapeIdentifier(schema)}.jobs ORDER BY 1`)).rows.map((r) => r.id);

describe("PostgreSQL: one index of finished jobs (jobs_finished)", () => {
  it("prune by count keeps the newest of each bucket, walking jobs_finished in order in both plans, never sorting a queue's finished jobs", async () => {
    const b = await backend();
    await b.enqueue(Array.from({ length: 1_500 }, (_, k) => job(`f${k}`)));
    // A snapshot older than the finishing UPDATE, held until the plans are read: VACUUM can then
    // neither remove the old row versions nor mark the pages all-visible, as when the whole suite
    // runs beside this file. The plans must hold in that state too (they did not, without it, once).
    const oldSnapshot = new pg.Client({ connectionString: url });
    await oldSnapshot.connect();
    await oldSnapshot.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
    await oldSnapshot.query(`SELECT count(*) FROM ${pg.escapeIdentifier(b.schema)}.jobs`);
    await finishAll(b.schema);
    await admin.query(`VACUUM ANALYZE ${pg.escapeIdentifier(b.schema)}.jobs`);
    const expected = await keptByCount(b.schema, 50, 20);
    // 150 kept forever, 50 completed or cancelled, 20 dead.
    expect(expected).toHaveLength(220);

    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query("SET jit = off");
      const sql = (b as unknown as { sql: Record<string, string> }).sql;
      await client.query(`PREPARE prune_probe(bigint, int, int, int) AS ${sql.prune}`);
      await client.query(`PREPARE window_probe(text, bigint, bigint, int) AS ${sql["finished-window"]}`);
      for (const mode of ["force_generic_plan", "force_custom_plan"]) {
        await client.query(`SET plan_cache_mode = ${mode}`);
        await client.query("BEGIN");
        const pruned = nodes(
          (await client.query<{ "QUERY PLAN": Array<{ Plan: PlanNode }> }>("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE prune_probe(NULL, 20, 5, 10)")).rows[0]![
            "QUERY PLAN"
          ][0]!.Plan,
        );
        const window = nodes(
          (await client.query<{ "QUERY PLAN": Array<{ Plan: PlanNode }> }>("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE window_probe('q', 1000000, 1000010, 10)"))
            .rows[0]!["QUERY PLAN"][0]!.Plan,
        );
        await client.query("ROLLBACK");
        const describe = (all: PlanNode[]) => all.map((n) => `${n["Node Type"]}${n["Index Name"] ? ` ${n["Index Name"]}` : ""}`).join(", ");
        // The window reads jobs_finished alone. (prune's DELETE may hash-join the victims with a
        // sequential scan of jobs in the generic plan, as it did before this index: not the walks
        // this index serves.)
        expect(
          window.filter((n) => n["Node Type"] === "Seq Scan" && n["Relation Name"] === "jobs"),
          `${mode}: ${describe(window)}`,
        ).toEqual([]);
        // prune's three walks by count (completed, cancelled, dead) are index scans of jobs_finished.
        expect(pruned.filter((n) => n["Index Name"] === "jobs_finished").length, `${mode}: ${describe(pruned)}`).toBe(3);
        // Each state's range in finish order from the index: a sort, if any, sorts at most what
        // the policy reads (keep 20 + delete 10), never a queue's 1,050 completed jobs.
        for (const all of [pruned, window]) {
          const sorted = all.filter((n) => n["Node Type"] === "Sort").map((n) => n["Actual Rows"]! * n["Actual Loops"]!);
          expect(Math.max(0, ...sorted), `${mode}: ${describe(all)}`).toBeLessThanOrEqual(30);
        }
        expect(
          pruned.some((n) => n["Index Name"] === "jobs_finished"),
          `${mode}: ${describe(pruned)}`,
        ).toBe(true);
        expect(
          window.some((n) => n["Index Name"] === "jobs_finished"),
          `${mode}: ${describe(window)}`,
        ).toBe(true);
      }
    } finally {
      await client.end();
      await oldSnapshot.query("ROLLBACK");
      await oldSnapshot.end();
    }
    // In calls of at most 25 deletions: each branch's walk then stops at 50 + 25 rows, fewer than a
    // state holds (1,050 completed, 150 cancelled, 150 dead), so the walks' order decides what goes. 1,280 in all.
    let deleted = 0;
    for (let call = 0; call < 100; call++) {
      const { jobs } = await b.prune({ maxCompletedPerQueue: 50, maxDeadPerQueue: 20, limit: 25 });
      if (jobs === 0) break;
      deleted += jobs;
    }
    expect(deleted).toBe(1_280);
    expect(await allIds(b.schema)).toEqual(expected);
  });

  it("an upgraded schema keeps its finished jobs, prunes them by count and counts them in a window as before", async () => {
    const schema = schemas.create();
    const s = pg.escapeIdentifier(schema);
    await migrateUpTo(admin, schema, "pg_settle_finished_index");
    for (let k = 0; k < 300; k++) await admin.query(`SELECT ${s}.add_job('q', 'job', '{}', $1)`, [JSON.stringify({ jobId: `f${k}` })]);
    await finishAll(schema);
    // Jobs of every other state beside them, in another queue.
    const other = async (options: object) =>
      (await admin.query<{ id: string }>(`SELECT ${s}.add_job('r', 'job', '{}', $1) AS id`, [JSON.stringify(options)])).rows[0]!.id;
    const waiting = await other({});
    const scheduled = await other({ delayMs: 3_600_000 });
    const active = await other({});
    await admin.query(
      `UPDATE ${s}.jobs SET state = 'active', attempt = 1, lease_token = 7, worker_id = 'old', started_at = 1, lease_expires_at = ${s}.now_ms(NULL) + 600000 WHERE id = $1`,
      [active],
    );
    // Every job without an expiry is kept: the ones kept forever and the unfinished ones.
    const expected = await keptByCount(schema, 40, 10);
    expect(expected).toEqual(expect.arrayContaining([waiting, scheduled, active]));

    const b = await backend(schema);
    const indexes = (
      await admin.query<{ indexname: string }>(`SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND indexname LIKE 'jobs_%'`, [schema])
    ).rows.map((r) => r.indexname);
    expect(indexes).toContain("jobs_finished");
    expect(indexes.filter((i) => ["jobs_done", "jobs_dead", "jobs_finished_at"].includes(i))).toEqual([]);
    // The window: completed and dead finished in [1000000, 1000100), counted from the table.
    const counted = (
      await admin.query<{ state: string; n: string }>(
        `SELECT state, count(*) AS n FROM ${s}.jobs WHERE finished_at >= 1000000 AND finished_at < 1000100 AND state IN ('completed', 'dead') GROUP BY state`,
      )
    ).rows;
    const window = await b.finishedWindow("q", 1_000_000, 1_000_100, 5);
    expect(window.completed).toBe(Number(counted.find((r) => r.state === "completed")!.n));
    expect(window.dead).toBe(Number(counted.find((r) => r.state === "dead")!.n));
    expect(await b.prune({ maxCompletedPerQueue: 40, maxDeadPerQueue: 10, limit: 10_000 })).toMatchObject({ jobs: 300 - 30 - 40 - 10 });
    expect(await allIds(schema)).toEqual(expected);
    // The other states are untouched: the lease given before the upgrade still settles.
    expect(await b.complete([{ lease: { jobId: active, token: 7 }, result: null }])).toEqual(["applied"]);
    expect((await b.get(scheduled))?.state).toBe("scheduled");
    expect((await b.get(waiting))?.state).toBe("waiting");
  });
});
