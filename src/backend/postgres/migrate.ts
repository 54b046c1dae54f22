/**
 * Schema migrations for the PostgreSQL backend: numbered SQL files in `migrations/`
 * (`0001_init.sql`, `0002_….sql`, …), each applied in its own transaction together with its row
 * in `<schema>.migrations`, under a transaction-level advisory lock on the schema.
 *
 * Many processes starting at once therefore apply each migration exactly once: they queue on the
 * lock, and each re-reads the version under it. A process whose code knows fewer migrations than
 * the database has refuses to run rather than misread a schema it does not know.
 */
import { readMigrationFiles, SchemaTooNewError, type MigrationFile } from "../migration-files.js";
import type { Pool, PoolClient } from "pg";
import { ConveyorError } from "../../core/errors.js";

/** One numbered migration, with `{{schema}}` already replaced. */
export interface Migration {
  version: number;
  file: string;
  sql: string;
}

export { SchemaOutdatedError, SchemaTooNewError } from "../migration-files.js";

let cachedFiles: MigrationFile[] | null = null;

/** The migration files next to this module, read once per process. */
function migrationFiles(): MigrationFile[] {
  cachedFiles ??= readMigrationFiles(new URL("./migrations/", import.meta.url), "PostgreSQL", "postgres/");
  return cachedFiles;
}

/** The migrations for `quotedSchema` (an already quoted identifier). */
export function loadMigrations(quotedSchema: string): Migration[] {
  return migrationFiles().map((m) => ({ version: m.version, file: m.file, sql: m.text.replaceAll("{{schema}}", quotedSchema) }));
}

/** The newest migration this code knows. */
export function latestVersion(): number {
  return migrationFiles().at(-1)?.version ?? 0;
}

/**
 * The schema's version: 0 when the schema or its migrations table does not exist. One query,
 * no lock; for the "is the schema current?" check every backend makes before its first call.
 */
export async function schemaVersion(pool: Pool, quotedSchema: string): Promise<number> {
  const { rows } = await pool.query<{ exists: boolean }>(`SELECT to_regclass($1) IS NOT NULL AS exists`, [`${quotedSchema}.migrations`]);
  if (!rows[0]?.exists) return 0;
  const result = await pool.query<{ version: number | null }>(`SELECT max(version) AS version FROM ${quotedSchema}.migrations`);
  return result.rows[0]?.version ?? 0;
}

/**
 * Applies every migration the schema lacks, one transaction each. Returns the versions this call
 * applied (empty when the schema was current, or another process applied them meanwhile).
 */
export async function migrate(pool: Pool, schema: string, quotedSchema: string): Promise<number[]> {
  const migrations = loadMigrations(quotedSchema);
  const latest = migrations.at(-1)?.version ?? 0;

  // Common case, without the lock: the schema is current.
  const current = await schemaVersion(pool, quotedSchema);
  if (current > latest) throw new SchemaTooNewError(schema, current, latest);
  if (current === latest) return [];

  const applied: number[] = [];
  for (;;) {
    const client = await pool.connect();
    // A connection dying between the migration's queries must fail them, not end the process.
    const onError = () => undefined;
    client.on("error", onError);
    let failure: Error | undefined;
    try {
      const next = await applyNext(client, schema, quotedSchema, migrations, latest);
      if (next === null) return applied;
      applied.push(next);
    } catch (error) {
      failure = error as Error;
      throw error;
    } finally {
      client.off("error", onError);
      // A client whose transaction failed half-way is discarded rather than reused.
      client.release(failure !== undefined && !(failure instanceof ConveyorError) ? failure : undefined);
    }
  }
}

/** One transaction: lock, read the version, apply the next migration if any. */
async function applyNext(client: PoolClient, schema: string, quotedSchema: string, migrations: readonly Migration[], latest: number): Promise<number | null> {
  await client.query("BEGIN");
  try {
    // Serialises migrators of this schema (other schemas migrate in parallel). Transaction-level:
    // released by COMMIT or ROLLBACK, never leaked by a crashed process.
    await client.query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [`conveyor:migrate:${schema}`]);
    // Checked first so a role without CREATE on the database can run a schema its DBA made.
    const { rows: found } = await client.query<{ found: boolean }>("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AS found", [schema]);
    if (!found[0]?.found) await client.query(`CREATE SCHEMA ${quotedSchema}`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${quotedSchema}.migrations (
         version    integer     PRIMARY KEY,
         file       text        NOT NULL,
         applied_at timestamptz NOT NULL DEFAULT now()
       )`,
    );
    const { rows } = await client.query<{ version: number | null }>(`SELECT max(version) AS version FROM ${quotedSchema}.migrations`);
    const current = rows[0]?.version ?? 0;
    if (current > latest) throw new SchemaTooNewError(schema, current, latest);
    const next = migrations.find((m) => m.version === current + 1);
    if (next === undefined) {
      await client.query("COMMIT");
      return null;
    }
    try {
      await client.query(next.sql);
    } catch (error) {
      throw new ConveyorError(`PostgreSQL migration ${next.file} failed in schema "${schema}": ${(error as Error).message}`, { cause: error });
    }
    await client.query(`INSERT INTO ${quotedSchema}.migrations (version, file) VALUES ($1, $2)`, [next.version, next.file]);
    await client.query("COMMIT");
    return next.version;
  } catch (error) {
    await client.query("ROLLBACK").catch(() => undefined);
    throw error;
  }
}
