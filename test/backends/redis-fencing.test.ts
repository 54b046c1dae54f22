/**
 * Fencing on Redis across what a failover does to the data (issue #19), on a real single server:
 *
 * - A promotion that loses a claim (asynchronous replication: the replica never received it) rolls
 *   the job back to before the claim. The test rolls the queue's keys back by hand (DUMP before the
 *   claim, RESTORE after it) instead of racing a real failover. A per-job counter then handed out
 *   the lost claim's token again, and the lost holder's completion was applied under the next
 *   holder's lease (the 10-minute Sentinel run, seed 2705). Tokens now fold in Redis' time.
 * - A store outage must not make leases expire (lease-hold.ts): the server is SIGKILLed with a
 *   heartbeat on the wire and restarted on its append-only file after the leases ran out; the
 *   holder's next heartbeat lands inside the hold, and only a holder that is really gone is
 *   rescued, after the hold (the 10-minute cluster run, seed 2701: 3 jobs ran twice).
 */
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { LeaseHoldWatch } from "../../src/backend/lease-hold.js";
import { RedisBackend } from "../../src/backend/redis/backend.js";
import { FakeClock } from "../../src/core/clock.js";
import { silentLogger } from "../../src/core/logger.js";
import { A, B, claimOne, enqueueOne, mustGet } from "../conformance/fixtures.js";
import { expectLostClaimFenced } from "../helpers/lost-claim.js";
import { findRedisServer, startThrowawayRedis, testPrefix, type ThrowawayRedis } from "../helpers/redis.js";

if (findRedisServer() === null) throw new Error("no redis-server for the Redis fencing tests: install redis-server");

const LEASE_MS = 1_000;

let server: ThrowawayRedis;
const opened: Backend[] = [];
const clients: Redis[] = [];
beforeAll(async () => {
  // An append-only file fsynced before every reply: a restart keeps every acknowledged write.
  server = await startThrowawayRedis({ persistence: "always" });
}, 60_000);
afterAll(async () => {
  await Promise.allSettled(opened.map((b) => b.close()));
  for (const c of clients) c.disconnect();
  await server?.stop();
}, 60_000);

async function open(prefix: string, clock?: FakeClock): Promise<Backend> {
  const backend = new RedisBackend({ connection: server.url, prefix, logger: silentLogger, ...(clock ? { clock } : {}) });
  opened.push(backend);
  await backend.migrate();
  return backend;
}

function admin(): Redis {
  const client = new Redis(server.url, { maxRetriesPerRequest: 1 });
  clients.push(client);
  return client;
}

/** Every key under `prefix`, serialized (DUMP), with its time to live. */
async function snapshot(redis: Redis, prefix: string): Promise<Map<string, { value: Buffer; ttl: number }>> {
  const saved = new Map<string, { value: Buffer; ttl: number }>();
  for await (const keys of redis.scanStream({ match: `${prefix}:*`, count: 1000 }) as AsyncIterable<string[]>) {
    for (const key of keys) {
      const [value, ttl] = await Promise.all([redis.dumpBuffer(key), redis.pttl(key)]);
      if (value !== null) saved.set(key, { value, ttl });
    }
  }
  return saved;
}

/** Puts the keys under `prefix` back as `saved` holds them: what a promoted replica that missed the writes since has. */
async function rollBack(redis: Redis, prefix: string, saved: Map<string, { value: Buffer; ttl: number }>): Promise<void> {
  for await (const keys of redis.scanStream({ match: `${prefix}:*`, count: 1000 }) as AsyncIterable<string[]>) {
    if (keys.length > 0) await redis.del(...keys);
  }
  for (const [key, { value, ttl }] of saved) await redis.restore(key, ttl > 0 ? ttl : 0, value);
}

describe("lease tokens after a failover lost a claim", () => {
  it("never hands out a lost claim's token again: the lost holder's completion is refused", async () => {
    const prefix = testPrefix("fence");
    const backend = await open(prefix);
    const redis = admin();
    const id = await enqueueOne(backend, { attempts: 5 });
    // A claim before the snapshot, so the job has a token to count on from.
    const earlier = await claimOne(backend, { worker: A, leaseMs: 60_000 });
    expect(await backend.release([earlier.lease])).toEqual(["applied"]);

    // The promotion: the claim never reached the replica that is the primary now.
    await expectLostClaimFenced(backend, id, async () => {
      const beforeClaim = await snapshot(redis, prefix);
      return () => rollBack(redis, prefix, beforeClaim);
    });
  });
});

describe("the rescue after a store outage", () => {
  it.each([
    { outage: "a heartbeat on the wire when Redis dies", heartbeatOnWire: true },
    // As behind Sentinel: the connection closes and comes back to a server that may have lost renewals.
    { outage: "nothing in flight when Redis dies (only the connection's close tells)", heartbeatOnWire: false },
  ])(
    "waits a lease after Redis answers again ($outage): a live holder's heartbeat lands, a gone holder's job is rescued after",
    async ({ heartbeatOnWire }) => {
      const prefix = testPrefix("outage");
      const clock = new FakeClock(Date.now());
      // One process holds both jobs and runs the rescue, as a worker with maintenance does.
      const backend = await open(prefix, clock);
      const alive = await enqueueOne(backend);
      const gone = await enqueueOne(backend);
      const first = await claimOne(backend, { worker: A, leaseMs: LEASE_MS });
      const second = await claimOne(backend, { worker: B, leaseMs: LEASE_MS });
      const leaseOf = (job: string) => [first, second].find((c) => c.job.id === job)!.lease;

      // The outage: Redis stops answering with a heartbeat on the wire, then dies (SIGKILL). The
      // heartbeat fails with the connection (or, had it slipped in before the stop, renewed nothing
      // the clock below does not run past): either way the backend saw its connection close before
      // any command after the restart is answered, which is all the hold needs.
      if (heartbeatOnWire) {
        server.freeze();
        const during = backend.heartbeat([leaseOf(alive), leaseOf(gone)], LEASE_MS).then(
          () => "answered",
          () => "failed",
        );
        await server.kill();
        expect(["answered", "failed"]).toContain(await during);
      } else {
        await server.kill();
      }
      // Both leases run out while Redis is down.
      clock.advance(LEASE_MS + 500);
      await server.start();

      // The first rescue once Redis answers again takes neither lease, although both are past expiry.
      expect(await backend.rescueExpired()).toEqual([]);
      // The live holder renews inside the hold (its next heartbeat, a third of a lease later); the
      // other holder never comes back.
      clock.advance(LEASE_MS / 3);
      expect((await backend.heartbeat([leaseOf(alive)], LEASE_MS)).lost).toEqual([]);
      expect(await backend.rescueExpired()).toEqual([]);

      // One lease after Redis answered, the hold is over: only the gone holder's job is taken back.
      clock.advance(LEASE_MS - LEASE_MS / 3);
      const rescued = await backend.rescueExpired();
      expect(rescued.map((r) => [r.id, r.state])).toEqual([[gone, "waiting"]]);
      expect(await backend.complete([{ lease: leaseOf(alive), result: "done once" }])).toEqual(["applied"]);
      expect(await backend.complete([{ lease: leaseOf(gone), result: "late" }])).toEqual(["stale"]);
      expect(await mustGet(backend, alive)).toMatchObject({ state: "completed", result: "done once", attempt: 1 });
      expect(await mustGet(backend, gone)).toMatchObject({ state: "waiting", attempt: 1 });
    },
    60_000,
  );

  it("holds nothing in a process that saw no failure: leases past expiry are rescued at once", async () => {
    const prefix = testPrefix("calm");
    const clock = new FakeClock(Date.now());
    const backend = await open(prefix, clock);
    const id = await enqueueOne(backend);
    await claimOne(backend, { worker: A, leaseMs: LEASE_MS });
    clock.advance(LEASE_MS + 1);
    expect((await backend.rescueExpired()).map((r) => r.id)).toEqual([id]);
  });
});

describe("LeaseHoldWatch", () => {
  it("holds a scope while it fails and for the longest lease after it answers again; other scopes are free", () => {
    let now = 1_000;
    const watch = new LeaseHoldWatch(() => now);
    watch.noteLease(500);
    watch.noteLease(2_000);
    expect(watch.holdMs).toBe(2_000);
    expect(watch.watching).toBe(false);
    watch.noteAnswer("q1"); // an answer where nothing failed starts nothing
    expect(watch.isHeld("q1")).toBe(false);

    watch.noteFailure("q1");
    now += 60_000; // failing for a minute: held all along, however long
    expect(watch.isHeld("q1")).toBe(true);
    expect(watch.isHeld("q2")).toBe(false);
    watch.noteAnswer("q1");
    now += 1_999;
    expect(watch.isHeld("q1")).toBe(true);
    watch.noteFailure("q1"); // failing again inside the window: held until the next answer
    now += 5_000;
    expect(watch.isHeld("q1")).toBe(true);
    watch.noteAnswer("q1");
    now += 2_000;
    expect(watch.isHeld("q1")).toBe(false);
    expect(watch.watching).toBe(false);
  });
});
