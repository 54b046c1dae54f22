/**
 * A SQLite file as an older Conveyor left it: every migration before the one whose file name
 * contains `before` applied by hand and recorded, so a test can store jobs the old way and then
 * let a backend run the rest (the SQLite side of postgres-migrations.ts).
 */
import Database from "better-sqlite3";
import { expect } from "vitest";
import { loadMigrations } from "../../src/backend/sqlite/migrate.js";

/** The file at `path` migrated up to just before `before` (default prefix), left open in WAL mode for the caller to fill and close. */
export function sqliteMigratedUpTo(path: string, before: string): Database.Database {
  const migrations = loadMigrations("conveyor_");
  const next = migrations.findIndex((m) => m.file.includes(before));
  expect(next, `the migration named ${before}`).toBeGreaterThan(0);
  const db = new Database(path);
  db.pragma("journal_mode = WAL");
  db.exec("CREATE TABLE conveyor_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT");
  for (const m of migrations.slice(0, next)) {
    db.exec(m.sql);
    db.prepare("INSERT INTO conveyor_migrations (version, applied_at) VALUES (?, 0)").run(m.version);
  }
  return db;
}
