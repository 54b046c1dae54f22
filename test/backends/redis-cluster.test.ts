/**
 * The conformance suite on a real Redis Cluster: 3 masters with 1 replica each on loopback
 * (test/helpers/redis-topology.ts), opened the way a user opens one, through a
 * `redis-cluster://host:port,…` URL (the backend's own ioredis Cluster client). Queues hash to
 * slots on different masters, so everything that spans queues (stats, claims across queues, the
 * queue registry, idempotency keys, wake-ups over pub/sub) crosses nodes here, which the
 * one-node cluster of redis.test.ts cannot show.
 *
 * Runs in `npm test` (about 30 s with the cluster start); set REDIS_CLUSTER_URL to use a cluster
 * of your own instead (its keys go under a random prefix and are left to you).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FULL_STORE_FEATURES, type Backend } from "../../src/backend/contract.js";
import { RedisBackend } from "../../src/backend/redis/backend.js";
import { FakeClock } from "../../src/core/clock.js";
import { silentLogger } from "../../src/core/logger.js";
import { enqueueOne } from "../conformance/fixtures.js";
import { backendSuite } from "../conformance/suite.js";
import { findRedisServer, testPrefix } from "../helpers/redis.js";
import { startThrowawayRedisClusterTopology, type ThrowawayRedisCluster } from "../helpers/redis-topology.js";

if (!process.env.REDIS_CLUSTER_URL && findRedisServer() === null) {
  throw new Error("no redis-server to build a Redis Cluster from: install redis-server or set REDIS_CLUSTER_URL");
}

let cluster: ThrowawayRedisCluster | null = null;
let url = process.env.REDIS_CLUSTER_URL ?? "";
beforeAll(async () => {
  if (url) return;
  cluster = await startThrowawayRedisClusterTopology();
  url = cluster.url;
}, 120_000);
afterAll(async () => {
  await cluster?.stop();
});

async function open(prefix: string, clock: FakeClock): Promise<Backend> {
  const backend = new RedisBackend({ connection: url, prefix, clock, logger: silentLogger });
  await backend.migrate();
  return backend;
}

let current: string | undefined;
backendSuite("redis cluster (3 masters, 1 replica each)", {
  capabilities: {
    ...FULL_STORE_FEATURES,
    transactionalEnqueue: false,
    transactionalCompletion: false,
    crossProcessWakeups: true,
    multiProcess: true,
    claimAcrossQueues: "turns" as const,
    flows: "within-queue" as const,
    jobFlowKeys: true,
    jobIdsPerQueue: true,
    eventLog: true,
  },
  async make(clock) {
    current = testPrefix("rc");
    return open(current, clock);
  },
  async openSecond(clock) {
    if (!current) throw new Error("openSecond called before make");
    return open(current, clock);
  },
});

const givenCluster = process.env.REDIS_CLUSTER_URL !== undefined;
describe.skipIf(givenCluster)(
  `redis cluster: the suite really spans nodes${givenCluster ? " (skipped: REDIS_CLUSTER_URL names a cluster this test did not build)" : ""}`,
  () => {
    it("queues of one prefix live on different masters, and each queue's keys on one", async () => {
      const prefix = testPrefix("spread");
      const backend = await open(prefix, new FakeClock());
      try {
        const queues = ["emails", "payments", "reports", "thumbnails", "exports", "webhooks"];
        for (const queue of queues) await enqueueOne(backend, { queue });
        const owners = new Set<number>();
        for (const queue of queues) {
          const meta = await cluster!.masterOf(`${prefix}:{${queue}}:meta`);
          const idx = await cluster!.masterOf(`${prefix}:{${queue}}:idx`);
          expect(idx.port).toBe(meta.port);
          owners.add(meta.port);
        }
        expect(owners.size).toBeGreaterThanOrEqual(2);
      } finally {
        await backend.close();
      }
    });
  },
);
