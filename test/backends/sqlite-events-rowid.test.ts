/**
 * SQLite migration 0016_sqlite_events_rowid: the event log's `seq` is a plain rowid, without
 * AUTOINCREMENT (which rewrote sqlite_sequence in every transaction that wrote an event). What
 * must hold, as with AUTOINCREMENT: a seq is never handed out twice and a reader's cursor never
 * points past an event it has not read, also after pruning every old event (the newest is kept:
 * the next seq counts from it) and after upgrading a file whose newest events were pruned (a
 * '(cursor)' row keeps the position, and no reader ever sees it).
 */
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { FakeClock } from "../../src/core/clock.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { sqliteMigratedUpTo } from "../helpers/sqlite-migrations.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs("conveyor-sqlite-events-rowid-");
const closeAfterTest: Array<{ close(): unknown }> = [];
afterEach(async () => {
  for (const item of closeAfterTest.splice(0).reverse()) await item.close();
});
afterAll(() => temp.removeAll());

function open(path: string, clock = new FakeClock()): SqliteBackend {
  const backend = new SqliteBackend({ path, wakeups: false, clock });
  closeAfterTest.push(backend);
  return backend;
}

const add = (backend: SqliteBackend, jobId: string) => backend.enqueue([buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId } })]);

/** Every event from `cursor` on, as [seq, type, job id]. */
async function eventsFrom(backend: SqliteBackend, cursor: string): Promise<Array<[string, string, string]>> {
  return (await backend.readEvents(cursor, 1_000)).events.map((e) => [e.id, e.type, e.jobId]);
}

function readOnly<T>(path: string, read: (db: Database.Database) => T): T {
  const db = new Database(path, { readonly: true });
  try {
    return read(db);
  } finally {
    db.close();
  }
}

describe("SQLite: the event log's seq without AUTOINCREMENT (0016_sqlite_events_rowid)", () => {
  it("writes no sqlite_sequence row for events, and the table has no AUTOINCREMENT", async () => {
    const path = await temp.file("schema.db");
    const backend = open(path);
    await backend.migrate();
    await add(backend, "a");
    readOnly(path, (db) => {
      expect(db.prepare("SELECT sql FROM sqlite_schema WHERE name = 'conveyor_events'").pluck().get()).not.toMatch(/AUTOINCREMENT/i);
      // sqlite_sequence exists for the outbox's AUTOINCREMENT; it holds no row for the events.
      expect(db.prepare("SELECT count(*) FROM sqlite_sequence WHERE name = 'conveyor_events'").pluck().get()).toBe(0);
    });
  });

  it("keeps the newest event when every event is old enough to prune, so the next one continues the sequence", async () => {
    const clock = new FakeClock();
    const backend = open(await temp.file("prune.db"), clock);
    await backend.migrate();
    await add(backend, "a");
    await add(backend, "b");
    await add(backend, "c");
    const last = await backend.latestEventCursor();
    clock.advance(3_600_000);
    expect(await backend.pruneEvents({ maxAgeMs: 1_000 })).toBe(2);
    expect(await backend.pruneEvents({ maxEvents: 0 })).toBe(0);
    expect(await backend.latestEventCursor()).toBe(last);
    await add(backend, "d");
    const next = await eventsFrom(backend, last);
    expect(next).toEqual([[String(Number(last) + 1), "added", "d"]]);
  });

  it("upgrades a file whose events were all pruned: the position is kept, the next event follows it, and no reader sees the placeholder", async () => {
    const path = await temp.file("upgrade.db");
    const db = sqliteMigratedUpTo(path, "_sqlite_events_rowid.sql");
    // The old table's AUTOINCREMENT handed out seqs up to 41; the newest ones were pruned and two old ones kept.
    const insert = db.prepare("INSERT INTO conveyor_events (seq, at, type, queue, name, job_id, attempt, data) VALUES (?, 1, 'added', 'q', 'job', ?, 0, NULL)");
    insert.run(7, "kept-7");
    insert.run(8, "kept-8");
    db.prepare("UPDATE sqlite_sequence SET seq = 41 WHERE name = 'conveyor_events'").run();
    expect(db.prepare("SELECT seq FROM sqlite_sequence WHERE name = 'conveyor_events'").pluck().get()).toBe(41);
    db.close();

    const backend = open(path);
    await backend.migrate();
    expect(await backend.latestEventCursor()).toBe("41");
    await add(backend, "after");
    expect(await eventsFrom(backend, "0")).toEqual([
      ["7", "added", "kept-7"],
      ["8", "added", "kept-8"],
      ["42", "added", "after"],
    ]);
    expect(await eventsFrom(backend, "41")).toEqual([["42", "added", "after"]]);
    // A reader at 8 reads past the placeholder to the new event; a page that would hold only the placeholder is empty.
    const page = await backend.readEvents("8", 1);
    expect(page.events.map((e) => e.jobId)).toEqual(["after"]);
    // Once a newer event exists the placeholder is an old row like any other, and pruning drops it.
    expect(await backend.pruneEvents({ maxEvents: 1 })).toBe(3);
    expect(await eventsFrom(backend, "0")).toEqual([["42", "added", "after"]]);
  });

  it("upgrades a file with its events as they were, without a placeholder when none was pruned at the end", async () => {
    const path = await temp.file("plain-upgrade.db");
    const db = sqliteMigratedUpTo(path, "_sqlite_events_rowid.sql");
    const insert = db.prepare("INSERT INTO conveyor_events (at, type, queue, name, job_id, attempt, data) VALUES (1, 'added', 'q', 'job', ?, 0, NULL)");
    for (const id of ["x", "y", "z"]) insert.run(id);
    db.close();
    const backend = open(path);
    await backend.migrate();
    expect(await eventsFrom(backend, "0")).toEqual([
      ["1", "added", "x"],
      ["2", "added", "y"],
      ["3", "added", "z"],
    ]);
    expect(readOnly(path, (check) => check.prepare("SELECT count(*) FROM conveyor_events WHERE type = '(cursor)'").pluck().get())).toBe(0);
    await add(backend, "w");
    expect((await eventsFrom(backend, "3")).map(([seq]) => seq)).toEqual(["4"]);
  });
});
