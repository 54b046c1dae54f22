/**
 * bench/pg-retain.ts's fill must leave what a Worker leaves: every one of the `n` jobs it
 * processes completed and kept, none left active (holding a lease) or still marked buffered,
 * whichever loop claimed another loop's jobs.
 */
import pg from "pg";
import { afterAll, describe, expect, inject, it } from "vitest";
import { fillProcessed } from "../../bench/pg-retain.js";
import { PostgresBackend } from "../../src/backend/postgres/backend.js";
import { silentLogger } from "../../src/index.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";

const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const schemas = new TestSchemas(url);

afterAll(() => schemas.dropAll());

describe("pg-retain fill", () => {
  it("processes and keeps exactly n jobs through the store's claim, buffer marks and completion", async () => {
    const schema = schemas.create("retain");
    const open = () => new PostgresBackend({ connectionString: url, schema, logger: silentLogger, poolSize: 2 });
    const setup = open();
    await setup.migrate();
    try {
      await fillProcessed(open, 2_345, 3);
      const [stats] = await setup.stats("bench");
      expect(stats!.counts.completed).toBe(2_345);
      expect(stats!.counts.active).toBe(0);
      const admin = new pg.Client({ connectionString: url });
      await admin.connect();
      try {
        const { rows } = await admin.query<{ n: string }>(`SELECT count(*) AS n FROM ${pg.escapeIdentifier(schema)}.jobs WHERE excused_token IS NOT NULL`);
        expect(Number(rows[0]!.n)).toBe(0);
      } finally {
        await admin.end();
      }
    } finally {
      await setup.close();
    }
  });

  it("refuses a size that is not a positive integer", async () => {
    const open = () => new PostgresBackend({ connectionString: url, schema: "unused", logger: silentLogger });
    await expect(fillProcessed(open, 0, 2)).rejects.toThrow(/--retained must be a positive integer/);
    await expect(fillProcessed(open, 10, 0)).rejects.toThrow(/--fillers must be a positive integer/);
  });
});
