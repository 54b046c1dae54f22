/**
 * bench/postgres.ts' `Databases.dropIdle`, which the side-by-side bench runs after every
 * measurement: it must drop the measurement's databases once nothing is connected to them, and
 * leave one still in use to `dropAll` (FORCE, at the end of the run) instead of terminating the
 * connection, which a pool still closing its idle clients reported as an unhandled 'error'.
 */
import pg from "pg";
import { describe, expect, inject, it, vi } from "vitest";
import { Databases } from "../../bench/postgres.js";
import { requireDatabase } from "../helpers/postgres.js";

const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));

async function exists(name: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query("SELECT 1 FROM pg_database WHERE datname = $1", [name]);
    return rows.length === 1;
  } finally {
    await client.end();
  }
}

const nameOf = (databaseUrl: string) => new URL(databaseUrl).pathname.slice(1);

describe("Databases.dropIdle (bench/postgres.ts)", () => {
  it("drops a database nothing uses, and sets one in use aside for dropAll", async () => {
    const dbs = new Databases(url);
    const unused = await dbs.create("unused");
    const held = await dbs.create("held");
    const holder = new pg.Client({ connectionString: held });
    await holder.connect();
    const stderr = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      await dbs.dropIdle();
      expect(stderr.mock.calls).toEqual([[`bench: database ${nameOf(held)} is still in use after its measurement; dropped at the end of the run`]]);
      expect(await exists(nameOf(unused))).toBe(false);
      // Still connected: not dropped, not terminated; set aside, not tried again, for dropAll.
      expect(await exists(nameOf(held))).toBe(true);
      expect((await holder.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
    } finally {
      stderr.mockRestore();
      await holder.end();
    }
    await dbs.dropIdle();
    expect(await exists(nameOf(held))).toBe(true);
    await dbs.dropAll();
    expect(await exists(nameOf(held))).toBe(false);
  });

  it("drops the database of a pool that has just ended, with no error on the pool", async () => {
    const dbs = new Databases(url);
    const made = await dbs.create("pool");
    const pool = new pg.Pool({ connectionString: made, max: 4 });
    const errors: unknown[] = [];
    pool.on("error", (error) => errors.push(error));
    await Promise.all([1, 2, 3, 4].map(() => pool.query("SELECT pg_sleep(0.01)")));
    await pool.end();
    await dbs.dropIdle();
    expect(await exists(nameOf(made))).toBe(false);
    expect(errors).toEqual([]);
  });
});
