/**
 * The SQLite lane claim's own reads (docs/flow-control.md, "Fifth round"): an even share of the
 * claim's heads per lane, read further when the pick takes a lane's whole share and still has
 * room; group running counts read from the active rows (no jobs_group_running index since
 * migration 0010_flow_lane_path), also on a database upgraded while it holds running jobs.
 * The rules themselves are checked on every store by the conformance suite (sqlite.test.ts).
 */
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import type { ClaimThrottle } from "../../src/backend/contract.js";
import { readMigrationFiles } from "../../src/backend/migration-files.js";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { buildJobSpec } from "../../src/core/spec.js";
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
    const migrations = readMigrationFiles(new URL("../../src/backend/sqlite/migrations/", import.meta.url), "SQLite", "sqlite/");
    const ours = migrations.find((m) => m.file.endsWith("_flow_lane_path.sql"));
    expect(ours, "the migration of this change").toBeDefined();
    // The schema as it was before this change, with jobs written as that version stored them.
    const db = new Database(path);
    db.pragma("journal_mode = WAL");
    db.exec("CREATE TABLE conveyor_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT");
    for (const m of migrations.filter((m) => m.version < ours!.version)) {
      db.exec(m.text.replaceAll("{{prefix}}", "conveyor_"));
      db.prepare("INSERT INTO conveyor_migrations (version, applied_at) VALUES (?, 0)").run(m.version);
    }
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
    expect(check.prepare("SELECT max(version) FROM conveyor_migrations").pluck().get()).toBe(migrations.at(-1)!.version);

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
