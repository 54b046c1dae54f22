/**
 * The stores the worker runtime tests run on: SQLite in memory, PostgreSQL (a schema of its own
 * on the throwaway server of test/setup/postgres.ts) and Redis (a key prefix of its own on the
 * throwaway server of test/setup/redis.ts). Use with `describe.each(RUNTIME_BACKENDS)` and call
 * `cleanupRuntimeBackends()` in an afterAll, after the stores are closed.
 *
 * PostgreSQL reuses one migrated schema per test file, emptied (TRUNCATE) for each new store:
 * migrating a fresh schema per test cost about a second each.
 */
import pg from "pg";
import { inject } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { PostgresBackend } from "../../src/backend/postgres/backend.js";
import { RedisBackend } from "../../src/backend/redis/backend.js";
import type { Clock } from "../../src/core/clock.js";
import { silentLogger } from "../../src/core/logger.js";
import { createTestBackend } from "../../src/testing/index.js";
import { requireDatabase, TestSchemas } from "./postgres.js";
import { deletePrefix, requireRedis, testPrefix } from "./redis.js";

export interface RuntimeBackend {
  readonly name: "sqlite" | "postgres" | "redis";
  /** A fresh, empty, migrated store (on `clock` when given). */
  open(options?: { clock?: Clock }): Promise<Backend>;
}

let schemas: TestSchemas | null = null;
let schema: string | null = null;
let admin: pg.Pool | null = null;
const prefixes: string[] = [];

/** Empties every table of the file's schema but its migration record. */
async function truncateSchema(pool: pg.Pool, name: string): Promise<void> {
  const { rows } = await pool.query<{ tablename: string }>("SELECT tablename FROM pg_tables WHERE schemaname = $1 AND tablename <> 'migrations'", [name]);
  if (rows.length === 0) return;
  const tables = rows.map((r) => `${pg.escapeIdentifier(name)}.${pg.escapeIdentifier(r.tablename)}`).join(", ");
  await pool.query(`TRUNCATE ${tables} RESTART IDENTITY CASCADE`);
}

export const RUNTIME_BACKENDS: readonly RuntimeBackend[] = [
  {
    name: "sqlite",
    open: async (options = {}) => createTestBackend(options),
  },
  {
    name: "postgres",
    async open(options = {}) {
      const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
      schemas ??= new TestSchemas(url);
      admin ??= new pg.Pool({ connectionString: url, max: 1 });
      const fresh = schema === null;
      schema ??= schemas.create("rt");
      if (!fresh) await truncateSchema(admin, schema);
      const backend = new PostgresBackend({ connectionString: url, schema, logger: silentLogger, poolSize: 4, ...options });
      await backend.migrate();
      return backend;
    },
  },
  {
    name: "redis",
    async open(options = {}) {
      const url = requireRedis(inject("redisUrl"), inject("redisUnavailable"));
      const prefix = testPrefix("rt");
      prefixes.push(prefix);
      const backend = new RedisBackend({ connection: url, prefix, logger: silentLogger, ...options });
      await backend.migrate();
      return backend;
    },
  },
];

/** Drops the PostgreSQL schemas and Redis keys of the stores opened so far (close them first). */
export async function cleanupRuntimeBackends(): Promise<void> {
  await admin?.end();
  admin = null;
  schema = null;
  await schemas?.dropAll();
  const url = inject("redisUrl");
  for (const prefix of prefixes.splice(0)) await deletePrefix(url, prefix);
}
