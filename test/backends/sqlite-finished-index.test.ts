/**
 * SQLite migration 0015_sqlite_finished_index: a finished job has one index entry for stats,
 * listings and the prune by count (jobs_finished, which now carries seq and expires_at), where it
 * had two (jobs_finished and jobs_prunable). What must hold: jobs_prunable is gone; the prune by
 * count reads jobs_finished alone and in order (no sort of a queue's finished jobs, however many);
 * it keeps the newest by finish time, then insertion order, completed and cancelled jobs counted
 * together; jobs kept forever are neither counted nor deleted; a database that upgrades keeps
 * its finished jobs and prunes them the same way.
 */
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { sqliteQuery } from "../../src/backend/sqlite/queries.js";
import { pinParameters } from "../../src/backend/sqlite/stable-plans.js";
import { FakeClock } from "../../src/core/clock.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { sqliteMigratedUpTo } from "../helpers/sqlite-migrations.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs("conveyor-sqlite-finished-");
const closeAfterTest: Array<{ close(): unknown }> = [];
afterEach(async () => {
  for (const item of closeAfterTest.splice(0).reverse()) await item.close();
});
afterAll(() => temp.removeAll());

const WORKER = { id: "w", host: "h", pid: 1 };

function open(path: string, clock = new FakeClock()): SqliteBackend {
  const backend = new SqliteBackend({ path, wakeups: false, clock });
  closeAfterTest.push(backend);
  return backend;
}

/** The file's indexes on the jobs table, each with its columns in order. */
function jobIndexes(path: string): Map<string, string[]> {
  const db = new Database(path, { readonly: true });
  try {
    const names = db
      .prepare("SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'conveyor_jobs' AND sql IS NOT NULL")
      .pluck()
      .all() as string[];
    return new Map(names.map((name) => [name, (db.prepare(`PRAGMA index_info(${name})`).all() as Array<{ name: string }>).map((c) => c.name)]));
  } finally {
    db.close();
  }
}

/** EXPLAIN QUERY PLAN of a query file as the backend prepares it (parameters pinned), one line per step. */
function planOf(path: string, file: "prune-beyond-count-completed" | "prune-beyond-count-dead"): string[] {
  const db = new Database(path, { readonly: true });
  try {
    const rows = db.prepare(`EXPLAIN QUERY PLAN ${pinParameters(sqliteQuery(file, "conveyor_"))}`).all({ queue: "q", limit: 10, keep: 5 }) as Array<{
      detail: string;
    }>;
    return rows.map((r) => r.detail);
  } finally {
    db.close();
  }
}

/** Enqueues `ids` in order (so their seq follows it) on queue "q"; `options` for every one. */
async function enqueue(backend: SqliteBackend, ids: string[], options: Record<string, unknown> = {}): Promise<void> {
  await backend.enqueue(ids.map((jobId) => buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId, ...options } })));
}

/** Claims and completes the waiting jobs `ids` in that order, each in its own call. */
async function completeInOrder(backend: SqliteBackend, ids: string[]): Promise<void> {
  const claimed = await backend.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 100, leaseMs: 60_000 });
  for (const id of ids) {
    const job = claimed.find((c) => c.job.id === id)!;
    expect(await backend.complete([{ lease: job.lease, result: null }])).toEqual(["applied"]);
  }
}

describe("SQLite: one index of finished jobs (0015_sqlite_finished_index)", () => {
  it("has no jobs_prunable, and jobs_finished carries seq and expires_at after the finish time", async () => {
    const path = await temp.file("schema.db");
    await open(path).migrate();
    const indexes = jobIndexes(path);
    expect(indexes.has("conveyor_jobs_prunable")).toBe(false);
    expect(indexes.get("conveyor_jobs_finished")).toEqual(["queue", "state", "finished_at", "seq", "expires_at"]);
  });

  it("prunes by count straight off jobs_finished, in order, with no sort (completed and cancelled merged)", async () => {
    const path = await temp.file("plans.db");
    await open(path).migrate();
    const completed = planOf(path, "prune-beyond-count-completed");
    expect(
      completed.filter((step) => step.includes("COVERING INDEX conveyor_jobs_finished (queue=? AND state=?)")),
      completed.join("\n"),
    ).toHaveLength(2);
    expect(completed, completed.join("\n")).toContain("MERGE (UNION ALL)");
    const dead = planOf(path, "prune-beyond-count-dead");
    expect(
      dead.filter((step) => step.includes("COVERING INDEX conveyor_jobs_finished (queue=? AND state=?)")),
      dead.join("\n"),
    ).toHaveLength(1);
    for (const step of [...completed, ...dead]) expect(step).not.toMatch(/TEMP B-TREE|SCAN conveyor_jobs/);
  });

  it("keeps the newest by finish time and then by insertion order, completed and cancelled together; never counts jobs kept forever", async () => {
    const clock = new FakeClock();
    const backend = open(await temp.file("ties.db"), clock);
    await backend.migrate();
    await enqueue(backend, ["old"]);
    await completeInOrder(backend, ["old"]);
    clock.advance(1_000);
    // Four jobs finished in the same millisecond, completed out of insertion order; the last
    // inserted one is cancelled. A job kept forever finishes last of all.
    await enqueue(backend, ["a", "b", "c"]);
    await enqueue(backend, ["cancelled-last"]);
    await completeInOrder(backend, ["c", "a", "b"]);
    expect(await backend.cancel("cancelled-last")).toBe("cancelled");
    clock.advance(1_000);
    await enqueue(backend, ["forever"], { removeOnComplete: false });
    await completeInOrder(backend, ["forever"]);

    // Keep 2 of the six: the two newest with a deadline are the ones of the tie inserted last.
    expect((await backend.prune({ maxCompletedPerQueue: 2 })).jobs).toBe(3);
    const left = (await backend.list({ queue: "q" })).map((j) => j.id).sort();
    expect(left).toEqual(["c", "cancelled-last", "forever"]);
    // Nothing left beyond the count, and the job kept forever stays whatever the limit.
    expect((await backend.prune({ maxCompletedPerQueue: 2 })).jobs).toBe(0);
    expect((await backend.prune({ maxCompletedPerQueue: 0 })).jobs).toBe(2);
    expect((await backend.list({ queue: "q" })).map((j) => j.id)).toEqual(["forever"]);
  });

  it("prunes dead jobs by their own count, newest kept, at most `limit` per call", async () => {
    const clock = new FakeClock();
    const backend = open(await temp.file("dead.db"), clock);
    await backend.migrate();
    await enqueue(backend, ["d1", "d2", "d3", "d4"], { attempts: 1 });
    const claimed = await backend.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 10, leaseMs: 60_000 });
    for (const id of ["d1", "d2", "d3", "d4"]) {
      const job = claimed.find((c) => c.job.id === id)!;
      await backend.fail([{ lease: job.lease, error: { name: "Error", message: "no", stack: null }, retryDelayMs: null }]);
      clock.advance(10);
    }
    expect((await backend.prune({ maxDeadPerQueue: 1, limit: 2 })).jobs).toBe(2);
    expect((await backend.prune({ maxDeadPerQueue: 1, limit: 2 })).jobs).toBe(1);
    expect((await backend.list({ queue: "q" })).map((j) => j.id)).toEqual(["d4"]);
  });

  it("upgrades a database with finished jobs: the index is rebuilt with them, and they are pruned by count as before", async () => {
    const path = await temp.file("upgrade.db");
    const db = sqliteMigratedUpTo(path, "_sqlite_finished_index.sql");
    expect(db.prepare("SELECT count(*) FROM sqlite_schema WHERE name = 'conveyor_jobs_prunable'").pluck().get()).toBe(1);
    const insert = db.prepare(
      `INSERT INTO conveyor_jobs (id, queue, name, payload, state, priority, run_at, created_at, max_attempts, backoff, attempt, finished_at, expires_at)
       VALUES (?, 'q', 'job', '{}', ?, 0, 0, 0, 3, '{"type":"fixed","delayMs":1000}', 1, ?, ?)`,
    );
    insert.run("done-1", "completed", 100, 1e15);
    insert.run("done-2", "completed", 200, 1e15);
    insert.run("cancelled-3", "cancelled", 300, 1e15);
    insert.run("dead-1", "dead", 100, 1e15);
    insert.run("dead-2", "dead", 200, 1e15);
    insert.run("kept-forever", "completed", 50, null);
    db.prepare("INSERT INTO conveyor_queues (name) VALUES ('q')").run();
    db.close();

    const backend = open(path);
    await backend.migrate();
    expect(jobIndexes(path).has("conveyor_jobs_prunable")).toBe(false);
    expect((await backend.stats("q"))[0]?.counts).toMatchObject({ completed: 3, cancelled: 1, dead: 2 });
    expect((await backend.prune({ maxCompletedPerQueue: 1, maxDeadPerQueue: 1 })).jobs).toBe(3);
    expect((await backend.list({ queue: "q" })).map((j) => j.id).sort()).toEqual(["cancelled-3", "dead-2", "kept-forever"]);
  });
});
