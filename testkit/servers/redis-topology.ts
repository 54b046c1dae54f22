/**
 * Throwaway Redis topologies on loopback, for the tests and the chaos runner alike:
 *
 * - a Redis Cluster of 3 masters with 1 replica each (`redis-server --cluster-enabled yes`, then
 *   `redis-cli --cluster create … --cluster-replicas 1`), with controls to SIGKILL a node, start it
 *   again (it rejoins as a replica of whoever took over), fail over by hand and move slots
 *   (`redis-cli --cluster reshard`);
 * - a primary, one replica and three sentinels (quorum 2), with controls to SIGKILL the primary
 *   and wait for the sentinels to promote the replica.
 *
 * Every process is a throwaway server of testkit/servers/redis.ts (free port, temp dir, killed when
 * the test process exits); `stop()` removes them all.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { Redis } from "ioredis";
import { freePort } from "./ports.js";
import { findRedisServer, startThrowawayRedis, waitForPing, type ThrowawayRedis } from "./redis.js";

const exec = promisify(execFile);

/**
 * How long a cluster node may be unreachable before the others count it as failed, ms. Redis'
 * default is 15 s; 2 s keeps a failover (detection, then the replica's election) within a few
 * seconds, which is what a production cluster tuned for fast failover runs with too.
 */
export const CLUSTER_NODE_TIMEOUT_MS = 2_000;
/** How long sentinels wait before they count the primary as down, ms (default 30 s). */
export const SENTINEL_DOWN_AFTER_MS = 1_000;
/** The name sentinels monitor the primary under. */
export const SENTINEL_MASTER_NAME = "conveyor-primary";

function redisCli(): string {
  const server = findRedisServer();
  const beside = server ? join(dirname(server), "redis-cli") : null;
  if (beside && existsSync(beside)) return beside;
  return "redis-cli";
}

async function cli(args: string[], timeoutMs = 120_000): Promise<string> {
  try {
    const { stdout } = await exec(redisCli(), args, { timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 });
    return stdout;
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string; message: string };
    throw new Error(`redis-cli ${args.slice(0, 3).join(" ")} … failed: ${e.stderr || e.message}\n${(e.stdout ?? "").slice(-2_000)}`, { cause: error });
  }
}

async function waitUntil(what: string, timeoutMs: number, test: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      if (await test()) return;
    } catch {
      // Not there yet (a node restarting, a connection refused): look again.
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(100);
  }
}

/**
 * How long one look at a node may take, connection and commands included, ms. A connection that
 * is accepted but never answered (ioredis' ready check, its INFO, has no timeout of its own, nor
 * has a command) would otherwise hold a harness step forever: a 10-minute Sentinel run once
 * stopped that way before its 47th kill.
 */
export const ONE_LOOK_TIMEOUT_MS = 10_000;

/** One command on a short-lived connection that never retries (a node may be down), given up after ONE_LOOK_TIMEOUT_MS. */
export async function once<T>(port: number, run: (redis: Redis) => Promise<T>, timeoutMs = ONE_LOOK_TIMEOUT_MS): Promise<T> {
  const redis = new Redis({ host: "127.0.0.1", port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 2_000 });
  redis.on("error", () => undefined);
  let timer: NodeJS.Timeout | undefined;
  const given = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`:${port} did not answer within ${timeoutMs} ms (connection ${redis.status})`)), timeoutMs);
  });
  try {
    return await Promise.race([redis.connect().then(() => run(redis)), given]);
  } finally {
    clearTimeout(timer);
    redis.disconnect();
  }
}

/**
 * Where a replica stands against its primary, from the two servers' INFO replication. In sync
 * means: link up, no sync in progress, and the replica's offset at least the primary's as read
 * BEFORE it (so it has applied everything the primary had written at that moment). Link-up alone
 * is not enough: after a full resync the link comes up once the snapshot is loaded, and the
 * writes made during the transfer stream only after it; a primary killed then loses them (the
 * Sentinel run of seed 2705 lost 115 acknowledged jobs that way). Shared by the Sentinel and the
 * Cluster harness.
 */
export function replicaInSync(primaryInfo: string, replicaInfo: string): { inSync: boolean; summary: string } {
  const linked = /master_link_status:up/.test(replicaInfo) && /master_sync_in_progress:0/.test(replicaInfo);
  const primaryOffset = offsetOf(primaryInfo, "master_repl_offset");
  const replicaOffset = offsetOf(replicaInfo, "slave_repl_offset");
  const summary = `${replicationSummary(replicaInfo)}; replica offset ${replicaOffset} of the primary's ${primaryOffset}`;
  return { inSync: linked && primaryOffset !== null && replicaOffset !== null && replicaOffset >= primaryOffset, summary };
}

/** Reads the primary's INFO replication, then the replica's (in that order: see replicaInSync). */
async function lookInSync(primaryPort: number, replicaPort: number): Promise<{ inSync: boolean; summary: string }> {
  const primaryInfo = await once(primaryPort, (r) => r.info("replication"));
  const replicaInfo = await once(replicaPort, (r) => r.info("replication"));
  return replicaInSync(primaryInfo, replicaInfo);
}

// ───────────────────────────────────────────────────────────────────────────── Redis Cluster

export interface ClusterNode {
  readonly server: ThrowawayRedis;
  readonly port: number;
  /** The node id (40 hex digits) the cluster knows it by. */
  readonly id: string;
}

export interface NodeView {
  id: string;
  port: number;
  role: "master" | "replica";
  /** For a replica, the id of its master. */
  masterId: string | null;
  failed: boolean;
  /** Slots served (masters only). */
  slots: number;
  /** The slot ranges served, inclusive, in CLUSTER NODES order. */
  ranges: Array<[number, number]>;
}

export interface ThrowawayRedisCluster {
  readonly nodes: readonly ClusterNode[];
  /** `redis-cluster://127.0.0.1:P1,127.0.0.1:P2,…` (every node): the URL Conveyor opens. */
  readonly url: string;
  /** Seed nodes for an ioredis `Cluster`. */
  readonly startupNodes: ReadonlyArray<{ host: string; port: number }>;
  /** What the cluster says about itself, asked of a node that is up. */
  view(): Promise<NodeView[]>;
  /** The node serving `key`'s slot now. */
  masterOf(key: string): Promise<ClusterNode>;
  /** The hash slot of `key` (CLUSTER KEYSLOT). */
  slotOf(key: string): Promise<number>;
  /** SIGKILLs a node (no goodbye, no save). */
  kill(node: ClusterNode): Promise<void>;
  /** Starts a killed node again on its port and directory; resolves once it rejoined (as an in-sync replica after a failover). */
  restart(node: ClusterNode): Promise<void>;
  /** Resolves once `failed` is marked failed and a replica of it serves its slots (cluster_state:ok). */
  waitForFailover(failed: ClusterNode, timeoutMs?: number): Promise<ClusterNode>;
  /** `CLUSTER FAILOVER` on a replica: a coordinated switch with no write lost. */
  manualFailover(replica: ClusterNode, timeoutMs?: number): Promise<void>;
  /** Moves `slots` slots from one master to another (`redis-cli --cluster reshard`); keys move with them. */
  reshard(from: ClusterNode, to: ClusterNode, slots: number): Promise<void>;
  /**
   * `redis-cli --cluster fix`: closes slots a move left open (a reshard cut short, e.g. by a
   * master that lost its role under it), then waits for a healthy cluster.
   */
  fix(): Promise<void>;
  /** Resolves once every node that is up reports cluster_state:ok and agrees on the masters. */
  waitHealthy(timeoutMs?: number): Promise<void>;
  /**
   * Resolves once every master serving slots has a replica, and every replica is in sync. On a
   * loaded machine the cluster fails masters over by itself (a node missing cluster-node-timeout),
   * and can leave a master with no replica, or with one still syncing, which refuses to take over
   * ("data is too old"): a SIGKILL of that master would then stop the slots for good. A master
   * with none gets a replica from a master that has two (CLUSTER REPLICATE). Rejects after
   * `timeoutMs` (default 60,000 ms).
   */
  ensureReplicas(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export interface ClusterOptions {
  /** Masters (default 3), each with `replicas` replicas (default 1). */
  masters?: number;
  replicas?: number;
  /** Extra `redis-server` arguments for every node. */
  args?: string[];
}

/** Starts 3 masters + 1 replica each (by default) and builds a cluster of them. */
export async function startThrowawayRedisClusterTopology(options: ClusterOptions = {}): Promise<ThrowawayRedisCluster> {
  const masters = options.masters ?? 3;
  const replicas = options.replicas ?? 1;
  const servers: ThrowawayRedis[] = [];
  const stopAll = async () => {
    await Promise.all(servers.map((s) => s.stop().catch(() => undefined)));
  };
  try {
    const started = await Promise.all(
      Array.from({ length: masters * (1 + replicas) }, () =>
        startThrowawayRedis({
          // An AOF fsynced every second: a node restarted after a kill comes back with its data
          // and its nodes.conf, and rejoins.
          persistence: "everysec",
          args: [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            String(CLUSTER_NODE_TIMEOUT_MS),
            "--cluster-announce-ip",
            "127.0.0.1",
            ...(options.args ?? []),
          ],
        }),
      ),
    );
    servers.push(...started);
    await cli(["--cluster", "create", ...servers.map((s) => `127.0.0.1:${s.port}`), "--cluster-replicas", String(replicas), "--cluster-yes"]);
  } catch (error) {
    await stopAll();
    throw error;
  }
  const nodes: ClusterNode[] = [];
  for (const server of servers) {
    const id = await once(server.port, async (r) => String(await r.call("CLUSTER", ["MYID"])));
    nodes.push({ server, port: server.port, id });
  }
  const byId = (id: string) => {
    const node = nodes.find((n) => n.id === id);
    if (!node) throw new Error(`no node with id ${id}`);
    return node;
  };
  const alive = new Set(nodes);
  /** Killed master id -> the ids of its replicas at the kill: one of them takes over. */
  const heirs = new Map<string, Set<string>>();

  const view = async (): Promise<NodeView[]> => {
    let lastError: unknown = null;
    for (const node of alive) {
      try {
        const text = await once(node.port, async (r) => String(await r.call("CLUSTER", ["NODES"])));
        return parseClusterNodes(text);
      } catch (error) {
        lastError = error;
      }
    }
    throw new Error(`no cluster node answers: ${String(lastError)}`);
  };

  const waitHealthy = async (timeoutMs = 60_000) => {
    await waitUntil("the cluster to be healthy", timeoutMs, async () => {
      const views: string[] = [];
      for (const node of alive) {
        const info = await once(node.port, async (r) => String(await r.call("CLUSTER", ["INFO"])));
        if (!/cluster_state:ok/.test(info)) return false;
        const v = parseClusterNodes(await once(node.port, async (r) => String(await r.call("CLUSTER", ["NODES"]))));
        const servingMasters = v.filter((n) => n.role === "master" && n.slots > 0 && !n.failed);
        if (servingMasters.reduce((sum, n) => sum + n.slots, 0) !== 16_384) return false;
        views.push(
          servingMasters
            .map((n) => `${n.id}:${n.slots}`)
            .sort()
            .join(","),
        );
      }
      return new Set(views).size === 1;
    });
  };
  // Replicas in sync with their masters too: a replica that never finished its first sync is
  // "disconnected from master for longer than allowed" and refuses to take over.
  const replicasInSync = () =>
    waitUntil("every replica to be in sync", 60_000, async () => {
      for (const node of alive) if (!(await clusterReplicaInSync(node.port))) return false;
      return true;
    });
  await waitHealthy()
    .then(replicasInSync)
    .catch(async (error: unknown) => {
      await stopAll();
      throw error;
    });

  let stopped = false;
  const cluster: ThrowawayRedisCluster = {
    nodes,
    url: `redis-cluster://${nodes.map((n) => `127.0.0.1:${n.port}`).join(",")}`,
    startupNodes: nodes.map((n) => ({ host: "127.0.0.1", port: n.port })),
    view,
    slotOf: async (key) => Number(await once([...alive][0]!.port, (r) => r.call("CLUSTER", ["KEYSLOT", key]))),
    async masterOf(key) {
      const slot = Number(await once([...alive][0]!.port, (r) => r.call("CLUSTER", ["KEYSLOT", key])));
      const owner = await findSlotOwner(alive, slot);
      return byId(owner);
    },
    async kill(node) {
      // Whoever replicates this node now is its heir on a failover.
      const v = await view();
      heirs.set(node.id, new Set(v.filter((n) => n.role === "replica" && n.masterId === node.id).map((n) => n.id)));
      alive.delete(node);
      await node.server.kill();
    },
    async restart(node) {
      await node.server.start();
      await waitForPing(node.port, 30_000);
      alive.add(node);
      // A master that lost its slots to a replica comes back as that replica's replica: ready
      // to take over in the next failover only once it is in sync (offset included: replicaInSync).
      await waitUntil(`:${node.port} to rejoin`, 60_000, async () => {
        const info = await once(node.port, (r) => r.info("replication"));
        if (info.includes("role:master")) {
          const v = await view();
          return (v.find((n) => n.id === node.id)?.slots ?? 0) > 0;
        }
        return clusterReplicaInSync(node.port);
      });
    },
    async waitForFailover(failed, timeoutMs = 60_000) {
      let promoted: ClusterNode | null = null;
      await waitUntil(`a replica of node ${failed.port} to take over`, timeoutMs, async () => {
        const v = await view();
        const old = v.find((n) => n.id === failed.id);
        if (!old?.failed) return false;
        const candidates = heirs.get(failed.id) ?? new Set<string>();
        const heir = v.find((n) => n.role === "master" && !n.failed && n.slots > 0 && candidates.has(n.id));
        if (!heir) return false;
        promoted = byId(heir.id);
        return true;
      });
      await waitHealthy(timeoutMs);
      return promoted!;
    },
    async manualFailover(replica, timeoutMs = 60_000) {
      await once(replica.port, (r) => r.call("CLUSTER", ["FAILOVER"]));
      await waitUntil(`node ${replica.port} to become a master`, timeoutMs, async () => {
        const role = (await once(replica.port, (r) => r.call("ROLE"))) as unknown[];
        return role[0] === "master";
      });
      await waitHealthy(timeoutMs);
    },
    async reshard(from, to, slots) {
      await cli(
        [
          "--cluster",
          "reshard",
          `127.0.0.1:${to.port}`,
          "--cluster-from",
          from.id,
          "--cluster-to",
          to.id,
          "--cluster-slots",
          String(slots),
          "--cluster-yes",
          // Keys per MIGRATE batch; small batches keep each move short under load.
          "--cluster-pipeline",
          "50",
        ],
        300_000,
      );
      await waitHealthy();
    },
    async fix() {
      await waitUntil("a master to answer for redis-cli --cluster fix", 60_000, async () => {
        const view = await cluster.view();
        const master = view.find((v) => v.role === "master" && !v.failed);
        if (master === undefined) return false;
        await cli(["--cluster", "fix", `127.0.0.1:${master.port}`, "--cluster-yes"], 300_000);
        return true;
      });
      await waitHealthy();
    },
    waitHealthy,
    async ensureReplicas(timeoutMs = 60_000) {
      await waitUntil("every master to have an in-sync replica", timeoutMs, async () => {
        const v = await view();
        const up = v.filter((n) => !n.failed && [...alive].some((a) => a.id === n.id));
        const replicasOf = (id: string) => up.filter((n) => n.role === "replica" && n.masterId === id);
        for (const master of up.filter((n) => n.role === "master" && n.slots > 0)) {
          if (replicasOf(master.id).length > 0) continue;
          const donor = up.find((n) => n.role === "master" && replicasOf(n.id).length > 1);
          if (donor === undefined) return false;
          await once(replicasOf(donor.id)[0]!.port, (r) => r.call("CLUSTER", ["REPLICATE", master.id]));
          return false;
        }
        for (const node of alive) if (!(await clusterReplicaInSync(node.port))) return false;
        return true;
      });
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await stopAll();
    },
  };
  return cluster;
}

/** True unless the node at `port` is a replica not in sync with its master (replicaInSync); masters count as in sync. */
async function clusterReplicaInSync(port: number): Promise<boolean> {
  const info = await once(port, (r) => r.info("replication"));
  if (!info.includes("role:slave")) return true;
  const masterPort = offsetOf(info, "master_port");
  if (masterPort === null) return false;
  return (await lookInSync(masterPort, port)).inSync;
}

async function findSlotOwner(alive: Set<ClusterNode>, slot: number): Promise<string> {
  for (const node of alive) {
    try {
      const text = await once(node.port, async (r) => String(await r.call("CLUSTER", ["NODES"])));
      for (const line of text.trim().split("\n")) {
        const fields = line.split(" ");
        if (!fields[2]?.includes("master") || fields[2].includes("fail")) continue;
        for (const range of fields.slice(8)) {
          if (range.startsWith("[")) continue;
          const [lo, hi] = range.split("-").map(Number);
          if (slot >= lo! && slot <= (hi ?? lo)!) return fields[0]!;
        }
      }
    } catch {
      // This node is down: ask the next.
    }
  }
  throw new Error(`no live master serves slot ${slot}`);
}

/** Parses `CLUSTER NODES`. */
export function parseClusterNodes(text: string): NodeView[] {
  const out: NodeView[] = [];
  for (const line of text.trim().split("\n")) {
    const fields = line.trim().split(" ");
    if (fields.length < 8) continue;
    const flags = fields[2]!.split(",");
    const port = Number(/:(\d+)@/.exec(fields[1]!)?.[1] ?? 0);
    let slots = 0;
    const ranges: Array<[number, number]> = [];
    for (const range of fields.slice(8)) {
      if (range.startsWith("[")) continue;
      const [lo, hi] = range.split("-").map(Number);
      slots += (hi ?? lo!) - lo! + 1;
      ranges.push([lo!, hi ?? lo!]);
    }
    out.push({
      id: fields[0]!,
      port,
      role: flags.includes("master") ? "master" : "replica",
      masterId: fields[3] === "-" ? null : fields[3]!,
      failed: flags.includes("fail") || flags.includes("fail?"),
      slots,
      ranges,
    });
  }
  return out;
}

// ───────────────────────────────────────────────────────────────────────────── Sentinel

export interface ThrowawaySentinel {
  /** The primary at start and its replica at start (roles swap after a failover). */
  readonly servers: readonly ThrowawayRedis[];
  readonly sentinelPorts: readonly number[];
  /** `redis-sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/<name>`: the URL Conveyor opens. */
  readonly url: string;
  readonly masterName: string;
  /** The server the sentinels name as primary now. */
  primary(): Promise<ThrowawayRedis>;
  /** SIGKILLs the current primary; resolves with it. */
  killPrimary(): Promise<ThrowawayRedis>;
  /** Resolves once the sentinels name another server than `old` as primary and it answers as one. */
  waitForFailover(old: ThrowawayRedis, timeoutMs?: number): Promise<ThrowawayRedis>;
  /**
   * Starts a killed server again as a replica of the current primary (REPLICAOF right after it
   * starts, as an orchestrator's start script would) and resolves once it is in sync (link up, and its offset has reached the primary's): only then can it take over in
   * the next failover without losing what the primary took meanwhile. Resolves with the moment
   * by which everything the primary had written was on the replica (ms since the epoch).
   */
  restart(server: ThrowawayRedis, timeoutMs?: number): Promise<number>;
  /**
   * How far the replication streams are, in bytes: the primary's `master_repl_offset` and each
   * other server's `slave_repl_offset` (null when it does not answer or is no replica), read in
   * that order. For the record at a kill: a replica behind the primary then loses the difference.
   * `unread`: why a read failed (a server that did not answer in time, say).
   */
  offsets(): Promise<{ primaryPort: number; primary: number | null; replicas: Array<{ port: number; offset: number | null }>; unread: string[] }>;
  stop(): Promise<void>;
}

interface SentinelProcess {
  port: number;
  dir: string;
  child: ChildProcess;
}

const sentinelChildren = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of sentinelChildren) child.kill("SIGKILL");
});

/**
 * How long a restarted Sentinel server may take to become an in-sync replica, ms. Generous: at a
 * load average of 36 on 2 cores a resync outlasted 120 s, and the failover scenario cannot go on
 * without it (the next kill would leave no replica to promote).
 */
export const SENTINEL_RESYNC_TIMEOUT_MS = 600_000;

/** A numeric field of INFO replication, or null when absent. */
function offsetOf(info: string, field: string): number | null {
  const m = new RegExp(`^${field}:(\\d+)`, "m").exec(info);
  return m ? Number(m[1]) : null;
}

/** The replication fields that say where a replica's (re)sync stands, on one line. */
function replicationSummary(info: string): string {
  const fields = ["role", "master_port", "master_link_status", "master_sync_in_progress", "master_sync_left_bytes", "master_link_down_since_seconds"];
  const seen = fields.flatMap((name) => {
    const m = new RegExp(`^${name}:(.*)$`, "m").exec(info);
    return m ? [`${name}:${m[1]!.trim()}`] : [];
  });
  return seen.join(" ") || "no replication fields";
}

/** A primary, one replica and three sentinels (quorum 2) on loopback. */
export async function startThrowawaySentinel(options: { args?: string[] } = {}): Promise<ThrowawaySentinel> {
  const binary = findRedisServer();
  if (binary === null) throw new Error("no redis-server found (apt-get install redis-server)");
  const persistence = "everysec" as const;
  const first = await startThrowawayRedis({ persistence, args: options.args ?? [] });
  const second = await startThrowawayRedis({ persistence, args: [...(options.args ?? []), "--replicaof", "127.0.0.1", String(first.port)] });
  const servers = [first, second];
  const sentinels: SentinelProcess[] = [];
  const stopAll = async () => {
    for (const s of sentinels) {
      if (s.child.exitCode === null && s.child.signalCode === null) {
        const exited = new Promise((resolve) => s.child.once("exit", resolve));
        s.child.kill("SIGTERM");
        await exited;
      }
      await rm(s.dir, { recursive: true, force: true });
    }
    await Promise.all(servers.map((s) => s.stop().catch(() => undefined)));
  };
  try {
    await waitUntil("the replica to sync", 30_000, async () => {
      const info = await once(second.port, (r) => r.info("replication"));
      return /master_link_status:up/.test(info);
    });
    for (let i = 0; i < 3; i++) {
      const dir = await mkdtemp(join(tmpdir(), "conveyor-sentinel-"));
      const port = await freePort();
      const conf = join(dir, "sentinel.conf");
      await writeFile(
        conf,
        [
          `port ${port}`,
          "bind 127.0.0.1",
          `dir ${dir}`,
          `logfile ${join(dir, "sentinel.log")}`,
          "sentinel announce-ip 127.0.0.1",
          `sentinel monitor ${SENTINEL_MASTER_NAME} 127.0.0.1 ${first.port} 2`,
          `sentinel down-after-milliseconds ${SENTINEL_MASTER_NAME} ${SENTINEL_DOWN_AFTER_MS}`,
          // Also how soon a restarted old primary is turned into a replica of the new one.
          `sentinel failover-timeout ${SENTINEL_MASTER_NAME} 3000`,
          `sentinel parallel-syncs ${SENTINEL_MASTER_NAME} 1`,
          "",
        ].join("\n"),
      );
      const child = spawn(binary, [conf, "--sentinel"], { stdio: "ignore" });
      sentinelChildren.add(child);
      child.once("exit", () => sentinelChildren.delete(child));
      sentinels.push({ port, dir, child });
      await waitForPing(port, 20_000);
    }
    // Every sentinel knows the replica and the other sentinels before anything is killed.
    await waitUntil("the sentinels to discover each other", 60_000, async () => {
      for (const s of sentinels) {
        const master = (await once(s.port, (r) => r.call("SENTINEL", ["MASTER", SENTINEL_MASTER_NAME]))) as string[];
        const field = (name: string) => Number(master[master.indexOf(name) + 1]);
        if (field("num-slaves") < 1 || field("num-other-sentinels") < 2) return false;
      }
      return true;
    });
  } catch (error) {
    await stopAll();
    throw error;
  }

  /** The primary every sentinel names, or null while they disagree (the new config spreads by gossip). */
  const agreedPrimaryPort = async (): Promise<number | null> => {
    const ports = new Set<number>();
    for (const s of sentinels) {
      const addr = (await once(s.port, (r) => r.call("SENTINEL", ["GET-MASTER-ADDR-BY-NAME", SENTINEL_MASTER_NAME]))) as string[];
      ports.add(Number(addr[1]));
    }
    return ports.size === 1 ? [...ports][0]! : null;
  };
  const primaryPort = async (): Promise<number> => {
    let lastError: unknown = null;
    for (const s of sentinels) {
      try {
        const addr = (await once(s.port, (r) => r.call("SENTINEL", ["GET-MASTER-ADDR-BY-NAME", SENTINEL_MASTER_NAME]))) as string[];
        return Number(addr[1]);
      } catch (error) {
        lastError = error;
      }
    }
    throw new Error(`no sentinel answers: ${String(lastError)}`);
  };
  const byPort = (port: number) => {
    const server = servers.find((s) => s.port === port);
    if (!server) throw new Error(`the sentinels name an unknown primary on port ${port}`);
    return server;
  };
  let stopped = false;
  return {
    servers,
    sentinelPorts: sentinels.map((s) => s.port),
    url: `redis-sentinel://${sentinels.map((s) => `127.0.0.1:${s.port}`).join(",")}/${SENTINEL_MASTER_NAME}`,
    masterName: SENTINEL_MASTER_NAME,
    primary: async () => byPort(await primaryPort()),
    async killPrimary() {
      const primary = byPort(await primaryPort());
      await primary.kill();
      return primary;
    },
    async waitForFailover(old, timeoutMs = 60_000) {
      let next: ThrowawayRedis | null = null;
      // Promoted once every sentinel says so: a sentinel still naming the old primary would send
      // clients to it the moment it is restarted.
      await waitUntil("the sentinels to promote the replica", timeoutMs, async () => {
        const port = await agreedPrimaryPort();
        if (port === null || port === old.port) return false;
        const role = (await once(port, (r) => r.call("ROLE"))) as unknown[];
        if (role[0] !== "master") return false;
        next = byPort(port);
        return true;
      });
      return next!;
    },
    async restart(server, timeoutMs = SENTINEL_RESYNC_TIMEOUT_MS) {
      await server.start();
      await waitForPing(server.port, 30_000);
      // As an orchestrator's start script does (ask the sentinels, start as a replica of the
      // primary they name): left alone, the sentinels would demote it only 8-16 s later, and
      // until then it is a primary with stale data. Sent again while it is not (yet) a replica
      // of the primary the sentinels agree on. On a loaded machine a full resync (the primary's
      // fork and RDB, the replica's load and AOF rewrite) can take minutes: what the last look
      // saw goes into the error, so a timeout says which step never came.
      let last = "nothing answered yet";
      let inStepAt = 0;
      await waitUntil(`:${server.port} to rejoin as an in-sync replica`, timeoutMs, async () => {
        try {
          const primary = await agreedPrimaryPort();
          if (primary === null || primary === server.port) {
            last = primary === null ? "the sentinels disagree on the primary" : "the sentinels still name this server as the primary";
            return false;
          }
          const info = await once(server.port, (r) => r.info("replication"));
          last = `primary :${primary}; ${replicationSummary(info)}`;
          if (!(info.includes("role:slave") && info.includes(`master_port:${primary}`))) {
            await once(server.port, (r) => r.call("REPLICAOF", ["127.0.0.1", String(primary)]));
            return false;
          }
          if (!(/master_link_status:up/.test(info) && /master_sync_in_progress:0/.test(info))) return false;
          // Link up is not in sync yet (replicaInSync): the replica must have applied everything
          // the primary had written when it was read, just after `lookedAt`.
          const lookedAt = Date.now();
          const look = await lookInSync(primary, server.port);
          last = `primary :${primary}; ${look.summary}`;
          if (look.inSync) inStepAt = lookedAt;
          return look.inSync;
        } catch (error) {
          last = `no answer (${error instanceof Error ? error.message : String(error)})`;
          return false;
        }
      }).catch((error: unknown) => {
        throw new Error(`${error instanceof Error ? error.message : String(error)}; last seen: ${last}`);
      });
      return inStepAt;
    },
    async offsets() {
      const primary = byPort(await primaryPort());
      const unread: string[] = [];
      const read = (port: number, field: string) =>
        once(port, (r) => r.info("replication")).then(
          (info) => offsetOf(info, field),
          (error: unknown) => {
            unread.push(error instanceof Error ? error.message : String(error));
            return null;
          },
        );
      const primaryOffset = await read(primary.port, "master_repl_offset");
      const replicas = await Promise.all(
        servers.filter((s) => s !== primary).map(async (s) => ({ port: s.port, offset: await read(s.port, "slave_repl_offset") })),
      );
      return { primaryPort: primary.port, primary: primaryOffset, replicas, unread };
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await stopAll();
    },
  };
}
