/**
 * PostgreSQL only: claim, complete, complete-and-claim and fail write their own events, and the
 * event trigger records every other change (migration 0015_pg_settle_events_written). Read from
 * the `events` table directly, in (xid, seq) order: every statement here has committed, so no
 * wait for visibility is needed.
 */
import pg from "pg";
import { afterAll, afterEach, describe, expect, inject, it } from "vitest";
import { PostgresBackend } from "../../src/backend/postgres/backend.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { Queue, silentLogger } from "../../src/index.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";
import { migrateUpTo } from "../helpers/postgres-migrations.js";

const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const schemas = new TestSchemas(url);
const admin = new pg.Pool({ connectionString: url, max: 2 });
const opened: PostgresBackend[] = [];
afterEach(async () => {
  for (const b of opened.splice(0)) await b.close();
  await schemas.dropAll();
});
afterAll(() => admin.end());

async function backend(schema = schemas.create()): Promise<PostgresBackend> {
  const b = new PostgresBackend({ connectionString: url, schema, logger: silentLogger, poolSize: 2 });
  opened.push(b);
  await b.migrate();
  return b;
}

const job = (jobId: string, options: Parameters<typeof buildJobSpec>[0]["options"] = {}) =>
  buildJobSpec({ queue: "q", name: "job", data: null, options: { jobId, ...options } });
const worker = { id: "w1", host: "h", pid: 1 };
const error = { name: "Error", message: "boom", stack: null };
const claimRequest = (limit: number) => ({ queues: ["q"], names: ["job"], worker, limit, leaseMs: 30_000 });

interface EventRow {
  job_id: string;
  type: string;
  attempt: number;
  at: string;
  data: unknown;
}

async function events(b: PostgresBackend): Promise<EventRow[]> {
  const s = pg.escapeIdentifier(b.schema);
  return (await admin.query<EventRow>(`SELECT job_id, type, attempt, at, data FROM ${s}.events ORDER BY xid, seq`)).rows;
}

const brief = (rows: EventRow[], jobId: string) => rows.filter((e) => e.job_id === jobId).map((e) => `${e.type}:${e.attempt}`);

async function row(b: PostgresBackend, id: string): Promise<{ started_at: string; finished_at: string | null; run_at: string }> {
  const s = pg.escapeIdentifier(b.schema);
  return (await admin.query(`SELECT started_at, finished_at, run_at FROM ${s}.jobs WHERE id = $1`, [id])).rows[0];
}

describe("PostgreSQL: the hot statements write their own events", () => {
  it("records each change of claim, complete, complete-and-claim and fail exactly once, with the trigger's times and details", async () => {
    const b = await backend();
    await b.enqueue(["j1", "j2", "j3", "j4", "j5", "j6"].map((id) => job(id, { attempts: id === "j4" ? 1 : 2 })));
    const first = await b.claim(claimRequest(4)); // claim.sql: j1..j4
    expect(first.map((c) => c.job.id).sort()).toEqual(["j1", "j2", "j3", "j4"]);
    const lease = (id: string) => first.find((c) => c.job.id === id)!.lease;
    expect(await b.complete([{ lease: lease("j1"), result: { n: 1 } }])).toEqual(["applied"]); // complete.sql
    const both = await b.completeAndClaim!([{ lease: lease("j2"), result: { n: 2 } }], claimRequest(2)); // complete-and-claim.sql
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
    await b.completeAndClaim!([{ lease: lease("c2"), result: null }], { ...claimRequest(1), names: ["nothing"] });
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

  it("leaves to the trigger every statement without the first line, also after one with it in the same transaction", async () => {
    const b = await backend();
    await b.enqueue([job("x"), job("y")]);
    const s = pg.escapeIdentifier(b.schema);
    const cancel = `UPDATE ${s}.jobs SET state = 'cancelled', finished_at = ${s}.now_ms(NULL) WHERE id = $1`;
    const client = await admin.connect();
    try {
      await client.query("BEGIN");
      // The first line says "this statement writes its own events" (it writes none here, so none is recorded) ...
      await client.query(`-- conveyor:events-written\n${cancel}`, ["x"]);
      // ... and holds for that statement only: the next one is recorded by the trigger.
      await client.query(`-- an older Conveyor's statement, or anyone else's\n${cancel}`, ["y"]);
      await client.query("COMMIT");
    } finally {
      client.release();
    }
    const all = await events(b);
    expect(brief(all, "x")).toEqual(["added:0"]);
    expect(brief(all, "y")).toEqual(["added:0", "cancelled:0"]);
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

describe("PostgreSQL: upgrading to events written by the hot statements", () => {
  it("keeps the jobs of every state, their counts and their leases, and records each later change once", async () => {
    const schema = schemas.create();
    const s = pg.escapeIdentifier(schema);
    await migrateUpTo(admin, schema, "pg_settle_events_written");
    const add = async (options = "{}") => (await admin.query<{ id: string }>(`SELECT ${s}.add_job('q', 'job', '{}', $1) AS id`, [options])).rows[0]!.id;
    const waiting = await add();
    const scheduled = await add('{"delayMs": 3600000}');
    const [active, completed, dead, cancelled] = [await add(), await add(), await add(), await add()];
    const set = (id: string, assignments: string) => admin.query(`UPDATE ${s}.jobs SET ${assignments} WHERE id = $1`, [id]);
    await set(
      active,
      `state = 'active', attempt = 1, lease_token = 7, worker_id = 'old', started_at = ${s}.now_ms(NULL), lease_expires_at = ${s}.now_ms(NULL) + 600000`,
    );
    await set(completed, `state = 'completed', attempt = 1, finished_at = ${s}.now_ms(NULL), expires_at = ${s}.now_ms(NULL) + 600000`);
    await set(dead, `state = 'dead', attempt = 1, finished_at = ${s}.now_ms(NULL), expires_at = ${s}.now_ms(NULL) + 600000`);
    await set(cancelled, `state = 'cancelled', finished_at = ${s}.now_ms(NULL), expires_at = ${s}.now_ms(NULL) + 600000`);

    const b = await backend(schema);
    const states = async () => Object.fromEntries((await b.stats()).flatMap((q) => Object.entries(q.counts).filter(([, n]) => n !== 0)));
    expect(await states()).toEqual({ waiting: 1, scheduled: 1, active: 1, completed: 1, dead: 1, cancelled: 1 });
    for (const [id, state] of [
      [waiting, "waiting"],
      [scheduled, "scheduled"],
      [active, "active"],
      [completed, "completed"],
      [dead, "dead"],
      [cancelled, "cancelled"],
    ] as const) {
      expect((await b.get(id))?.state).toBe(state);
    }
    const before = (await events(b)).length;
    // The lease given before the upgrade still settles; the waiting job is claimed and completed.
    expect(await b.complete([{ lease: { jobId: active, token: 7 }, result: "old" }])).toEqual(["applied"]);
    const [claimed] = await b.claim(claimRequest(5));
    expect(claimed!.job.id).toBe(waiting);
    expect(await b.complete([{ lease: claimed!.lease, result: "new" }])).toEqual(["applied"]);
    const after = (await events(b)).slice(before);
    expect(after.map((e) => `${e.job_id}:${e.type}`)).toEqual([`${active}:completed`, `${waiting}:active`, `${waiting}:completed`]);
    expect(await states()).toEqual({ scheduled: 1, completed: 3, dead: 1, cancelled: 1 });
  });
});
