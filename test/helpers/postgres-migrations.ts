/**
 * A schema as an older Conveyor left it: every PostgreSQL migration before the one whose file
 * name contains `before` applied by hand and recorded, so a test can store jobs the old way and
 * then let a backend's migrate() run the rest.
 */
import pg from "pg";
import { expect } from "vitest";
import { loadMigrations } from "../../src/backend/postgres/migrate.js";

export async function migrateUpTo(admin: pg.Pool, schema: string, before: string): Promise<void> {
  const quoted = pg.escapeIdentifier(schema);
  const migrations = loadMigrations(quoted);
  const next = migrations.findIndex((m) => m.file.includes(before));
  expect(next).toBeGreaterThan(0);
  await admin.query(`CREATE SCHEMA ${quoted}`);
  await admin.query(`CREATE TABLE ${quoted}.migrations (version integer PRIMARY KEY, file text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
  for (const m of migrations.slice(0, next)) {
    await admin.query(m.sql);
    await admin.query(`INSERT INTO ${quoted}.migrations (version, file) VALUES ($1, $2)`, [m.version, m.file]);
  }
}
