import { Cluster } from "ioredis";
import { afterAll, inject } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { RedisBackend } from "../../src/backend/redis/backend.js";
import type { FakeClock } from "../../src/core/clock.js";
import { silentLogger } from "../../src/core/logger.js";
import { backendSuite } from "../conformance/suite.js";
import { deletePrefix, requireRedis, startThrowawayRedisCluster, testPrefix, type ThrowawayRedis } from "../helpers/redis.js";
import { FULL_STORE_FEATURES } from "../../src/backend/contract.js";

const url = requireRedis(inject("redisUrl"), inject("redisUnavailable"));

const capabilities = {
  ...FULL_STORE_FEATURES,
  transactionalEnqueue: false,
  transactionalCompletion: false,
  crossProcessWakeups: true,
  multiProcess: true,
  claimAcrossQueues: "turns" as const,
  flows: "across-queues" as const,
  jobFlowKeys: true,
  jobIdsPerQueue: true,
  eventLog: true,
};

// Every store is a key prefix of its own on the shared server, deleted after the file.
const prefixes: string[] = [];
let current: string | undefined;
afterAll(async () => {
  for (const prefix of prefixes) await deletePrefix(url, prefix);
});

async function open(connection: string | Cluster, prefix: string, clock: FakeClock): Promise<Backend> {
  const backend = new RedisBackend({ connection, prefix, clock, logger: silentLogger });
  await backend.migrate();
  return backend;
}

backendSuite("redis", {
  capabilities,
  async make(clock) {
    current = testPrefix("conf");
    prefixes.push(current);
    return open(url, current, clock);
  },
  async openSecond(clock) {
    if (!current) throw new Error("openSecond called before make");
    return open(url, current, clock);
  },
});

// The same suite through ioredis' Cluster client against a cluster-mode server: Redis rejects
// any script that reaches outside the slot of its queue, so this proves the key layout is
// cluster-safe. Its own server (cluster mode is a start-up option), started on first use.
let cluster: Promise<{ server: ThrowawayRedis; client: Cluster }> | undefined;
function clusterClient(): Promise<Cluster> {
  cluster ??= startThrowawayRedisCluster().then((server) => ({
    server,
    client: new Cluster([{ host: "127.0.0.1", port: server.port }], { enableAutoPipelining: true }),
  }));
  return cluster.then((c) => c.client);
}
afterAll(async () => {
  if (cluster === undefined) return;
  const { server, client } = await cluster;
  await client.quit();
  await server.stop();
});

let currentInCluster: string | undefined;
backendSuite("redis cluster (one node, cluster mode)", {
  capabilities: { ...capabilities, flows: "within-queue" },
  async make(clock) {
    currentInCluster = testPrefix("cluster");
    return open(await clusterClient(), currentInCluster, clock);
  },
  async openSecond(clock) {
    if (!currentInCluster) throw new Error("openSecond called before make");
    return open(await clusterClient(), currentInCluster, clock);
  },
});
