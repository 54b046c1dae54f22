/**
 * The SQLite lane claim's own reads (docs/flow-control.md, "Fifth round"): an even share of the
 * claim's heads per lane, read further when the pick takes a lane's whole share and still has
 * room; group running counts read from the active rows (no jobs_group_running index since
 * migration 0010_flow_lane_path), also on a database upgraded while it holds running jobs.
 * Pending jobs with a lane (a laned queue's) are in jobs_lanes only, not jobs_claim (migration
 * 0011_sqlite_flow_unkeyed_claim): counted, listed and claimed all the same, also after an upgrade.
 * The rules themselves are checked on every store by the conformance suite (sqlite.test.ts).
 */
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import type { ClaimThrottle } from "../../src/backend/contract.js";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { loadMigrations } from "../../src/backend/sqlite/migrate.js";
import { sqliteQuery } from "../../src/backend/sqlite/queries.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { sqliteMigratedUpTo } from "../helpers/sqlite-migrations.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs("conveyor-sqlite-flow-lanes-");
const closeAfterTest: Array<{ close(): unknown }> = [];
afterEach(async () => {
  for (const item of closeAfterTest.splice(0).reverse()) await item.close();
});
afterAll(() => temp.removeAll());

const WORKER = { id: "w", host: "h", pid: 1 };

function open(path: string): SqliteBackend {
  const backend = new SqliteBackend({ path, wakeups: false });
  closeAfterTest.push(backend);
  return backend;
}

function grouped(jobId: string, key: string, concurrency: number) {
  return buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId, group: { key, concurrency } } });
}

describe("SQLite lane claims", () => {
  it("a claim whose other lanes are at their group's concurrency takes the rest of its room from the lane that has some, in claim order", async () => {
    const backend = open(await temp.file("lanes.db"));
    // Six lanes, so each gets a share of 2 heads of a 12-job claim. Five are groups of
    // concurrency 1 (one job each), so the sixth must give 7: five more than its share.
    const specs = [];
    for (const lane of ["a", "b", "c", "d", "e"]) for (let i = 0; i < 3; i++) specs.push(grouped(`${lane}${i}`, lane, 1));
    for (let i = 0; i < 10; i++) specs.push(grouped(`f${i}`, "f", 100));
    await backend.enqueue(specs);

    const first = await backend.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 12, leaseMs: 60_000 });
    expect(first.map((c) => c.job.id).sort()).toEqual(["a0", "b0", "c0", "d0", "e0", "f0", "f1", "f2", "f3", "f4", "f5", "f6"]);

    // Groups a-e are full now: only f's last three jobs can start, and the claim says nothing
    // is throttled (it took jobs).
    const throttles: ClaimThrottle[] = [];
    const second = await backend.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 12, leaseMs: 60_000, onThrottle: (t) => throttles.push(t) });
    expect(second.map((c) => c.job.id)).toEqual(["f7", "f8", "f9"]);
    expect(throttles).toEqual([]);

    // Nothing can start until a group's job finishes: a throttle that waits on running jobs.
    const third = await backend.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 12, leaseMs: 60_000, onThrottle: (t) => throttles.push(t) });
    expect(third).toEqual([]);
    expect(throttles).toEqual([{ queue: "q", retryInMs: null }]);
    const a0 = first.find((c) => c.job.id === "a0")!;
    expect(await backend.complete([{ lease: a0.lease, result: null }])).toEqual(["applied"]);
    const fourth = await backend.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 12, leaseMs: 60_000 });
    expect(fourth.map((c) => c.job.id)).toEqual(["a1"]);
  });

  it("with queue running limits too, one read counts both: a group at its concurrency starts nothing, and a name's running jobs add up across groups", async () => {
    const backend = open(await temp.file("counts.db"));
    await backend.setQueueLimits("q", { rate: null, maxRunning: 100, maxRunningPerName: { job: 3 } });
    await backend.enqueue([grouped("g1", "g", 1), grouped("g2", "g", 1), ...["h1", "h2", "h3", "h4"].map((id) => grouped(id, "h", 10))]);
    const claim = async (limit: number) =>
      (await backend.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit, leaseMs: 60_000 })).map((c) => ({ id: c.job.id, lease: c.lease }));
    const first = await claim(2);
    expect(first.map((c) => c.id)).toEqual(["g1", "h1"]);
    // Running: g1 (group g, now at its concurrency of 1) and h1, both named "job": the name's cap
    // of 3 leaves room for one, which g cannot take (its turn comes first).
    expect((await claim(10)).map((c) => c.id)).toEqual(["h2"]);
    expect(await claim(10)).toEqual([]);
    expect(await backend.complete([{ lease: first[0]!.lease, result: null }])).toEqual(["applied"]);
    expect((await claim(10)).map((c) => c.id)).toEqual(["g2"]);
  });

  it("upgrades a database holding running and waiting grouped jobs: the running job still holds its group's slot, a stranded unkeyed job is claimed", async () => {
    const path = await temp.file("upgrade.db");
    // The schema as it was before this change, with jobs written as that version stored them.
    const db = sqliteMigratedUpTo(path, "_flow_lane_path.sql");
    expect(db.prepare("SELECT count(*) FROM sqlite_schema WHERE name = 'conveyor_jobs_group_running'").pluck().get()).toBe(1);
    const now = Date.now();
    const insert = db.prepare(
      `INSERT INTO conveyor_jobs (id, queue, name, payload, state, priority, run_at, created_at, max_attempts, backoff, attempt, lease_token,
         lease_expires_at, worker_id, worker_host, worker_pid, started_at, lane, group_key, group_concurrency)
       VALUES (?, 'q', 'job', '{}', ?, 0, ?, ?, 3, '{"type":"fixed","delayMs":1000}', ?, ?, ?, ?, ?, ?, ?, ?, 'g', 1)`,
    );
    insert.run("running", "active", now - 10, now - 10, 1, 1, now + 600_000, "old", "h", 2, now - 5, null);
    insert.run("next", "waiting", now - 9, now - 9, 0, 0, null, null, null, null, null, "g:g");
    insert.run("after", "waiting", now - 8, now - 8, 0, 0, null, null, null, null, null, "g:g");
    // An unkeyed job the old lane switch left in lane NULL (it was running when the queue's first
    // keyed job came, and a retry put it back): no lane claim saw it. The migration repairs it.
    db.prepare(
      `INSERT INTO conveyor_jobs (id, queue, name, payload, state, priority, run_at, created_at, max_attempts, backoff, attempt, lease_token)
       VALUES ('stuck', 'q', 'job', '{}', 'waiting', 0, ?, ?, 3, '{"type":"fixed","delayMs":1000}', 1, 1)`,
    ).run(now - 20, now - 20);
    db.prepare("INSERT INTO conveyor_flow_queues (queue, lanes) VALUES ('q', 1)").run();
    db.close();

    const backend = open(path);
    await backend.migrate();
    const check = new Database(path, { readonly: true });
    closeAfterTest.push(check);
    expect(check.prepare("SELECT count(*) FROM sqlite_schema WHERE name = 'conveyor_jobs_group_running'").pluck().get()).toBe(0);
    expect(check.prepare("SELECT max(version) FROM conveyor_migrations").pluck().get()).toBe(loadMigrations("conveyor_").at(-1)!.version);

    // Group g has concurrency 1 and its job "running" (claimed before the upgrade) is active: only
    // the repaired unkeyed job can start.
    const first = await backend.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 5, leaseMs: 60_000 });
    expect(first.map((c) => c.job.id)).toEqual(["stuck"]);
    expect(await backend.complete([{ lease: { jobId: "running", token: 1 }, result: null }])).toEqual(["applied"]);
    const next = await backend.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 5, leaseMs: 60_000 });
    expect(next.map((c) => c.job.id)).toEqual(["next"]);
    expect((await backend.get("after"))?.state).toBe("waiting");
  });
});

/** Entries in an index (its leaf cells, from SQLite's dbstat table): what a claim has to delete and a COMMIT to write. */
function indexEntries(path: string, index: string): number {
  const db = new Database(path, { readonly: true });
  try {
    return (db.prepare("SELECT coalesce(sum(ncell), 0) FROM dbstat WHERE name = ? AND pagetype = 'leaf'").pluck().get(`conveyor_${index}`) as number) ?? 0;
  } finally {
    db.close();
  }
}

/** EXPLAIN QUERY PLAN of one of the backend's query files, as one line per step. */
function planOf(path: string, sql: string, params: unknown[] | Record<string, unknown>): string[] {
  const db = new Database(path, { readonly: true });
  try {
    const statement = db.prepare(`EXPLAIN QUERY PLAN ${sql}`);
    const rows = (Array.isArray(params) ? statement.all(...params) : statement.all(params)) as Array<{ detail: string }>;
    return rows.map((r) => r.detail);
  } finally {
    db.close();
  }
}

describe("SQLite: a laned queue's pending jobs are in jobs_lanes only", () => {
  const keyed = (jobId: string, queue: string, key: string, delayMs = 0) =>
    buildJobSpec({ queue, name: "job", data: {}, options: { jobId, group: { key, concurrency: 100 }, delayMs } });
  const plain = (jobId: string, queue: string, delayMs = 0) => buildJobSpec({ queue, name: "job", data: {}, options: { jobId, delayMs } });
  const claimIds = async (backend: SqliteBackend, queues: string[], limit: number) =>
    (await backend.claim({ queues, names: ["job"], worker: WORKER, limit, leaseMs: 60_000 })).map((c) => c.job.id);

  it("keeps keyed jobs out of jobs_claim, and stats, listings and the many-queue scan still see every pending job", async () => {
    const path = await temp.file("split.db");
    const backend = open(path);
    await backend.enqueue([plain("p1", "plain"), plain("p2", "plain", 600_000)]);
    await backend.enqueue([keyed("k1", "laned", "a"), keyed("k2", "laned", "b"), keyed("k3", "laned", "a", 600_000), plain("u1", "laned")]);
    // Only the plain queue's two jobs are in jobs_claim; the laned queue's four (an unkeyed one
    // in lane '') are in jobs_lanes alone.
    expect(indexEntries(path, "jobs_claim")).toBe(2);
    expect(indexEntries(path, "jobs_lanes")).toBe(4);

    const counts = (stats: Awaited<ReturnType<SqliteBackend["stats"]>>) =>
      Object.fromEntries(stats.map((s) => [s.queue, { waiting: s.counts.waiting, scheduled: s.counts.scheduled, aged: s.oldestWaitingAgeMs !== null }]));
    const expected = { plain: { waiting: 1, scheduled: 1, aged: true }, laned: { waiting: 3, scheduled: 1, aged: true } };
    expect(counts(await backend.stats())).toEqual(expected);
    expect(counts(await backend.stats("laned"))).toEqual({ laned: expected.laned });
    expect(counts(await backend.stats("plain"))).toEqual({ plain: expected.plain });
    expect((await backend.list({ queue: "laned", state: "waiting" })).map((j) => j.id)).toEqual(["u1", "k2", "k1"]);
    expect((await backend.list({ queue: "laned", state: "scheduled" })).map((j) => j.id)).toEqual(["k3"]);
    expect((await backend.list({ state: "waiting" })).map((j) => j.id)).toEqual(["u1", "k2", "k1", "p1"]);

    // A claim naming both queues and an empty one finds both (pending-queues.sql reads both indexes).
    expect((await claimIds(backend, ["empty", "laned", "plain"], 10)).sort()).toEqual(["k1", "k2", "p1", "u1"]);
    expect(counts(await backend.stats("laned"))).toEqual({ laned: { waiting: 0, scheduled: 1, aged: false } });
  });

  it("reads each index alone: the plain claim walks jobs_claim, stats and the many-queue scan touch no table row", async () => {
    const path = await temp.file("plans.db");
    const backend = open(path);
    await backend.enqueue([plain("p1", "plain"), keyed("k1", "laned", "a")]);
    const text = (name: Parameters<typeof sqliteQuery>[0]) => sqliteQuery(name, "conveyor_");
    expect(planOf(path, text("claim-candidates"), ["plain", Date.now(), '["job"]', 10])).toContain(
      "SEARCH conveyor_jobs USING INDEX conveyor_jobs_claim (queue=?)",
    );
    const stats = planOf(path, text("stats-pending"), [0, 0]);
    expect(stats.filter((step) => /conveyor_jobs\b/.test(step))).toEqual([
      "SCAN conveyor_jobs USING COVERING INDEX conveyor_jobs_claim",
      "SCAN conveyor_jobs USING COVERING INDEX conveyor_jobs_lanes",
    ]);
    // One row per queue is grouped at the end, never one per job.
    expect(stats.filter((step) => step.includes("TEMP B-TREE"))).toEqual(["USE TEMP B-TREE FOR GROUP BY"]);
    expect(stats.at(-1)).toBe("USE TEMP B-TREE FOR GROUP BY");
    expect(planOf(path, text("stats-pending-of"), [0, 0, "laned"]).filter((step) => /conveyor_jobs\b|TEMP/.test(step))).toEqual([
      "SEARCH conveyor_jobs USING COVERING INDEX conveyor_jobs_claim (queue=?)",
      "SEARCH conveyor_jobs USING COVERING INDEX conveyor_jobs_lanes (queue=? AND lane>?)",
    ]);
    const scan = planOf(path, text("pending-queues"), { first: "a", last: "z", most: 5 }).filter((step) => /conveyor_jobs\b/.test(step));
    expect(new Set(scan)).toEqual(
      new Set([
        "SEARCH conveyor_jobs USING COVERING INDEX conveyor_jobs_claim (queue>?)",
        "SEARCH conveyor_jobs USING COVERING INDEX conveyor_jobs_lanes (queue>?)",
      ]),
    );
  });

  it("a queue claimed on the plain path that then gets a keyed job: its waiting and running unkeyed jobs are claimed by the lane path", async () => {
    const path = await temp.file("turned.db");
    const backend = open(path);
    await backend.enqueue(["u1", "u2", "u3"].map((id) => plain(id, "q")));
    const first = await backend.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 1, leaseMs: 60_000 });
    expect(first.map((c) => c.job.id)).toEqual(["u1"]);
    expect(indexEntries(path, "jobs_claim")).toBe(2);
    // The queue's first keyed job: u2 and u3 move to lane '' (out of jobs_claim), as does u1, running.
    await backend.enqueue([keyed("k1", "q", "a")]);
    expect(indexEntries(path, "jobs_claim")).toBe(0);
    expect(indexEntries(path, "jobs_lanes")).toBe(3);
    expect((await claimIds(backend, ["q"], 10)).sort()).toEqual(["k1", "u2", "u3"]);
    // u1 fails and waits again (a retry with no delay): the lane path claims it.
    expect(await backend.fail([{ lease: first[0]!.lease, error: { name: "Error", message: "again", stack: null }, retryDelayMs: 0 }])).toEqual(["applied"]);
    expect(await claimIds(backend, ["q"], 10)).toEqual(["u1"]);
  });

  it("upgrades a database with keyed jobs waiting: they leave jobs_claim, and every pending job is counted and claimed once", async () => {
    const path = await temp.file("upgrade-claim.db");
    // The schema before this change, filled by the code of that time (a backend at that schema
    // would refuse nothing here: the jobs are written as it wrote them).
    const db = sqliteMigratedUpTo(path, "_sqlite_flow_unkeyed_claim.sql");
    const now = Date.now();
    const insert = db.prepare(
      `INSERT INTO conveyor_jobs (id, queue, name, payload, state, priority, run_at, created_at, max_attempts, backoff, lane, group_key, group_concurrency)
       VALUES (?, ?, 'job', '{}', ?, 0, ?, ?, 3, '{"type":"fixed","delayMs":1000}', ?, ?, ?)`,
    );
    for (let i = 0; i < 6; i++) insert.run(`k${i}`, "laned", "waiting", now - 100 + i, now - 100 + i, `g${i % 3}`, `g${i % 3}`, 10);
    insert.run("u", "laned", "waiting", now - 50, now - 50, "", null, null);
    insert.run("later", "laned", "scheduled", now + 600_000, now - 40, "g0", "g0", 10);
    insert.run("p", "plain", "waiting", now - 30, now - 30, null, null, null);
    db.prepare("INSERT INTO conveyor_flow_queues (queue, lanes) VALUES ('laned', 1)").run();
    db.prepare("INSERT INTO conveyor_queues (name) VALUES ('laned'), ('plain')").run();
    db.close();
    expect(indexEntries(path, "jobs_claim")).toBe(9);

    const backend = open(path);
    await backend.migrate();
    expect(indexEntries(path, "jobs_claim")).toBe(1);
    expect(indexEntries(path, "jobs_lanes")).toBe(8);
    const stats = Object.fromEntries((await backend.stats()).map((s) => [s.queue, [s.counts.waiting, s.counts.scheduled]]));
    expect(stats).toEqual({ laned: [7, 1], plain: [1, 0] });
    const claimed = await claimIds(backend, ["laned", "plain"], 20);
    expect(claimed.sort()).toEqual(["k0", "k1", "k2", "k3", "k4", "k5", "p", "u"]);
    expect(await claimIds(backend, ["laned", "plain"], 20)).toEqual([]);
  });
});
