/**
 * bench/pg-floor.ts' processing loop, which the side-by-side bench (the floors) and
 * bench/pg-contract-floor.ts (every step but the peers') time: it must complete every job exactly
 * once, and with `oneCompletionAtATime` never have two completion statements out at once (the
 * Worker's shape, which pg-contract-floor's steps are compared with).
 */
import pg from "pg";
import { afterAll, describe, expect, inject, it } from "vitest";
import { KEEPING, processAll } from "../../bench/pg-floor.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";

const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const schemas = new TestSchemas(url);

afterAll(() => schemas.dropAll());

/** A pool on a fresh schema holding the floor's table with `n` waiting jobs; counts completions in flight. */
async function floorPool(n: number): Promise<{ pool: pg.Pool; mostInFlight: () => number; completed: () => Promise<number> }> {
  const schema = schemas.create("floor");
  const pool = new pg.Pool({ connectionString: url, max: 6, options: `-c search_path=${schema}` });
  await pool.query(`CREATE SCHEMA IF NOT EXISTS ${pg.escapeIdentifier(schema)}`);
  await pool.query(KEEPING.schema);
  await pool.query("INSERT INTO floor_jobs (payload) SELECT jsonb_build_object('i', i) FROM generate_series(1, $1) AS i", [n]);
  let inFlight = 0;
  let most = 0;
  const query = pool.query.bind(pool) as (config: pg.QueryConfig) => Promise<pg.QueryResult>;
  (pool as unknown as { query: typeof query }).query = async (config: pg.QueryConfig) => {
    const completing = config.name === "floor-complete";
    if (completing) most = Math.max(most, ++inFlight);
    try {
      return await query(config);
    } finally {
      if (completing) inFlight--;
    }
  };
  return {
    pool,
    mostInFlight: () => most,
    completed: async () => {
      const { rows } = (await query({ text: "SELECT count(*) AS n FROM floor_jobs WHERE state = 'completed' AND finished_at IS NOT NULL" })) as pg.QueryResult<{
        n: string;
      }>;
      return Number(rows[0]!.n);
    },
  };
}

describe("pg-floor processing loop", () => {
  it("completes every job, one completion statement at a time when asked", async () => {
    const { pool, mostInFlight, completed } = await floorPool(1_234);
    try {
      await processAll(pool, KEEPING, 1_234, 3, 100, { oneCompletionAtATime: true });
      expect(await completed()).toBe(1_234);
      expect(mostInFlight()).toBe(1);
    } finally {
      await pool.end();
    }
  });

  it("completes every job when completions go out at once (the floors of the side-by-side bench)", async () => {
    const { pool, completed } = await floorPool(1_234);
    try {
      await processAll(pool, KEEPING, 1_234, 3, 100);
      expect(await completed()).toBe(1_234);
    } finally {
      await pool.end();
    }
  });
});
