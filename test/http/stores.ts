/**
 * The stores the HTTP tests run on: SQLite always, PostgreSQL and Redis when their servers are
 * available (vitest globalSetup), each case saying why it is skipped otherwise. Call once per test
 * file, at its top level: it registers the cleanup of every schema, prefix and file it made.
 */
import { afterAll, inject } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { PostgresBackend } from "../../src/backend/postgres/backend.js";
import { RedisBackend } from "../../src/backend/redis/backend.js";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { silentLogger } from "../../src/index.js";
import { TestSchemas } from "../helpers/postgres.js";
import { deletePrefix, testPrefix } from "../helpers/redis.js";
import type { TempDirs } from "../helpers/temp.js";

export interface StoreCase {
  name: string;
  /** Why the store is not available here, or "". */
  unavailable: string;
  /** A fresh, migrated, isolated store. */
  make(): Promise<Backend>;
}

export function storeCases(temp: TempDirs, label: string): StoreCase[] {
  const postgresUrl = inject("postgresUrl");
  const redisUrl = inject("redisUrl");
  const schemas = postgresUrl ? new TestSchemas(postgresUrl) : null;
  const prefixes: string[] = [];
  afterAll(async () => {
    await schemas?.dropAll();
    if (redisUrl) for (const p of prefixes) await deletePrefix(redisUrl, p);
  });
  return [
    { name: "sqlite", unavailable: "", make: async () => new SqliteBackend({ path: await temp.file("jobs.db") }) },
    {
      name: "postgres",
      unavailable: postgresUrl ? "" : inject("postgresUnavailable"),
      make: async () => {
        const b = new PostgresBackend({ connectionString: postgresUrl, schema: schemas!.create(label), logger: silentLogger, poolSize: 4 });
        await b.migrate();
        return b;
      },
    },
    {
      name: "redis",
      unavailable: redisUrl ? "" : inject("redisUnavailable"),
      make: async () => {
        const prefix = testPrefix(label);
        prefixes.push(prefix);
        const b = new RedisBackend({ connection: redisUrl, prefix, logger: silentLogger });
        await b.migrate();
        return b;
      },
    },
  ];
}
