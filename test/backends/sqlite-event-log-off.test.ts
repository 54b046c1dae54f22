/**
 * The SQLite event log switched off per table prefix (SqliteBackendOptions.eventLog,
 * `sqlite:PATH?eventLog=off`, migration 0012_sqlite_event_log_switch): no `events` row is written
 * by any path (insert, claim, completion, retry, death, deletion on completion or death, rescue),
 * every reader refuses by name exactly as on PostgreSQL and Redis, the prefix records the setting
 * so a process configured otherwise refuses to start, and per-job event streams still work (by
 * polling). The whole conformance suite also runs with the log off (sqlite-event-log-off-conformance.test.ts).
 */
import Database from "better-sqlite3";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { openBackend } from "../../src/backend/open.js";
import { SqliteBackend, type SqliteBackendOptions } from "../../src/backend/sqlite/backend.js";
import { EVENT_TRIGGERS } from "../../src/backend/sqlite/event-log-setting.js";
import { FakeClock } from "../../src/core/clock.js";
import { Worker, type Backend } from "../../src/index.js";
import { expectEventLogReadersRefused, expectJobEventStreamByPolling, runEveryEventPath } from "../helpers/event-log-off.js";
import { claimOne, enqueueOne } from "../conformance/fixtures.js";
import { sqliteMigratedUpTo } from "../helpers/sqlite-migrations.js";

const dir = mkdtempSync(join(tmpdir(), "conveyor-sqlite-evoff-"));
let files = 0;
const newFile = () => join(dir, `db-${++files}.db`);

const backends: Backend[] = [];
const workers: Worker[] = [];

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.close({ force: true })));
  await Promise.all(backends.splice(0).map((b) => b.close()));
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

function backend(options: Partial<SqliteBackendOptions> & { path: string }): SqliteBackend {
  const b = new SqliteBackend({ wakeups: false, ...options });
  backends.push(b);
  return b;
}

/** One number read straight from the file, on a connection of its own. */
function count(path: string, sql: string): number {
  const db = new Database(path, { readonly: true });
  try {
    return db.prepare(sql).pluck().get() as number;
  } finally {
    db.close();
  }
}

const eventRows = (path: string, prefix = "conveyor_") => count(path, `SELECT count(*) FROM ${prefix}events`);
const eventTriggers = (path: string, prefix = "conveyor_") =>
  count(path, `SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name IN (${EVENT_TRIGGERS.map((name) => `'${prefix}${name}'`).join(", ")})`);
/** Every event trigger present. */
const ALL = EVENT_TRIGGERS.length;

describe("SQLite event log off (eventLog: false)", () => {
  it("writes no event while jobs are added, run, retried, removed and dead; the same run with the log on writes them", async () => {
    const offPath = newFile();
    const off = backend({ path: offPath, eventLog: false });
    expect(off.capabilities.eventLog).toBe(false);
    expect(eventTriggers(offPath)).toBe(0);
    await runEveryEventPath(off, 20, workers);
    expect(eventRows(offPath)).toBe(0);

    const onPath = newFile();
    const on = backend({ path: onPath });
    expect(on.capabilities.eventLog).toBe(true);
    expect(eventTriggers(onPath)).toBe(ALL);
    await runEveryEventPath(on, 20, workers);
    // added, active and completed/retrying/dead for each of the 22 jobs (one runs twice)
    expect(eventRows(onPath)).toBeGreaterThanOrEqual(22 * 3);
    // one terminal event per job, also for the 11 deleted as they finished (written by the statement itself)
    expect(count(onPath, "SELECT count(*) FROM conveyor_events WHERE type IN ('completed', 'dead')")).toBe(22);
  });

  it("a lease rescued into death writes no event either", async () => {
    const path = newFile();
    const clock = new FakeClock(1_000_000);
    const b = backend({ path, eventLog: false, clock });
    const id = await enqueueOne(b, { attempts: 1, removeOnFail: true });
    await claimOne(b, { leaseMs: 1_000 });
    clock.advance(5_000);
    await b.rescueExpired();
    expect(await b.get(id)).toBeNull();
    expect(eventRows(path)).toBe(0);
  });

  it("refuses every reader by name, as PostgreSQL and Redis do: readEvents, queue.events(), GET /v1/events (501); no event tail", async () => {
    const b = backend({ path: newFile(), eventLog: false });
    await expectEventLogReadersRefused(b, { cursor: "0", scope: "table prefix" });
  });

  it("a job's own event stream (GET /v1/jobs/{id}/events) still reports its completion, by polling", async () => {
    const b = backend({ path: newFile(), eventLog: false });
    await expectJobEventStreamByPolling(b, workers);
  });

  it("one setting per table prefix: the first process records it, a process configured otherwise refuses to start", () => {
    const path = newFile();
    backend({ path, eventLog: false });
    expect(count(path, "SELECT count(*) FROM conveyor_settings WHERE name = 'event_log' AND value = 'off'")).toBe(1);
    expect(() => backend({ path })).toThrow(/table prefix "conveyor_" of sqlite:.* keeps its event log off.*pass eventLog: false \(\?eventLog=off in a URL\)/);
    backend({ path, eventLog: false });

    // Another prefix in the same file keeps its own setting.
    backend({ path, tablePrefix: "other_" });
    expect(eventTriggers(path, "other_")).toBe(ALL);
    expect(() => backend({ path, tablePrefix: "other_", eventLog: false })).toThrow(/keeps its event log on/);
    expect(eventTriggers(path, "other_")).toBe(ALL);
    expect(eventTriggers(path)).toBe(0);
  });

  it("turned back on by deleting the record while no process runs: the next process with the log on restores the triggers", async () => {
    const path = newFile();
    const off = backend({ path, eventLog: false });
    await off.close();
    expect(eventTriggers(path)).toBe(0);
    const db = new Database(path);
    db.prepare("DELETE FROM conveyor_settings WHERE name = 'event_log'").run();
    db.close();
    const on = backend({ path });
    expect(eventTriggers(path)).toBe(ALL);
    expect(count(path, "SELECT count(*) FROM conveyor_settings WHERE name = 'event_log_triggers'")).toBe(0);
    await enqueueOne(on);
    expect(eventRows(path)).toBe(1);
    expect(await on.latestEventCursor()).toBe("1");
  });

  it("a database holding jobs from before the setting existed is recorded as on", () => {
    const path = newFile();
    // The state of a database before the switch existed, with one event in it.
    const db = sqliteMigratedUpTo(path, "_sqlite_event_log_switch.sql");
    db.prepare("INSERT INTO conveyor_events (at, type, queue, name, job_id, attempt) VALUES (1, 'added', 'q', 'n', 'j', 0)").run();
    db.close();
    expect(() => backend({ path, eventLog: false })).toThrow(/keeps its event log on/);
    expect(eventTriggers(path)).toBe(ALL);
    backend({ path });
    expect(count(path, "SELECT value FROM conveyor_settings WHERE name = 'event_log'")).toBe("on");
  });

  it("sqlite:PATH?eventLog=off (the CLI's --db) turns it off; another value is refused", async () => {
    const path = newFile();
    const b = await openBackend(`sqlite:${path}?eventLog=off`);
    backends.push(b);
    expect(b.capabilities.eventLog).toBe(false);
    expect(eventTriggers(path)).toBe(0);
    await expect(openBackend(`sqlite:${path}?eventLog=no`)).rejects.toThrow(/\?eventLog= takes on or off/);
    // The file keeps its log off: a URL asking for it on, or saying nothing (default on), is refused.
    for (const url of [`sqlite:${path}?eventLog=on`, `sqlite:${path}`]) {
      await expect(openBackend(url), url).rejects.toThrow(/keeps its event log off.*\(\?eventLog=off in a URL\)/);
    }
    const memory = await openBackend("sqlite::memory:?eventLog=off");
    backends.push(memory);
    expect(memory.capabilities.eventLog).toBe(false);
    await expect(openBackend("sqlite:?eventLog=off")).rejects.toThrow(/sqlite: needs a path/);
    // Empty, other-case, odd-Unicode and huge values are refused by name, and no file is created for them.
    for (const value of ["", "OFF", "false", "of\u200bf", "ｏｆｆ", "x".repeat(10_000)]) {
      const other = newFile();
      await expect(openBackend(`sqlite:${other}?eventLog=${value}`), value.slice(0, 20)).rejects.toThrow(/\?eventLog= takes on or off/);
      expect(existsSync(other)).toBe(false);
    }
    // The option itself takes a boolean only.
    for (const value of ["off", 0, null, { on: false }]) {
      expect(() => backend({ path: newFile(), eventLog: value as never }), JSON.stringify(value)).toThrow(/eventLog must be true or false/);
    }
  });
});
