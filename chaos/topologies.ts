/**
 * Replicated stores for the failover scenarios: a Redis Cluster (3 masters, 1 replica each), a
 * Redis primary + replica watched by 3 sentinels, and a PostgreSQL primary with a streaming hot
 * standby (synchronous or not). Built with the topology helpers of test/helpers/ (the runner owns
 * them: it kills their primaries); their failover and reshard controls are the faults.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { Cluster } from "ioredis";
import { startPostgresPair } from "../testkit/servers/postgres-standby.js";
import { startThrowawayRedisClusterTopology, startThrowawaySentinel } from "../testkit/servers/redis-topology.js";
import { redisAnswers, waitForPing } from "../testkit/servers/redis.js";
import { CHAOS_QUEUE } from "./jobs.js";
import { describeReplication } from "./checker.js";
import type { ReplicationAtKill } from "./records.js";
import { postgresAnswers, type BackendKind, type FailoverOutcome, type Store } from "./stores.js";

export type TopologyKind = "redis-cluster" | "redis-sentinel" | "pg-sync" | "pg-async";

export function backendOf(topology: TopologyKind): BackendKind {
  return topology.startsWith("pg-") ? "postgres" : "redis";
}

function label(text: string): string {
  return text
    .toLowerCase()
    .replace(/[^a-z0-9_]/g, "_")
    .slice(0, 40);
}

/** True once nothing answers on 127.0.0.1:`port` (the kill took), checked for up to 5 s. */
async function seenDown(port: number): Promise<number | null> {
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) {
    const up = await waitForPing(port, 0).then(
      () => true,
      () => false,
    );
    if (!up) return Date.now();
    await sleep(20);
  }
  return null;
}

const notACrash = async () => {
  throw new Error("a replicated store fails over instead: use the failover fault");
};

export interface TopologyOptions {
  /** Redis: the backend's waitForReplicas (WAIT after each script) with this many replicas; 0 off (default). */
  waitReplicas?: number;
}

export async function openTopologyStore(topology: TopologyKind, options: TopologyOptions = {}): Promise<Store> {
  const wait = options.waitReplicas ? `&wait_replicas=${options.waitReplicas}` : "";
  switch (topology) {
    case "redis-cluster":
      return clusterStore(wait);
    case "redis-sentinel":
      return sentinelStore(wait, options.waitReplicas ?? 0);
    case "pg-sync":
    case "pg-async":
      return postgresPairStore(topology === "pg-sync");
  }
}

async function clusterStore(wait: string): Promise<Store> {
  const cluster = await startThrowawayRedisClusterTopology();
  // Every key of the chaos queue carries the hash tag {chaos}: one slot, on one master.
  const queueKey = `{${CHAOS_QUEUE}}`;
  return {
    kind: "redis",
    urlFor: (name) => `${cluster.url}?prefix=chaos-${label(name)}${wait}`,
    crashHow: "SIGKILL of the master serving the chaos queue; its replica is promoted by the cluster",
    crashMode: "server",
    crash: notACrash,
    restart: notACrash,
    probe: async () => {
      const client = new Cluster(cluster.startupNodes.slice(), { redisOptions: { connectTimeout: 2_000 }, clusterRetryStrategy: () => null });
      client.on("error", () => undefined);
      try {
        return (await Promise.race([client.set(`${queueKey}:probe`, "1").then(() => true), sleep(2_000).then(() => false)])) === true;
      } catch {
        return false;
      } finally {
        client.disconnect();
      }
    },
    cut: null,
    broker: null,
    async failover(): Promise<FailoverOutcome> {
      // A fault on a cluster that can survive it: the load may have left the master without an
      // in-sync replica (the 10-minute run of seed 2701 stopped there, no replica took over).
      await cluster.ensureReplicas();
      const victim = await cluster.masterOf(queueKey);
      const from = Date.now();
      await cluster.kill(victim);
      const probeFailedAt = await seenDown(victim.port);
      const heir = await cluster.waitForFailover(victim);
      const promotedAt = Date.now();
      await cluster.restart(victim);
      await cluster.waitHealthy();
      return {
        from,
        probeFailedAt,
        promotedAt,
        restoredAt: Date.now(),
        how: "SIGKILL of the chaos queue's master; the cluster promoted its replica",
        detail: `master :${victim.port} killed, replica :${heir.port} promoted; :${victim.port} rejoined as a replica`,
      };
    },
    async reshard() {
      const slot = await cluster.slotOf(queueKey);
      const source = await cluster.masterOf(queueKey);
      const view = await cluster.view();
      const mine = view.find((n) => n.id === source.id)!;
      // redis-cli takes a source's slots from its lowest up: enough of them to include the queue's.
      let before = 0;
      for (const [lo, hi] of [...mine.ranges].sort((x, y) => x[0] - y[0])) {
        if (slot > hi) before += hi - lo + 1;
        else {
          before += slot - lo + 1;
          break;
        }
      }
      const masters = view.filter((n) => n.role === "master" && !n.failed && n.slots > 0 && n.id !== source.id);
      const target = cluster.nodes.find((n) => n.id === masters[0]!.id)!;
      const from = Date.now();
      let cutShort = "";
      try {
        await cluster.reshard(source, target, before);
      } catch (error) {
        // The cluster changed under the move (on a loaded machine a master that misses
        // cluster-node-timeout is failed over by its replica, and redis-cli then talks to a
        // replica): close the slots it left open, as an operator would, and go on.
        cutShort = `; cut short (${firstLine(error)}), open slots closed with redis-cli --cluster fix`;
        await cluster.fix();
      }
      const after = await cluster.masterOf(queueKey);
      return {
        from,
        to: Date.now(),
        slots: before,
        detail: `${before} slots (the queue's slot ${slot} the last) from :${source.port} to :${target.port}; the queue is now on :${after.port}${cutShort}`,
      };
    },
    close: () => cluster.stop(),
  };
}

/** How often the Sentinel store looks whether the replica is in step with the primary, ms. */
const IN_STEP_LOOK_EVERY_MS = 500;
/** The longest one such look may take before it counts as failed (it never holds up a kill longer), ms. */
const LOOK_TIMEOUT_MS = 5_000;

async function sentinelStore(wait: string, waitReplicas: number): Promise<Store> {
  const topology = await startThrowawaySentinel();
  // The evidence for what a kill can lose (chaos/records.ts, ReplicationAtKill): the latest moment
  // the replica was seen holding everything the serving primary had written. Looked at every
  // IN_STEP_LOOK_EVERY_MS between failovers, just before each kill, and when a restarted server
  // is declared in sync. A look that started under another primary counts for nothing.
  let servingPort = (await topology.primary()).port;
  let inStepAt: number | null = null;
  let looking = true;
  let closed = false;
  /** Looks that failed since the last failover, and why the last one did (for the failover's line). */
  let failedLooks = 0;
  let lastLookFailure = "";
  /** One bounded look (an unanswered read gives null); `lookedAt` is before the primary is read. */
  const look = async () => {
    const lookedAt = Date.now();
    const offsets = await Promise.race([
      topology.offsets().catch((error: unknown) => `offsets failed: ${error instanceof Error ? error.message : String(error)}`),
      sleep(LOOK_TIMEOUT_MS).then(() => `no answer within ${LOOK_TIMEOUT_MS} ms`),
    ]);
    if (typeof offsets === "string" || offsets.unread.length > 0) {
      failedLooks++;
      lastLookFailure = typeof offsets === "string" ? offsets : offsets.unread.join("; ");
      return { lookedAt, offsets: null, inStep: false };
    }
    const inStep = offsets.primary !== null && offsets.replicas.every((r) => r.offset !== null && r.offset >= offsets.primary!);
    return { lookedAt, offsets, inStep };
  };
  const watcher = (async () => {
    while (!closed) {
      if (looking) {
        const seen = await look();
        if (looking && seen.inStep && seen.offsets?.primaryPort === servingPort) inStepAt = Math.max(inStepAt ?? 0, seen.lookedAt);
      }
      await sleep(IN_STEP_LOOK_EVERY_MS);
    }
  })();
  return {
    kind: "redis",
    urlFor: (name) => `${topology.url}?prefix=chaos-${label(name)}${wait}`,
    crashHow: "SIGKILL of the primary; the sentinels promote the replica",
    crashMode: "server",
    crash: notACrash,
    restart: notACrash,
    probe: () => redisAnswers({ sentinels: topology.sentinelPorts.map((port) => ({ host: "127.0.0.1", port })), name: topology.masterName }),
    cut: null,
    broker: null,
    async failover(): Promise<FailoverOutcome> {
      // Where replication stood just before the kill (what an asynchronous promotion can lose):
      // read before `from`, so the failover's timings do not include it. Bounded (look()).
      looking = false;
      const before = await look();
      if (before.inStep && before.offsets?.primaryPort === servingPort) inStepAt = Math.max(inStepAt ?? 0, before.lookedAt);
      const from = Date.now();
      const old = await topology.killPrimary();
      const killedAt = Date.now();
      const read = before.offsets?.primaryPort === old.port ? before.offsets : null;
      const replication: ReplicationAtKill = {
        waitReplicas,
        primaryPort: old.port,
        readAt: read ? before.lookedAt : null,
        primaryOffset: read?.primary ?? null,
        replicaOffset: read?.replicas[0]?.offset ?? null,
        inStepAt: old.port === servingPort ? inStepAt : null,
        killedAt,
      };
      const probeFailedAt = await seenDown(old.port);
      const next = await topology.waitForFailover(old);
      const promotedAt = Date.now();
      servingPort = next.port;
      inStepAt = await topology.restart(old);
      const looks = failedLooks > 0 ? `; ${failedLooks} look(s) at the offsets failed since the last failover (last: ${lastLookFailure})` : "";
      failedLooks = 0;
      looking = true;
      return {
        from,
        probeFailedAt,
        promotedAt,
        restoredAt: Date.now(),
        how: "SIGKILL of the primary; the sentinels promoted the replica",
        detail: `primary :${old.port} killed (just before: ${describeReplication(replication)}), :${next.port} promoted; :${old.port} restarted as its replica, in sync${looks}`,
        replication,
      };
    },
    async close() {
      closed = true;
      await watcher;
      await topology.stop();
    },
  };
}

async function postgresPairStore(synchronous: boolean): Promise<Store> {
  const pair = await startPostgresPair({ database: "chaos", synchronous });
  return {
    kind: "postgres",
    urlFor: (name) => `${pair.url}&schema=chaos_${label(name)}`,
    crashHow: `pg_ctl stop -m immediate of the primary, pg_ctl promote of the ${synchronous ? "synchronous" : "asynchronous"} standby`,
    crashMode: "server",
    crash: notACrash,
    restart: notACrash,
    probe: () => postgresAnswers(`postgresql://postgres@127.0.0.1:${pair.primaryPort()}/chaos`),
    cut: null,
    broker: null,
    async failover(): Promise<FailoverOutcome> {
      const oldPort = pair.primaryPort();
      const from = Date.now();
      await pair.crashPrimary();
      const probeFailedAt = (await seenDownPg(oldPort)) ? Date.now() : null;
      await pair.promote();
      const promotedAt = Date.now();
      const newPort = pair.primaryPort();
      await pair.rebuildStandby();
      return {
        from,
        probeFailedAt,
        promotedAt,
        restoredAt: Date.now(),
        how: `primary crashed (pg_ctl stop -m immediate), ${synchronous ? "synchronous" : "asynchronous"} standby promoted (pg_ctl promote)`,
        detail: `primary :${oldPort} crashed, :${newPort} promoted; :${oldPort} rebuilt as its standby (pg_basebackup)`,
      };
    },
    close: () => pair.stop(),
  };
}

async function seenDownPg(port: number): Promise<boolean> {
  return !(await postgresAnswers(`postgresql://postgres@127.0.0.1:${port}/chaos`));
}

/** The first line of an error's message that says what went wrong (redis-cli's own words when there are some). */
function firstLine(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  const lines = text.split("\n").map((l) => l.trim());
  return (lines.find((l) => /failed:|ERR /.test(l) && !l.startsWith("redis-cli")) ?? lines[0] ?? "").replace(/\u001b\[[0-9;]*m/g, "").slice(0, 200);
}
