/**
 * The connection side of failover: multi-host PostgreSQL URLs (each connection finds the writable
 * host), redis-cluster:// and redis-sentinel:// URLs, and the Redis backend's waitForReplicas
 * (WAIT after each script) against a real primary and replica. The failovers themselves run in
 * test/chaos/failover-*.test.ts.
 */
import { afterAll, describe, expect, it } from "vitest";
import { openBackend } from "../../src/backend/open.js";
import { parseMultiHostUrl } from "../../src/backend/postgres/multi-host.js";
import { parseTopologyUrl } from "../../src/backend/redis/connection.js";
import { RedisBackend, ReplicaWaitError } from "../../src/backend/redis/index.js";
import { silentLogger } from "../../src/core/logger.js";
import { InvalidInputError, Queue } from "../../src/index.js";
import { startPostgresPair } from "../helpers/postgres-standby.js";
import { findPostgresBin } from "../helpers/postgres.js";
import { findRedisServer, startThrowawayRedis, type ThrowawayRedis } from "../helpers/redis.js";
import { startThrowawaySentinel, type ThrowawaySentinel } from "../helpers/redis-topology.js";
import type { Redis } from "ioredis";
import { waitFor } from "../helpers/wait-for.js";

describe("multi-host PostgreSQL URLs", () => {
  it("reads hosts, ports and target_session_attrs, and rebuilds a one-host URL keeping the rest", () => {
    const parsed = parseMultiHostUrl("postgresql://u:p%40ss@db1:5433,db2/app?target_session_attrs=read-write&sslmode=disable&schema=x")!;
    expect(parsed.hosts).toEqual([
      { host: "db1", port: 5433 },
      { host: "db2", port: 5432 },
    ]);
    expect(parsed.targetSessionAttrs).toBe("read-write");
    expect(parsed.urlFor(parsed.hosts[1]!)).toBe("postgresql://u:p%40ss@db2:5432/app?sslmode=disable&schema=x");
    expect(parseMultiHostUrl("postgres://u@db1:5432/app")).toBeNull();
    expect(parseMultiHostUrl("postgres://u@db1/app?target_session_attrs=primary")?.targetSessionAttrs).toBe("read-write");
    expect(() => parseMultiHostUrl("postgres://db1,db2/app?target_session_attrs=prefer-standby")).toThrow(InvalidInputError);
  });
});

describe("Redis topology URLs", () => {
  it("reads redis-cluster:// seed nodes and redis-sentinel:// sentinels with the primary's name", () => {
    expect(parseTopologyUrl("redis-cluster://a:7000,b:7001,c")).toMatchObject({
      kind: "cluster",
      nodes: [
        { host: "a", port: 7000 },
        { host: "b", port: 7001 },
        { host: "c", port: 6379 },
      ],
    });
    expect(parseTopologyUrl("redis-sentinel://:secret@s1:26380,s2/mymaster")).toMatchObject({
      kind: "sentinel",
      nodes: [
        { host: "s1", port: 26380 },
        { host: "s2", port: 26379 },
      ],
      masterName: "mymaster",
      password: "secret",
    });
    expect(parseTopologyUrl("redis://a:6379")).toBeNull();
    expect(() => parseTopologyUrl("redis-sentinel://s1:26379")).toThrow(/master name/);
  });
});

const noPostgres = (await findPostgresBin()) === null;
describe.skipIf(noPostgres)(`PostgreSQL primary switch through a multi-host URL${noPostgres ? " (skipped: no PostgreSQL server binaries)" : ""}`, () => {
  it("new connections, the LISTEN one included, find the promoted standby; nothing committed is lost (synchronous standby)", { timeout: 120_000 }, async () => {
    const pair = await startPostgresPair({ synchronous: true });
    const backend = await openBackend(`${pair.url}&schema=switch`);
    // Enqueues go through another backend instance, so a wake-up here can only come by NOTIFY
    // over this one's LISTEN connection, never from a local enqueue.
    const producer = await openBackend(`${pair.url}&schema=switch`);
    try {
      const queue = new Queue("q", { backend: producer });
      const before = await queue.add("a", { n: 1 });
      let woken = 0;
      const unsubscribe = backend.subscribe(() => woken++);
      await waitFor(
        async () => {
          await queue.add("wake", {});
          return woken > 0;
        },
        { timeoutMs: 30_000, intervalMs: 200 },
      );
      await pair.crashPrimary();
      await pair.promote();
      // Enqueue on the new primary: the pool's connections to the dead one fail and are replaced.
      await waitFor(
        async () =>
          await queue.add("b", {}).then(
            () => true,
            () => false,
          ),
        { timeoutMs: 30_000, intervalMs: 100 },
      );
      expect((await queue.getJob(before.id))?.name).toBe("a");
      // The LISTEN connection came back on the new primary: an enqueue there wakes us.
      const seen = woken;
      await waitFor(
        async () => {
          await queue.add("wake", {});
          return woken > seen;
        },
        { timeoutMs: 30_000, intervalMs: 200 },
      );
      unsubscribe();
    } finally {
      await producer.close();
      await backend.close();
      await pair.stop();
    }
  });
});

const noRedis = findRedisServer() === null;
describe.skipIf(noRedis)(`Redis waitForReplicas (WAIT)${noRedis ? " (skipped: no redis-server)" : ""}`, () => {
  let primary: ThrowawayRedis | null = null;
  let replica: ThrowawayRedis | null = null;
  afterAll(async () => {
    await replica?.stop();
    await primary?.stop();
  });

  it("answers once the replica has the write, and fails with ReplicaWaitError when no replica acknowledges", { timeout: 60_000 }, async () => {
    primary = await startThrowawayRedis();
    replica = await startThrowawayRedis({ args: ["--replicaof", "127.0.0.1", String(primary.port)] });
    // The answer must wait for the replica: a generous timeout, so a loaded machine cannot fail the
    // first add; the refusal needs none (a dead replica never acknowledges), so it gets a short one.
    const backend = new RedisBackend({ connection: primary.url, prefix: "wait", logger: silentLogger, waitForReplicas: { replicas: 1, timeoutMs: 20_000 } });
    const impatient = new RedisBackend({ connection: primary.url, prefix: "wait", logger: silentLogger, waitForReplicas: { replicas: 1, timeoutMs: 300 } });
    try {
      await waitFor(
        async () =>
          await backend.migrate().then(
            () => true,
            () => false,
          ),
        { timeoutMs: 30_000, intervalMs: 100 },
      );
      const queue = new Queue("q", { backend });
      const { id } = await queue.add("a", {});
      // The replica has it the moment the add returned.
      const { Redis } = await import("ioredis");
      const direct = new Redis(replica.url);
      try {
        expect(await direct.keys(`wait:{q}:*`)).not.toEqual([]);
      } finally {
        direct.disconnect();
      }
      expect((await queue.getJob(id))?.state).toBe("waiting");
      await replica.kill();
      await expect(new Queue("q", { backend: impatient }).add("b", {})).rejects.toBeInstanceOf(ReplicaWaitError);
    } finally {
      await backend.close();
      await impatient.close();
    }
  });

  it("refuses nonsense settings", () => {
    expect(() => new RedisBackend({ connection: "redis://127.0.0.1:1", waitForReplicas: { replicas: 0 } })).toThrow(InvalidInputError);
    expect(() => new RedisBackend({ connection: "redis://127.0.0.1:1", waitForReplicas: { replicas: 1, timeoutMs: 0.5 } })).toThrow(/timeoutMs/);
  });
});

describe.skipIf(noRedis)(`Redis Sentinel connection kept${noRedis ? " (skipped: no redis-server)" : ""}`, () => {
  let sentinel: ThrowawaySentinel | null = null;
  afterAll(async () => {
    await sentinel?.stop();
  });

  it("connects again after ioredis ends it (the failover detector disconnecting a reconnect in progress)", { timeout: 90_000 }, async () => {
    sentinel = await startThrowawaySentinel();
    const backend = (await openBackend(`${sentinel.url}?prefix=kept`)) as RedisBackend;
    try {
      const queue = new Queue("q", { backend });
      await queue.add("before", {});
      // What the failover detector does when +switch-master arrives while the client resolves
      // the primary: the connector is disconnected mid-connect, and ioredis ends the client.
      const client = (backend as unknown as { client: Redis }).client;
      const connector = (client as unknown as { connector: { disconnect(): void } }).connector;
      let ended = false;
      client.once("end", () => (ended = true));
      client.once("connecting", () => connector.disconnect());
      client.disconnect(true);
      await waitFor(() => ended, { timeoutMs: 20_000, intervalMs: 20 });
      // Ended by ioredis, not by us: the backend connects again and commands go through.
      await waitFor(
        async () =>
          await queue.add("after", {}).then(
            () => true,
            () => false,
          ),
        { timeoutMs: 30_000, intervalMs: 200 },
      );
      expect((await queue.stats()).counts.waiting).toBe(2);
    } finally {
      await backend.close();
    }
  });
});

describe.skipIf(noRedis)(`Redis waitForReplicas across a Sentinel failover${noRedis ? " (skipped: no redis-server)" : ""}`, () => {
  let sentinel: ThrowawaySentinel | null = null;
  afterAll(async () => {
    await sentinel?.stop();
  });

  // docs/failover.md: with WAIT, the adds in flight when the primary died did not settle within 30 s
  // (32 of 32 in each trial of bench:failover). The promoted replica has no replica of its own, so
  // every WAIT runs to its timeout, and WAIT blocks its connection: with one WAIT per script the
  // 32nd add answered after 32 timeouts. ReplicaWaiter shares one WAIT among the writes that
  // answered meanwhile, so each add answers or fails within about two timeouts.
  it("every add in flight answers or fails within a few WAIT timeouts, and adds succeed once a replica is back", { timeout: 150_000 }, async () => {
    sentinel = await startThrowawaySentinel();
    const WAIT_TIMEOUT_MS = 2_000;
    const backend = (await openBackend(`${sentinel.url}?prefix=waitfail&wait_replicas=1&wait_timeout_ms=${WAIT_TIMEOUT_MS}`)) as RedisBackend;
    const LOOPS = 32;
    let stop = false;
    const outcomes = { ok: 0, failed: 0 };
    const pending = new Set<number>();
    try {
      await waitFor(
        async () =>
          await backend.migrate().then(
            () => true,
            () => false,
          ),
        { timeoutMs: 30_000, intervalMs: 100 },
      );
      const queue = new Queue("q", { backend });
      const addUntilStopped = (loop: number) =>
        (async () => {
          for (let i = 0; !stop; i++) {
            pending.add(loop);
            try {
              await queue.add("a", { loop, i });
              outcomes.ok++;
            } catch {
              outcomes.failed++;
              await new Promise((resolve) => setTimeout(resolve, 20));
            } finally {
              pending.delete(loop);
            }
          }
        })();
      let loops = Array.from({ length: LOOPS }, (_, loop) => addUntilStopped(loop));
      await waitFor(() => outcomes.ok >= 100, { timeoutMs: 30_000, description: "100 adds before the kill" });
      const old = await sentinel.killPrimary();
      await sentinel.waitForFailover(old, 60_000);
      // The promoted replica has none: every WAIT now runs to its timeout, and every add fails.
      await new Promise((resolve) => setTimeout(resolve, 500));
      stop = true;
      // 32 WAITs in a row would take 64 s; shared, a couple of timeouts (a loaded machine: 10).
      await waitFor(() => pending.size === 0, {
        timeoutMs: 10 * WAIT_TIMEOUT_MS,
        intervalMs: 50,
        description: `every add in flight (${LOOPS} loops) to answer or fail`,
      });
      await Promise.all(loops);
      // The old primary back as a replica: adds are confirmed again.
      await sentinel.restart(old, 60_000);
      stop = false;
      const okBefore = outcomes.ok;
      loops = Array.from({ length: LOOPS }, (_, loop) => addUntilStopped(loop));
      await waitFor(() => outcomes.ok >= okBefore + 100, { timeoutMs: 30_000, description: "100 adds confirmed after the failover" });
      stop = true;
      await Promise.all(loops);
    } finally {
      stop = true;
      await backend.close();
    }
  });
});
