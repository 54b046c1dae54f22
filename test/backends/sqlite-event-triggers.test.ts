/**
 * Migration 0013_sqlite_event_triggers_split: "active" and "completed" events come from triggers
 * of their own (a plain INSERT … VALUES), events_state from 0004 keeps every other change. What
 * must hold: the event rows are the ones 0004's single trigger wrote, on every path; a table
 * prefix whose event log is off gets none of the new triggers, only their kept text, and gets
 * them all back when the log is turned on again.
 */
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/backend.js";
import { EVENT_TRIGGERS, keepEventLogOff } from "../../src/backend/sqlite/event-log-setting.js";
import { loadMigrations } from "../../src/backend/sqlite/migrate.js";
import { FakeClock } from "../../src/core/clock.js";
import { buildJobSpec } from "../../src/core/spec.js";
import type { Backend } from "../../src/index.js";
import { sqliteMigratedUpTo } from "../helpers/sqlite-migrations.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs("conveyor-sqlite-event-triggers-");
const open: Backend[] = [];
afterEach(async () => {
  for (const b of open.splice(0)) await b.close();
});
afterAll(() => temp.removeAll());

const WORKER = { id: "w1", host: "h", pid: 7 };
const ALL = EVENT_TRIGGERS.map((name) => `conveyor_${name}`);

function read<T>(path: string, sql: string): T[] {
  const db = new Database(path, { readonly: true });
  try {
    return db.prepare(sql).all() as T[];
  } finally {
    db.close();
  }
}
const triggerNames = (path: string) =>
  read<{ name: string }>(path, "SELECT name FROM sqlite_schema WHERE type = 'trigger' AND name LIKE 'conveyor_events_%' ORDER BY name").map((r) => r.name);

/** The events_state trigger as migration 0004 created it. */
function triggerOf0004(): string {
  const sql = loadMigrations("conveyor_").find((m) => m.file.startsWith("0004_"))!.sql;
  const start = sql.indexOf("CREATE TRIGGER conveyor_events_state");
  return sql.slice(start, sql.indexOf("END;", start) + "END;".length);
}

/** Every change of state a job can make, by hand and with a fixed clock, so two runs write the same rows. */
async function everyChange(b: Backend, clock: FakeClock): Promise<void> {
  const spec = (id: string, name = "job", options = {}) => buildJobSpec({ queue: "q", name, data: { id }, options: { jobId: id, ...options } });
  await b.enqueue([spec("done"), spec("retried", "job", { attempts: 2 }), spec("dies", "job", { attempts: 1 }), spec("released"), spec("cancelled")]);
  await b.enqueue([spec("later", "job", { delayMs: 60_000 })]);
  clock.advance(10);
  const claim = async (names = ["job"]) => b.claim({ queues: ["q"], names, limit: 10, leaseMs: 30_000, worker: WORKER });
  const first = await claim();
  const lease = (id: string) => first.find((c) => c.job.id === id)!.lease;
  clock.advance(10);
  await b.progress(lease("done"), 50);
  await b.complete([{ lease: lease("done"), result: { ok: true } }]);
  await b.fail([{ lease: lease("retried"), error: { name: "Error", message: "once", stack: null }, retryDelayMs: 5 }]);
  await b.fail([{ lease: lease("dies"), error: { name: "Error", message: "twice", stack: null }, retryDelayMs: null }]);
  await b.release([lease("released")]);
  await b.cancel("cancelled", "q");
  clock.advance(100);
  const second = await claim();
  clock.advance(10);
  await b.complete(second.map((c) => ({ lease: c.lease, result: c.job.id })));
  await b.replay("dies", "q");
  clock.advance(60_000);
  const third = await claim();
  // The rescued lease: expired and taken back to waiting.
  clock.advance(31_000);
  await b.rescueExpired({});
  expect(third.length).toBeGreaterThan(0);
}

describe("SQLite event triggers (0013)", () => {
  it("write the rows 0004's single trigger wrote, on every change of state", async () => {
    const rows: unknown[][] = [];
    for (const old of [true, false]) {
      const path = await temp.file("jobs.db");
      const clock = new FakeClock(1_000_000);
      const b = new SqliteBackend({ path, clock });
      open.push(b);
      if (old) {
        const db = new Database(path);
        for (const name of ["conveyor_events_state", "conveyor_events_active", "conveyor_events_completed"]) db.exec(`DROP TRIGGER ${name}`);
        db.exec(triggerOf0004());
        db.close();
      }
      await everyChange(b, clock);
      // A time from SQLite's own clock (a progress event's) differs between two runs; the fixed clock's times must not.
      const events = read<{ at: number }>(path, "SELECT at, type, queue, name, job_id, attempt, data FROM conveyor_events ORDER BY seq");
      rows.push(events.map((e) => ({ ...e, at: e.at < 1e12 ? e.at : "SQLite's clock" })));
    }
    const types = new Set((rows[1] as Array<{ type: string }>).map((r) => r.type));
    // Every kind of event a change of state makes is among them (but "waiting", which only a flow's parent makes, by the same ELSE branch in both).
    for (const type of ["added", "active", "progress", "completed", "retrying", "dead", "released", "cancelled", "replayed", "stalled"]) {
      expect(types, type).toContain(type);
    }
    expect(rows[1]).toEqual(rows[0]);
  });

  it("a prefix whose log is off gets none of them, only their kept text, and all of them back once the log is on again", async () => {
    const path = await temp.file("jobs.db");
    // A prefix as the code before 0013 left it with the log off: its three triggers dropped, their text kept.
    const db = sqliteMigratedUpTo(path, "_sqlite_event_triggers_split.sql");
    db.prepare("INSERT INTO conveyor_settings (name, value) VALUES ('event_log', 'off')").run();
    keepEventLogOff(db, "conveyor_");
    expect(JSON.parse(db.prepare("SELECT value FROM conveyor_settings WHERE name = 'event_log_triggers'").pluck().get() as string)).toHaveLength(3);
    db.close();

    const off = new SqliteBackend({ path, eventLog: false });
    expect(triggerNames(path)).toEqual([]);
    const kept = JSON.parse(read<{ value: string }>(path, "SELECT value FROM conveyor_settings WHERE name = 'event_log_triggers'")[0]!.value) as Array<{
      name: string;
      sql: string;
    }>;
    expect(kept.map((k) => k.name).sort()).toEqual([...ALL].sort());
    expect(kept.find((k) => k.name === "conveyor_events_state")!.sql).toContain("NEW.state NOT IN ('active', 'completed')");
    await off.close();

    const change = new Database(path);
    change.prepare("DELETE FROM conveyor_settings WHERE name = 'event_log'").run();
    change.close();
    const on = new SqliteBackend({ path });
    open.push(on);
    expect(triggerNames(path)).toEqual([...ALL].sort());
    await on.enqueue([buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId: "j" } })]);
    const [claimed] = await on.claim({ queues: ["q"], names: ["job"], limit: 1, leaseMs: 30_000, worker: WORKER });
    await on.complete([{ lease: claimed!.lease, result: 1 }]);
    expect(read<{ type: string; data: string }>(path, "SELECT type, data FROM conveyor_events ORDER BY seq")).toEqual([
      { type: "added", data: expect.any(String) as string },
      { type: "active", data: '{"workerId":"w1"}' },
      { type: "completed", data: '{"result":1}' },
    ]);
  });

  it("a prefix whose log is on is upgraded in place: its three triggers become the five", async () => {
    const path = await temp.file("jobs.db");
    const db = sqliteMigratedUpTo(path, "_sqlite_event_triggers_split.sql");
    db.close();
    const before = new Database(path);
    expect(before.prepare("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name LIKE 'conveyor_events_%'").pluck().get()).toBe(3);
    before.close();
    const b = new SqliteBackend({ path });
    open.push(b);
    expect(triggerNames(path)).toEqual([...ALL].sort());
  });
});
