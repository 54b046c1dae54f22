/**
 * The event log switch of a SQLite table prefix (SqliteBackendOptions.eventLog, migration
 * 0012_sqlite_event_log_switch): the setting is recorded once per prefix and every process on it
 * must agree; with it off the event triggers are dropped (their text kept in the settings table),
 * with it on they are recreated from that text if an earlier process had dropped them. The rules
 * a caller sees (the option, the refusals) are the ones every store shares (../event-log-switch.ts).
 */
import type Database from "better-sqlite3";
import { eventLogMismatchError } from "../event-log-switch.js";

/** The triggers that write `events` rows (migrations 0004 and 0013), without the table prefix. */
export const EVENT_TRIGGERS = ["events_added", "events_state", "events_progress", "events_active", "events_completed"] as const;

/** What a table prefix is called in the refusal: `where` names the data, `scope` its kind. */
export const EVENT_LOG_SCOPE = "table prefix";

/**
 * Records `wanted` for the prefix unless a setting is recorded already, and makes the triggers
 * match the recorded one; throws eventLogMismatchError when the recorded setting is the other.
 * A prefix whose setting is recorded and whose triggers match it is only read (the common open);
 * otherwise one IMMEDIATE transaction: concurrent first openers record one setting, the later one
 * reads it, and the triggers are dropped or recreated with it.
 */
export function settleSqliteEventLog(db: Database.Database, prefix: string, wanted: boolean, where: string): void {
  const settings = `${prefix}settings`;
  const record = db.prepare<[string]>(`INSERT INTO ${settings} (name, value) VALUES ('event_log', ?) ON CONFLICT (name) DO NOTHING`);
  const read = db.prepare<[string], string>(`SELECT value FROM ${settings} WHERE name = ?`).pluck();
  const forget = db.prepare(`DELETE FROM ${settings} WHERE name = 'event_log_triggers'`);
  const all = EVENT_TRIGGERS.length;
  const matches = (stored: boolean, present: number) => (stored ? present === all || read.get("event_log_triggers") === undefined : present === 0);
  // Common case, without the write lock: the setting is recorded and the triggers match it.
  const recorded = read.get("event_log");
  if (recorded !== undefined) {
    const stored = recorded === "on";
    if (stored !== wanted) throw eventLogMismatchError(where, EVENT_LOG_SCOPE, stored, wanted);
    if (matches(stored, presentTriggers(db, prefix).length)) return;
  }
  const settle = db.transaction(() => {
    record.run(wanted ? "on" : "off");
    const stored = read.get("event_log") === "on";
    if (stored !== wanted) throw eventLogMismatchError(where, EVENT_LOG_SCOPE, stored, wanted);
    if (!stored) {
      dropKeepingText(db, prefix);
      return;
    }
    const present = presentTriggers(db, prefix);
    if (present.length < all) {
      const kept = JSON.parse(read.get("event_log_triggers") ?? "[]") as KeptTrigger[];
      for (const t of kept) if (!present.some((p) => p.name === t.name)) db.exec(t.sql);
      forget.run();
    }
  });
  settle.immediate();
}

interface KeptTrigger {
  name: string;
  sql: string;
}

/**
 * With the prefix's event log off: drops the event triggers present, keeping their text in row
 * `event_log_triggers` (replacing any kept text of the same name). For the switch above, and for
 * the migrations: one that creates an event trigger runs this in its own transaction
 * (migrateSqlite's `afterEach`), so a prefix whose log is off never has one, not even between
 * the migration and the next process's settle. Does nothing before migration 0012 (no settings
 * table yet) or with the log on.
 */
export function keepEventLogOff(db: Database.Database, prefix: string): void {
  const settings = `${prefix}settings`;
  if (db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?").get(settings) === undefined) return;
  if (db.prepare(`SELECT value FROM ${settings} WHERE name = 'event_log'`).pluck().get() !== "off") return;
  dropKeepingText(db, prefix);
}

function dropKeepingText(db: Database.Database, prefix: string): void {
  const settings = `${prefix}settings`;
  const present = presentTriggers(db, prefix);
  if (present.length === 0) return;
  const keptText = db.prepare(`SELECT value FROM ${settings} WHERE name = 'event_log_triggers'`).pluck().get() as string | undefined;
  const kept = JSON.parse(keptText ?? "[]") as KeptTrigger[];
  db.prepare(`INSERT INTO ${settings} (name, value) VALUES ('event_log_triggers', ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value`).run(
    JSON.stringify([...kept.filter((k) => !present.some((t) => t.name === k.name)), ...present]),
  );
  for (const t of present) db.exec(`DROP TRIGGER ${t.name}`);
}

/** The prefix's event triggers that exist, with their text. */
function presentTriggers(db: Database.Database, prefix: string): KeptTrigger[] {
  return db
    .prepare<[string], KeptTrigger>(`SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' AND name IN (SELECT value FROM json_each(?))`)
    .all(JSON.stringify(EVENT_TRIGGERS.map((name) => `${prefix}${name}`)));
}
