/**
 * Lease tokens on PostgreSQL after a failover to an asynchronous standby that never received a
 * claim (`pg-primary-switch-async`): the promoted server has the job as it was before the claim.
 * The test rolls the job's row back by hand instead of racing a real promotion. A per-job counter
 * then handed out the lost claim's token again, and the lost holder's completion passed under the
 * next holder's lease; tokens now fold in the server's time (NEXT_LEASE_TOKEN in backend.ts).
 */
import pg from "pg";
import { afterAll, afterEach, describe, expect, inject, it } from "vitest";
import { PostgresBackend } from "../../src/backend/postgres/index.js";
import { silentLogger } from "../../src/core/logger.js";
import { A, B, claim, claimOne, enqueueOne, mustGet } from "../conformance/fixtures.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";

const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const schemas = new TestSchemas(url);
const admin = new pg.Pool({ connectionString: url, max: 2 });
const opened: PostgresBackend[] = [];

afterEach(async () => {
  for (const b of opened.splice(0)) await b.close();
  await schemas.dropAll();
});
afterAll(() => admin.end());

async function open(): Promise<{ backend: PostgresBackend; schema: string }> {
  const schema = schemas.create();
  const backend = new PostgresBackend({ connectionString: url, schema, logger: silentLogger });
  opened.push(backend);
  await backend.migrate();
  return { backend, schema };
}

/** The job's row as it is now, to put back later. */
async function saveRow(schema: string, id: string): Promise<unknown> {
  const { rows } = await admin.query<{ row: unknown }>(`SELECT to_jsonb(j) AS row FROM ${pg.escapeIdentifier(schema)}.jobs j WHERE j.id = $1`, [id]);
  return rows[0]!.row;
}

/** Puts every column of the job's row back as `saved` holds it: what a standby that missed the writes since has. */
async function rollBackRow(schema: string, id: string, saved: unknown): Promise<void> {
  const { rows } = await admin.query<{ c: string }>(
    "SELECT column_name AS c FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'jobs' AND column_name NOT IN ('id', 'seq')",
    [schema],
  );
  const s = pg.escapeIdentifier(schema);
  const columns = rows.map((r) => pg.escapeIdentifier(r.c));
  await admin.query(
    `UPDATE ${s}.jobs j SET (${columns.join(", ")}) = (SELECT ${columns.map((c) => `r.${c}`).join(", ")} FROM jsonb_populate_record(NULL::${s}.jobs, $2::jsonb) r) WHERE j.id = $1`,
    [id, JSON.stringify(saved)],
  );
}

describe("lease tokens after a failover lost a claim (PostgreSQL)", () => {
  it("never hands out a lost claim's token again: the lost holder's completion is refused", async () => {
    const { backend, schema } = await open();
    const id = await enqueueOne(backend, { attempts: 5 });
    const beforeClaim = await saveRow(schema, id);
    const lost = await claimOne(backend, { worker: A, leaseMs: 60_000 });
    await rollBackRow(schema, id, beforeClaim);
    expect(await mustGet(backend, id)).toMatchObject({ state: "waiting", attempt: 0 });

    const next = await claimOne(backend, { worker: B, leaseMs: 60_000 });
    expect(next.job.attempt).toBe(1);
    expect(next.lease.token, "the claim after the lost one hands out a token the lost holder does not hold").not.toBe(lost.lease.token);
    expect(next.lease.token).toBeGreaterThan(lost.lease.token);
    expect(Number.isSafeInteger(next.lease.token)).toBe(true);
    expect(await backend.complete([{ lease: lost.lease, result: "from the lost claim" }])).toEqual(["stale"]);
    expect(await backend.complete([{ lease: next.lease, result: "from the second claim" }])).toEqual(["applied"]);
    expect(await mustGet(backend, id)).toMatchObject({ state: "completed", result: "from the second claim" });
  });

  it("does the same for a laned claim (flow control: a job with a group)", async () => {
    const { backend, schema } = await open();
    const id = await enqueueOne(backend, { group: { key: "g", concurrency: 1 } });
    const beforeClaim = await saveRow(schema, id);
    const [lost] = await claim(backend, { worker: A, leaseMs: 60_000 });
    expect(lost!.job.id).toBe(id);
    await rollBackRow(schema, id, beforeClaim);
    const [next] = await claim(backend, { worker: B, leaseMs: 60_000 });
    expect(next!.lease.token).toBeGreaterThan(lost!.lease.token);
    expect(await backend.complete([{ lease: lost!.lease, result: "lost" }])).toEqual(["stale"]);
  });
});
