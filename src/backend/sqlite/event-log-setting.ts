/**
 * The event log switch of a SQLite table prefix (SqliteBackendOptions.eventLog, migration
 * 0012_sqlite_event_log_switch): the setting is recorded once per prefix and every process on it
 * must agree; with it off the event triggers are dropped (their text kept in the settings table),
 * with it on they are recreated from that text if an earlier process had dropped them. The rules
 * a caller sees (the option, the refusals) are the ones every store shares (../event-log-switch.ts).
 */
import type Database from "better-sqlite3";
import { eventLogMismatchError } from "../event-log-switch.js";

/** The triggers of migration 0004 that write `events` rows. */
const EVENT_TRIGGERS = ["events_added", "events_state", "events_progress"] as const;

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
  const keep = db.prepare<[string]>(
    `INSERT INTO ${settings} (name, value) VALUES ('event_log_triggers', ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
  );
  const forget = db.prepare(`DELETE FROM ${settings} WHERE name = 'event_log_triggers'`);
  const names = EVENT_TRIGGERS.map((name) => `${prefix}${name}`);
  const existing = db.prepare<[string], { name: string; sql: string }>(
    `SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' AND name IN (SELECT value FROM json_each(?))`,
  );
  const matches = (stored: boolean, present: number) => (stored ? present === names.length || read.get("event_log_triggers") === undefined : present === 0);
  // Common case, without the write lock: the setting is recorded and the triggers match it.
  const recorded = read.get("event_log");
  if (recorded !== undefined) {
    const stored = recorded === "on";
    if (stored !== wanted) throw eventLogMismatchError(where, EVENT_LOG_SCOPE, stored, wanted);
    if (matches(stored, existing.all(JSON.stringify(names)).length)) return;
  }
  const settle = db.transaction(() => {
    record.run(wanted ? "on" : "off");
    const stored = read.get("event_log") === "on";
    if (stored !== wanted) throw eventLogMismatchError(where, EVENT_LOG_SCOPE, stored, wanted);
    const present = existing.all(JSON.stringify(names));
    const kept = JSON.parse(read.get("event_log_triggers") ?? "[]") as Array<{ name: string; sql: string }>;
    if (!stored && present.length > 0) {
      // The text of every trigger dropped, beside any kept before, to recreate them as they were.
      keep.run(JSON.stringify([...kept.filter((k) => !present.some((t) => t.name === k.name)), ...present]));
      for (const t of present) db.exec(`DROP TRIGGER ${t.name}`);
    } else if (stored && present.length < names.length) {
      for (const t of kept) if (!present.some((p) => p.name === t.name)) db.exec(t.sql);
      forget.run();
    }
  });
  settle.immediate();
}
