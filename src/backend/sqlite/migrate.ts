/**
 * The SQLite schema: the numbered migrations next to this module (`migrations/0001_init.sql`, …),
 * applied synchronously when a backend opens the file. The build copies the folder to dist, so
 * source and compiled code read the same files.
 */
import type Database from "better-sqlite3";
import { ConveyorError } from "../../core/errors.js";
import { readMigrationFiles, SchemaTooNewError } from "../migration-files.js";

export interface Migration {
  version: number;
  file: string;
  sql: string;
}

/** Every SQLite migration in version order, `{{prefix}}` replaced by `prefix`. */
export function loadMigrations(prefix: string): Migration[] {
  return readMigrationFiles(new URL("./migrations/", import.meta.url), "SQLite", "sqlite/").map((m) => ({
    version: m.version,
    file: m.file,
    sql: m.text.replaceAll("{{prefix}}", prefix),
  }));
}

/**
 * Applies every migration the database lacks, each in its own IMMEDIATE transaction together
 * with its row in the migrations table, so concurrent starters apply each one exactly once.
 * Refuses a schema newer than this code (`SchemaTooNewError`, naming `description`).
 * `afterEach` runs in each migration's transaction after its SQL: for what a migration's SQL
 * cannot decide by itself (a prefix whose event log is off has the event triggers a migration
 * creates dropped again at once: keepEventLogOff).
 */
export function migrateSqlite(db: Database.Database, prefix: string, description: string, nowMs: () => number, afterEach: () => void = () => {}): void {
  const migrations = loadMigrations(prefix);
  const latest = migrations.at(-1)?.version ?? 0;
  const table = `${prefix}migrations`;
  const tooNew = (version: number) => new SchemaTooNewError(description, version, latest);

  // Common case, without taking the write lock: the schema is current.
  const exists = db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?").get(table);
  if (exists !== undefined) {
    const current = db.prepare(`SELECT coalesce(max(version), 0) FROM ${table}`).pluck().get() as number;
    if (current > latest) throw tooNew(current);
    if (current === latest) return;
  }

  const applyNext = db.transaction((): boolean => {
    db.exec(`CREATE TABLE IF NOT EXISTS ${table} (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`);
    const current = db.prepare(`SELECT coalesce(max(version), 0) FROM ${table}`).pluck().get() as number;
    if (current > latest) throw tooNew(current);
    const next = migrations.find((m) => m.version === current + 1);
    if (next === undefined) return false;
    try {
      db.exec(next.sql);
      afterEach();
    } catch (error) {
      throw new ConveyorError(`migration ${next.file} failed: ${(error as Error).message}`, { cause: error });
    }
    db.prepare(`INSERT INTO ${table} (version, applied_at) VALUES (?, ?)`).run(next.version, nowMs());
    return true;
  });
  while (applyNext.immediate());
}
