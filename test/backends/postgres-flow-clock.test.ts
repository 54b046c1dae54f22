/**
 * The clock of a rate-limited claim on PostgreSQL with the real database clock (the conformance
 * suite injects a FakeClock, under which no claim ever waits on another's lock). Claimers of a
 * limited queue queue on its flow row lock (flow-lock.sql); a claim that waited there must count
 * the window, record its starts and say when the next slot opens from the time it got the lock,
 * not from when its statement began. Reading the clock before the wait made a contended slot
 * open late by the wait, capacity a strict sliding window never gets back (bench/flowctl.ts
 * measures it as slot lateness; docs/flow-control.md). No timed assertions: the
 * test holds the lock until the database clock has moved past the waiting statement's start,
 * and compares database clock readings.
 */
import pg from "pg";
import { describe, expect, it } from "vitest";
import type { ClaimThrottle } from "../../src/backend/contract.js";
import { retryInMsFromNow } from "../../src/backend/postgres/flow.js";
import { PostgresBackend } from "../../src/backend/postgres/index.js";
import { normalizeQueueLimits } from "../../src/core/flow.js";
import { LEASE_MS, NAME, QUEUE, enqueueMany, worker } from "../conformance/fixtures.js";
import { postgresTestStores } from "../helpers/postgres-stores.js";
import { waitFor } from "../helpers/wait-for.js";

const stores = postgresTestStores({}, { adminConnections: 4 });
const { admin } = stores;

/** How long the lock is held past the waiting claim's statement start (database clock, ms). */
const LOCK_WAIT_MS = 200;

const backend = () => stores.open();

async function dbNow(client: pg.PoolClient | pg.Pool): Promise<number> {
  const { rows } = await client.query<{ now: string }>("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now");
  return Number(rows[0]!.now);
}

/**
 * Runs `claim` while another transaction holds the queue's flow row lock, releasing it once the
 * claim's statement has waited on it for LOCK_WAIT_MS of database time. Returns the claim's
 * result and the database time the lock was released at.
 */
async function claimBehindLock<T>(b: PostgresBackend, claim: () => Promise<T>): Promise<{ result: T; releasedAt: number }> {
  const holder = await admin.connect();
  try {
    await holder.query("BEGIN");
    await holder.query(`SELECT queue FROM "${b.schema}".flow_queues WHERE queue = $1 FOR UPDATE`, [QUEUE]);
    const pending = claim();
    // The claim's flow-lock statement, waiting on our lock (the only session of this test
    // database blocked by ours), and when that statement began.
    const started = await waitFor(async () => {
      const { rows } = await holder.query<{ started: string }>(
        `SELECT floor(extract(epoch FROM query_start) * 1000)::bigint AS started FROM pg_stat_activity
         WHERE pg_backend_pid() = ANY (pg_blocking_pids(pid))`,
      );
      return rows[0] === undefined ? null : Number(rows[0].started);
    });
    await waitFor(async () => (await dbNow(holder)) >= started + LOCK_WAIT_MS, { intervalMs: 5 });
    const releasedAt = await dbNow(holder);
    await holder.query("COMMIT");
    return { result: await pending, releasedAt };
  } finally {
    holder.release();
  }
}

describe("PostgreSQL rate limits under the real clock", () => {
  it("a claim that waited on the flow lock starts its jobs at the time it got the lock, not when its statement began", async () => {
    const b = await backend();
    await enqueueMany(b, 3);
    await b.setQueueLimits(QUEUE, normalizeQueueLimits({ rate: { max: 10, durationMs: 60_000 } }));
    const { result: jobs, releasedAt } = await claimBehindLock(b, () =>
      b.claim({ queues: [QUEUE], names: [NAME], worker: worker("A"), limit: 3, leaseMs: LEASE_MS }),
    );
    expect(jobs).toHaveLength(3);
    for (const job of await b.list({ queue: QUEUE }, { limit: 10 })) expect(job.startedAt).toBeGreaterThanOrEqual(releasedAt);
  });

  it("a claim that waited on the flow lock reports the next slot from the time it got the lock", async () => {
    const b = await backend();
    await enqueueMany(b, 2);
    await b.setQueueLimits(QUEUE, normalizeQueueLimits({ rate: { max: 1, durationMs: 60_000 } }));
    await b.claim({ queues: [QUEUE], names: [NAME], worker: worker("A"), limit: 1, leaseMs: LEASE_MS });
    const firstStart = (await b.list({ queue: QUEUE }, { limit: 10 })).find((j) => j.startedAt !== null)!.startedAt!;
    const throttles: ClaimThrottle[] = [];
    const { result: jobs, releasedAt } = await claimBehindLock(b, () =>
      b.claim({ queues: [QUEUE], names: [NAME], worker: worker("B"), limit: 1, leaseMs: LEASE_MS, onThrottle: (t) => throttles.push(t) }),
    );
    expect(jobs).toEqual([]);
    expect(throttles).toHaveLength(1);
    // The slot opens when the first start leaves the window; counted from before the lock wait
    // it would be reported LOCK_WAIT_MS late.
    expect(throttles[0]!.retryInMs).toBeLessThanOrEqual(firstStart + 60_000 - releasedAt);
    expect(throttles[0]!.retryInMs).toBeGreaterThan(0);
  });

  it("retryInMs is counted from when the claim reports it, not from the clock reading it was computed at", () => {
    expect(retryInMsFromNow(600, 1_000, 1_250)).toBe(350);
    expect(retryInMsFromNow(600, 1_000, 1_250.9)).toBe(350);
    expect(retryInMsFromNow(600, 1_000, 2_000)).toBe(1);
    expect(retryInMsFromNow(null, 1_000, 1_250)).toBeNull();
    // An injected clock does not move by itself: nothing to take off.
    expect(retryInMsFromNow(600, null, 1_250)).toBe(600);
  });
});
