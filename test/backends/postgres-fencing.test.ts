/**
 * Fencing on PostgreSQL across what a failover does (issue #19).
 *
 * Lease tokens after a failover to an asynchronous standby that never received a
 * claim (`pg-primary-switch-async`): the promoted server has the job as it was before the claim.
 * The test rolls the job's row back by hand instead of racing a real promotion. A per-job counter
 * then handed out the lost claim's token again, and the lost holder's completion passed under the
 * next holder's lease; tokens now fold in the server's time (NEXT_LEASE_TOKEN in backend.ts).
 *
 * The rescue after the server failed (../../src/backend/lease-hold.ts): a heartbeat's connection is
 * terminated under it (as a server going away does), the leases run out meanwhile, and the first
 * rescue takes neither; the live holder renews inside the hold, the gone one is rescued after it.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { PostgresBackend } from "../../src/backend/postgres/index.js";
import { FakeClock } from "../../src/core/clock.js";
import { A, B, claimOne, enqueueOne } from "../conformance/fixtures.js";
import { expectLostClaimFenced } from "../helpers/lost-claim.js";
import { postgresTestStores } from "../helpers/postgres-stores.js";
import { waitFor } from "../helpers/wait-for.js";

const stores = postgresTestStores();
const { admin } = stores;

async function open(options: { clock?: FakeClock; applicationName?: string } = {}): Promise<{ backend: PostgresBackend; schema: string }> {
  const backend = await stores.open(options);
  return { backend, schema: backend.schema };
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
    await expectLostClaimFenced(backend, id, async () => {
      const beforeClaim = await saveRow(schema, id);
      return () => rollBackRow(schema, id, beforeClaim);
    });
  });

  it("does the same for a laned claim (flow control: a job with a group)", async () => {
    const { backend, schema } = await open();
    const id = await enqueueOne(backend, { group: { key: "g", concurrency: 1 } });
    await expectLostClaimFenced(backend, id, async () => {
      const beforeClaim = await saveRow(schema, id);
      return () => rollBackRow(schema, id, beforeClaim);
    });
  });
});

describe("the rescue after the server failed (PostgreSQL)", () => {
  const LEASE_MS = 1_000;

  it("waits a lease after the server answers again: a live holder's heartbeat lands, a gone holder's job is rescued after", async () => {
    const app = `conveyor-hold-${randomBytes(4).toString("hex")}`;
    const clock = new FakeClock(Date.now());
    const { backend, schema } = await open({ clock, applicationName: app });
    const alive = await enqueueOne(backend);
    const gone = await enqueueOne(backend);
    const first = await claimOne(backend, { worker: A, leaseMs: LEASE_MS });
    const second = await claimOne(backend, { worker: B, leaseMs: LEASE_MS });
    const leaseOf = (job: string) => [first, second].find((c) => c.job.id === job)!.lease;

    // The failure: a heartbeat waits on the jobs' rows (locked here), and its connection is
    // terminated under it, as a server going away does.
    const locker = await admin.connect();
    try {
      await locker.query("BEGIN");
      await locker.query(`SELECT 1 FROM ${pg.escapeIdentifier(schema)}.jobs WHERE id = ANY ($1) FOR UPDATE`, [[alive, gone]]);
      const during = backend.heartbeat([leaseOf(alive), leaseOf(gone)], LEASE_MS);
      const settled = during.then(
        () => "answered",
        (error: unknown) => error,
      );
      await waitFor(
        async () => (await admin.query("SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", [app])).rowCount === 1,
        { timeoutMs: 30_000, description: "the heartbeat waiting on the locked rows" },
      );
      await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", [app]);
      expect(await settled).toMatchObject({ name: "StoreUnavailableError" });
    } finally {
      await locker.query("ROLLBACK");
      locker.release();
    }
    // Both leases ran out while the heartbeat could not land.
    clock.advance(LEASE_MS + 500);

    // The first rescue takes neither lease, although both are past expiry.
    expect(await backend.rescueExpired()).toEqual([]);
    clock.advance(LEASE_MS / 3);
    expect((await backend.heartbeat([leaseOf(alive)], LEASE_MS)).lost).toEqual([]);
    expect(await backend.rescueExpired()).toEqual([]);

    // One lease after the server answered, the hold is over: only the gone holder's job is taken back.
    clock.advance(LEASE_MS - LEASE_MS / 3);
    expect((await backend.rescueExpired()).map((r) => [r.id, r.state])).toEqual([[gone, "waiting"]]);
    expect(await backend.complete([{ lease: leaseOf(alive), result: "done once" }])).toEqual(["applied"]);
    expect(await backend.complete([{ lease: leaseOf(gone), result: "late" }])).toEqual(["stale"]);
  }, 60_000);
});
