/**
 * A slot migration longer than a lease, on a real Redis Cluster (3 masters, 1 replica each).
 *
 * The queue's slot is put half moved by hand, the way `redis-cli --cluster reshard` leaves it between
 * two MIGRATE batches (IMPORTING on the target, MIGRATING on the source, the queue's `active` index
 * already on the target, everything else still on the source), and held there while the lease runs
 * out: the holder's heartbeat and acknowledgement, and another process's rescue, are all refused
 * (TRYAGAIN). Then the move is finished. Before slot-migration.ts the other process's first rescue
 * took the held job back (lease expired) and the holder's acknowledgement was refused: the job ran
 * twice with no worker at fault. Now the rescue leaves the queue's leases alone for a lease after
 * the last refusal, the acknowledgement lands, and a job whose holder is really gone is rescued
 * once the window ends.
 *
 * Also here, on the same cluster: waitForReplicas' WAIT reaches the node that ran the script
 * (replica-wait.ts sends it behind an EXISTS of the script's key), shown by killing only the
 * replica of the queue's own master.
 */
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { RedisBackend } from "../../src/backend/redis/backend.js";
import { DEFAULT_LEASE_HOLD_MS } from "../../src/backend/lease-hold.js";
import { hashTagOf, isSlotMigrationError } from "../../src/backend/redis/slot-migration.js";
import { FakeClock } from "../../src/core/clock.js";
import { silentLogger } from "../../src/core/logger.js";
import { A, claim, enqueueOne, errorInfo, mustGet, spec } from "../conformance/fixtures.js";
import { findRedisServer, testPrefix } from "../helpers/redis.js";
import { startThrowawayRedisClusterTopology, type ClusterNode, type ThrowawayRedisCluster } from "../helpers/redis-topology.js";

if (findRedisServer() === null) throw new Error("no redis-server to build a Redis Cluster from: install redis-server");

const LEASE_MS = 1_000;
const QUEUE = "moving";

let cluster: ThrowawayRedisCluster;
const opened: Backend[] = [];
const clients: Redis[] = [];
beforeAll(async () => {
  cluster = await startThrowawayRedisClusterTopology();
}, 120_000);
// As long as the start: six servers to stop beside another test file on two cores (a CI run's
// teardown passed 60 s). A clean-clone run once hung here past 120 s: the replica the last test
// restarts was still writing its initial AOF and Redis dropped the SIGTERM of its stop; the
// throwaway server now sends it again (testkit/servers/redis.ts, tested in redis-cluster-failover).
afterAll(async () => {
  await Promise.allSettled(opened.map((b) => b.close()));
  for (const c of clients) c.disconnect();
  await cluster?.stop();
}, 120_000);

async function open(prefix: string, clock: FakeClock): Promise<Backend> {
  const backend = new RedisBackend({ connection: cluster.url, prefix, clock, logger: silentLogger });
  opened.push(backend);
  await backend.migrate();
  return backend;
}

function node(port: number): Redis {
  const client = new Redis({ host: "127.0.0.1", port, lazyConnect: false, maxRetriesPerRequest: 2 });
  clients.push(client);
  return client;
}

/** Moves the listed keys of `slot` from `from` to `to` (what one MIGRATE batch of a reshard does). */
async function migrateKeys(from: Redis, to: ClusterNode, keys: readonly string[]): Promise<void> {
  if (keys.length > 0) await from.call("MIGRATE", ["127.0.0.1", String(to.port), "", "0", "5000", "KEYS", ...keys]);
}

/** Opens `slot` for a move from `source` to another master, as a reshard does before its first MIGRATE. */
async function startMove(slot: number, source: ClusterNode): Promise<{ src: Redis; target: ClusterNode }> {
  const masters = (await cluster.view()).filter((v) => v.role === "master" && !v.failed);
  const targetView = masters.find((v) => v.id !== source.id)!;
  const target = cluster.nodes.find((n) => n.id === targetView.id)!;
  const src = node(source.port);
  await node(target.port).call("CLUSTER", ["SETSLOT", String(slot), "IMPORTING", source.id]);
  await src.call("CLUSTER", ["SETSLOT", String(slot), "MIGRATING", target.id]);
  return { src, target };
}

/** Moves the rest of `slot`'s keys and tells every master the slot's new owner (the end of a reshard's slot). */
async function finishMove(meta: string, slot: number, src: Redis, target: ClusterNode): Promise<void> {
  for (;;) {
    const keys = (await src.call("CLUSTER", ["GETKEYSINSLOT", String(slot), "100"])) as string[];
    if (keys.length === 0) break;
    await migrateKeys(src, target, keys);
  }
  // The target first, then the source, then the other masters.
  const masters = (await cluster.view()).filter((v) => v.role === "master" && !v.failed && v.id !== target.id);
  await node(target.port).call("CLUSTER", ["SETSLOT", String(slot), "NODE", target.id]);
  for (const other of masters) await node(other.port).call("CLUSTER", ["SETSLOT", String(slot), "NODE", target.id]);
  expect((await cluster.masterOf(meta)).id).toBe(target.id);
}

describe("slot-migration.ts on its own", () => {
  it("recognises Redis' migration replies, also as a cause, and nothing else", () => {
    const reply = (message: string): Error => Object.assign(new Error(message), { name: "ReplyError" });
    expect(isSlotMigrationError(reply("TRYAGAIN Multiple keys request during rehashing of slot"))).toBe(true);
    expect(isSlotMigrationError(new Error("store unreachable", { cause: reply("TRYAGAIN Multiple keys request") }))).toBe(true);
    expect(isSlotMigrationError(reply("ERR Script attempted to access a non local key in a cluster node script"))).toBe(true);
    expect(isSlotMigrationError(new Error("Too many Cluster redirections. Last error: ReplyError: ASK 4772 127.0.0.1:7001"))).toBe(true);
    expect(isSlotMigrationError(new Error("Too many Cluster redirections. Last error: ReplyError: MOVED 14604 127.0.0.1:41191"))).toBe(true);
    expect(isSlotMigrationError(reply("CLUSTERDOWN The cluster is down"))).toBe(false);
    expect(isSlotMigrationError(new Error("the TASK 12 failed"))).toBe(false);
    expect(hashTagOf("p:{emails}:meta")).toBe("emails");
    expect(hashTagOf("p:{emails}:j:{odd}")).toBe("emails");
    expect(hashTagOf("p:queues")).toBe("p:queues");
  });
});

describe("a slot migration longer than a lease (3-master Redis Cluster)", () => {
  it("runs no job twice: the rescue waits for the holders, and takes back only a job whose holder is gone", async () => {
    const prefix = testPrefix("mig");
    const clock = new FakeClock(Date.now());
    const holder = await open(prefix, clock); // the worker holding the jobs
    const rescuer = await open(prefix, clock); // another worker's maintenance
    const finished = await enqueueOne(holder, { queue: QUEUE });
    const abandoned = await enqueueOne(holder, { queue: QUEUE });
    const claimed = await claim(holder, { queues: [QUEUE], limit: 2, leaseMs: LEASE_MS, worker: A });
    expect(claimed.map((c) => c.job.id).sort()).toEqual([finished, abandoned].sort());
    const leaseOf = (id: string) => claimed.find((c) => c.job.id === id)!.lease;

    // Half move the queue's slot: its active index is on the target already, the rest not yet.
    const meta = `${prefix}:{${QUEUE}}:meta`;
    const slot = await cluster.slotOf(meta);
    const source = await cluster.masterOf(meta);
    const { src, target } = await startMove(slot, source);
    await migrateKeys(src, target, [`${prefix}:{${QUEUE}}:active`]);

    // For longer than the lease: nothing of the queue's can renew, settle or rescue.
    // (TRYAGAIN, or ioredis giving up after ASK / MOVED back and forth, as keys are split.)
    await expect(holder.heartbeat([leaseOf(finished), leaseOf(abandoned)], LEASE_MS)).rejects.toSatisfy(isSlotMigrationError);
    clock.advance(LEASE_MS + 500);
    await expect(holder.complete([{ lease: leaseOf(finished), result: "done" }])).rejects.toSatisfy(isSlotMigrationError);
    await expect(rescuer.rescueExpired()).rejects.toSatisfy(isSlotMigrationError);

    // The move ends: every other key follows, then every master learns the slot's new owner.
    await finishMove(meta, slot, src, target);

    // Both leases are past their expiry now, yet the rescue that ran first after the move takes
    // neither: the holder gets its acknowledgement in, under its own token.
    expect(await rescuer.rescueExpired()).toEqual([]);
    expect(await holder.complete([{ lease: leaseOf(finished), result: "done" }])).toEqual(["applied"]);
    expect((await mustGet(rescuer, finished)).state).toBe("completed");

    // The other holder never comes back: its job is taken back once the window is over.
    clock.advance(DEFAULT_LEASE_HOLD_MS);
    const rescued = await rescuer.rescueExpired();
    expect(rescued.map((r) => [r.id, r.state])).toEqual([[abandoned, "waiting"]]);
    // Fencing still holds: the old lease cannot renew or settle the rescued job.
    expect((await holder.heartbeat([leaseOf(abandoned)], LEASE_MS)).lost.map((l) => l.reason)).toEqual(["expired"]);
    expect(await holder.complete([{ lease: leaseOf(abandoned), result: "late" }])).toEqual(["stale"]);
    const again = await claim(rescuer, { queues: [QUEUE], limit: 1, leaseMs: LEASE_MS });
    expect(again.map((c) => [c.job.id, c.job.attempt])).toEqual([[abandoned, 2]]);
  }, 120_000);
});

describe("a script that would reach a key already moved (3-master Redis Cluster)", () => {
  // All of a queue's keys share one slot ({<queue>} hash tag), but a reshard moves them one MIGRATE
  // batch at a time. Here only the queue's event log has left: the rescue's declared keys are all on
  // the source, so Redis runs it there, and before the slot probe it took the job out of `active`, then
  // failed at the event log's XADD ("non local key") and kept that: the job stayed 'active' outside
  // the active index, never rescued again. Now every call names the slot probe (scripts.ts slotProbeKey).
  it("is refused before it writes anything, and the jobs are rescued once the move ends", async () => {
    const queue = "half-moved";
    const prefix = testPrefix("part");
    const clock = new FakeClock(Date.now());
    const holder = await open(prefix, clock);
    // Every key the rescue names exists (Redis refuses a script whose named keys are split with
    // TRYAGAIN before it runs): a finished job (expiry), a dead one (dead), a scheduled one (idx).
    // Two held jobs, so the active index never empties (an empty key is deleted, and reading a
    // missing key of a slot being moved is answered ASK).
    const held = [await enqueueOne(holder, { queue }), await enqueueOne(holder, { queue })];
    const [finished, died] = [await enqueueOne(holder, { queue }), await enqueueOne(holder, { queue })];
    await enqueueOne(holder, { queue, delayMs: 3_600_000 });
    const claimed = await claim(holder, { queues: [queue], limit: 4, leaseMs: LEASE_MS, worker: A });
    const leaseOf = (job: string) => claimed.find((c) => c.job.id === job)!.lease;
    await holder.complete([{ lease: leaseOf(finished), result: "done" }]);
    await holder.fail([{ lease: leaseOf(died), error: errorInfo("gone"), retryDelayMs: null }]);
    clock.advance(LEASE_MS + 500);

    const meta = `${prefix}:{${queue}}:meta`;
    const slot = await cluster.slotOf(meta);
    const { src, target } = await startMove(slot, await cluster.masterOf(meta));
    await migrateKeys(src, target, [`${prefix}:{${queue}}:ev`]);
    const named = ["meta", "active", "dead", "expiry", "idx"].map((k) => `${prefix}:{${queue}}:${k}`);
    expect(await src.exists(...named)).toBe(named.length);

    // A process that never saw this move (no hold): its rescue is refused, with nothing written.
    const rescuer = await open(prefix, clock);
    await expect(rescuer.rescueExpired()).rejects.toSatisfy(isSlotMigrationError);
    expect(await src.zcard(`${prefix}:{${queue}}:active`)).toBe(2);
    for (const id of held) expect(await src.hget(`${prefix}:{${queue}}:j:${id}`, "st")).toBe("a");
    // The same for an add: no job half stored.
    await expect(holder.enqueue([spec({ queue })])).rejects.toSatisfy(isSlotMigrationError);

    await finishMove(meta, slot, src, target);
    // The rescuer saw the slot refuse it: it holds off for a lease after the slot first answers it again.
    expect(await rescuer.rescueExpired()).toEqual([]);
    clock.advance(DEFAULT_LEASE_HOLD_MS);
    const rescued = await rescuer.rescueExpired();
    expect(rescued.map((r) => [r.id, r.state]).sort()).toEqual(held.map((id) => [id, "waiting"]).sort());
    const again = await claim(rescuer, { queues: [queue], limit: 2, leaseMs: LEASE_MS });
    expect(again.map((c) => [c.job.id, c.job.attempt]).sort()).toEqual(held.map((id) => [id, 2]).sort());
    expect(await rescuer.list({ queue })).toHaveLength(5);
  }, 120_000);
});

describe("waitForReplicas on the 3-master cluster", () => {
  it("waits for the replica of the queue's own master (the WAIT follows the script to its node)", async () => {
    const prefix = testPrefix("wait");
    const queue = "waited";
    // Adds that must be acknowledged get a generous WAIT (a loaded machine's replica answers late,
    // not never); the one that must be refused gets a short one (a dead replica never answers).
    const backend = new RedisBackend({ connection: cluster.url, prefix, logger: silentLogger, waitForReplicas: { replicas: 1, timeoutMs: 20_000 } });
    const impatient = new RedisBackend({ connection: cluster.url, prefix, logger: silentLogger, waitForReplicas: { replicas: 1, timeoutMs: 500 } });
    opened.push(backend, impatient);
    await backend.migrate();
    await enqueueOne(backend, { queue });
    // Only the queue's master loses its replica: the other masters keep theirs. A WAIT sent to any
    // other node would answer 1 at once (that connection wrote nothing there) and hide the loss.
    const meta = `${prefix}:{${queue}}:meta`;
    const master = await cluster.masterOf(meta);
    const replicaView = (await cluster.view()).find((v) => v.role === "replica" && v.masterId === master.id)!;
    const replica = cluster.nodes.find((n) => n.id === replicaView.id)!;
    await replica.server.kill();
    try {
      await expect(enqueueOne(impatient, { queue })).rejects.toThrow(/only 0 of 1 replica/);
    } finally {
      await cluster.restart(replica);
    }
    await enqueueOne(backend, { queue });
  }, 120_000);
});
