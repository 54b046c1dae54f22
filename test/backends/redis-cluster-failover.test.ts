/**
 * An add whose reply is lost, on connections that send it again: a real Redis Cluster (3 masters,
 * 1 replica each) whose master is SIGKILLed, and a single server under a client that resends.
 *
 * The add runs (and, on the cluster, reaches the replica), but its reply never arrives: the master
 * dies with it, or the connection drops. ioredis sends the command again on its own (the Cluster
 * after a closed connection, a plain client with autoResendUnfulfilledCommands after reconnecting).
 * Before the attempt key (keys.ts `addAttempt`, attempt_replay in lua/_common.lua) that second run
 * found the job the first one stored and answered `duplicate: true` for an id nobody else used: a
 * 10-minute chaos run had 10 such answers. Now the first run keeps its reply, the key replicates with
 * the job, and the resend, wherever it lands, answers it.
 *
 * The reply is lost by hand, so the test does not depend on the timing of a kill: the client stops
 * reading the master's socket before the add is sent, and after the kill (or instead of it) the socket
 * is destroyed with the reply unread.
 *
 * Also here: closing a backend whose cluster has a master that answers nothing (SIGSTOPped) settles
 * within QUIT_GRACE_MS; QUIT, queued behind an add that never gets its reply, waited forever before.
 */
import type { Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { Redis, type Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { RedisBackend } from "../../src/backend/redis/backend.js";
import { connect, ownConnectionOptions, QUIT_GRACE_MS } from "../../src/backend/redis/connection.js";
import { silentLogger } from "../../src/core/logger.js";
import { spec } from "../conformance/fixtures.js";
import { findRedisServer, startThrowawayRedis, testPrefix, type ThrowawayRedis } from "../helpers/redis.js";
import { startThrowawayRedisClusterTopology, type ThrowawayRedisCluster } from "../helpers/redis-topology.js";
import { waitFor } from "../helpers/wait-for.js";

if (findRedisServer() === null) throw new Error("no redis-server to build a Redis Cluster from: install redis-server");

const QUEUE = "lost-replies";

let cluster: ThrowawayRedisCluster;
let single: ThrowawayRedis;
const opened: Backend[] = [];
const clients: Array<Redis | Cluster> = [];
beforeAll(async () => {
  [cluster, single] = await Promise.all([startThrowawayRedisClusterTopology(), startThrowawayRedis()]);
}, 120_000);
afterAll(async () => {
  await Promise.allSettled(opened.map((b) => b.close()));
  for (const c of clients) c.disconnect();
  await Promise.all([cluster?.stop(), single?.stop()]);
}, 120_000);

function track<B extends Backend>(backend: B): B {
  opened.push(backend);
  return backend;
}

/** The socket of an ioredis connection (a cluster node's, or a plain client's). */
function socketOf(redis: Redis): Socket {
  return redis.stream;
}

describe("an add whose reply a master's SIGKILL took (3-master Redis Cluster)", () => {
  it("answers created once the cluster's resend reaches the promoted replica, and the job is stored once", async () => {
    const prefix = testPrefix("lost");
    // The very client the backend opens for a redis-cluster:// URL, passed in so the test can reach
    // the master's socket.
    const { client } = connect(cluster.url, prefix);
    clients.push(client);
    const producer = track(new RedisBackend({ connection: client, prefix, logger: silentLogger }));
    const observer = track(new RedisBackend({ connection: cluster.url, prefix, logger: silentLogger }));
    await producer.migrate();
    // A first add opens the connection to the queue's master and loads the script there.
    expect((await producer.enqueue([spec({ queue: QUEUE })]))[0]!.duplicate).toBe(false);

    const meta = `${prefix}:{${QUEUE}}:meta`;
    const master = await cluster.masterOf(meta);
    const node = (client as Cluster).nodes("master").find((n) => n.options.port === master.port);
    if (node === undefined) throw new Error(`the client has no connection to the queue's master :${master.port}`);
    const socket = socketOf(node);

    socket.pause(); // the reply will arrive, and nobody will read it
    const job = spec({ queue: QUEUE, data: { n: 1 } });
    const answer = producer.enqueue([job]);
    let settled = false;
    void answer.finally(() => (settled = true)).catch(() => undefined);
    await waitFor(async () => (await observer.get(job.id)) !== null, { timeoutMs: 20_000 });
    // Everything the master did so far is on its replica: a write behind the add, and WAIT for it.
    const direct = new Redis({ host: "127.0.0.1", port: master.port, maxRetriesPerRequest: 0 });
    clients.push(direct);
    await direct.set(`${prefix}:{${QUEUE}}:probe`, "1");
    expect(await direct.call("WAIT", ["1", "10000"])).toBe(1);
    direct.disconnect();

    await cluster.kill(master);
    await cluster.waitForFailover(master);
    expect(settled).toBe(false);
    socket.destroy(); // the reply dies unread: ioredis' Cluster sends the add again

    const [result] = await answer;
    expect(result).toEqual({ id: job.id, duplicate: false });
    expect((await observer.get(job.id))?.state).toBe("waiting");
    expect(await observer.list({ queue: QUEUE })).toHaveLength(2);
    // Someone else's add of that id is still a duplicate.
    expect((await observer.enqueue([{ ...job }]))[0]).toEqual({ id: job.id, duplicate: true });

    await cluster.restart(master);
  }, 120_000);
});

describe("an add whose reply a dropped connection took (single server, a client that resends)", () => {
  it("answers created after ioredis resends it on the new connection", async () => {
    const prefix = testPrefix("resend");
    // An application's own client with ioredis' default: unanswered commands are sent again after a reconnect.
    const client = new Redis(single.url);
    clients.push(client);
    const producer = track(new RedisBackend({ connection: client, prefix, logger: silentLogger }));
    const observer = track(new RedisBackend({ connection: single.url, prefix, logger: silentLogger }));
    await producer.migrate();
    expect((await producer.enqueue([spec({ queue: QUEUE })]))[0]!.duplicate).toBe(false);

    const socket = socketOf(client);
    socket.pause();
    const job = spec({ queue: QUEUE, data: { n: 2 } });
    const answer = producer.enqueue([job]);
    await waitFor(async () => (await observer.get(job.id)) !== null, { timeoutMs: 20_000 });
    socket.destroy();

    expect((await answer)[0]).toEqual({ id: job.id, duplicate: false });
    expect((await observer.enqueue([{ ...job }]))[0]).toEqual({ id: job.id, duplicate: true });
  }, 60_000);

  it("keeps nothing for a connection that never resends (the backend's own)", async () => {
    const prefix = testPrefix("own");
    const backend = track(new RedisBackend({ connection: single.url, prefix, logger: silentLogger }));
    await backend.migrate();
    await backend.enqueue([spec({ queue: QUEUE })]);
    const direct = new Redis(single.url);
    clients.push(direct);
    expect(await direct.keys(`${prefix}:{${QUEUE}}:added:*`)).toEqual([]);
    expect(ownConnectionOptions(prefix).autoResendUnfulfilledCommands).toBe(false);
  });
});

describe("closing while a master answers nothing (3-master Redis Cluster)", () => {
  it("settles within the grace, and the add still waiting for its reply fails instead of hanging", async () => {
    const prefix = testPrefix("close");
    const backend = new RedisBackend({ connection: cluster.url, prefix, logger: silentLogger });
    await backend.migrate();
    await backend.enqueue([spec({ queue: QUEUE })]);
    const master = await cluster.masterOf(`${prefix}:{${QUEUE}}:meta`);
    master.server.freeze();
    try {
      const stuck = backend.enqueue([spec({ queue: QUEUE })]).then(
        () => "answered",
        (error: unknown) => `failed: ${String(error)}`,
      );
      const startedAt = Date.now();
      // Far above the grace, so a loaded machine cannot fail it; without the bound it never settles.
      const closed = await Promise.race([backend.close().then(() => "closed"), sleep(QUIT_GRACE_MS * 6).then(() => "still closing")]);
      expect(closed).toBe("closed");
      expect(Date.now() - startedAt).toBeGreaterThanOrEqual(QUIT_GRACE_MS - 100);
      expect(await Promise.race([stuck, sleep(QUIT_GRACE_MS * 6).then(() => "still waiting")])).toMatch(/^failed: .*closed/i);
    } finally {
      master.server.thaw();
    }
    await cluster.waitHealthy();
  }, 120_000);
});

describe("the throwaway Redis stop (testkit/servers/redis.ts)", () => {
  // What hung the slot-migration file's teardown past 120 s: a cluster node restarted as a replica
  // rewrites its AOF after the full sync, and Redis drops a SIGTERM meanwhile ("Writing initial AOF,
  // can't exit.") and runs on. Here the rewrite is made slow on purpose (rdb-key-save-delay).
  it("stops a server that dropped the first SIGTERM while it wrote its initial AOF", async () => {
    const server = await startThrowawayRedis();
    const direct = new Redis(server.url);
    clients.push(direct);
    await direct.eval("for i = 1, 20 do redis.call('SET', 'k' .. i, 'v') end", 0);
    await direct.config("SET", "rdb-key-save-delay", "100000"); // 100 ms per key: a 2 s rewrite
    await direct.config("SET", "appendonly", "yes");
    direct.disconnect();
    // The SIGTERM sent again lands once the rewrite is done (about 2 s); before, stop() never
    // returned. 20 s stays below the SIGKILL the stop falls back to after 30 s.
    const stopped = await Promise.race([server.stop().then(() => "stopped"), sleep(20_000).then(() => "still running")]);
    expect(stopped).toBe("stopped");
  }, 60_000);
});
