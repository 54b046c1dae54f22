/**
 * Redis for tests: throwaway `redis-server` processes (a shared one started by the vitest
 * globalSetup, test/setup/redis.ts; private ones for tests that kill, restart or reconfigure
 * their server), and a key prefix per test so tests sharing a server never see each other's jobs.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { Redis, type RedisOptions } from "ioredis";
import { signalAndWait } from "./child.js";
import { startOnFreePort } from "./ports.js";
import type { CrashableServer } from "./server.js";

export interface RedisServerOptions {
  /**
   * What the server persists: `"none"` (the default: fastest, for tests that never restart it),
   * or an append-only file fsynced `"always"` (before every reply) or `"everysec"`.
   */
  persistence?: "none" | "always" | "everysec";
  /** Extra `redis-server` arguments, e.g. `["--maxmemory-policy", "allkeys-lru"]`. */
  args?: string[];
}

/** A redis-server at `redis://127.0.0.1:PORT`; SIGTERM flushes its append-only file first. */
export interface ThrowawayRedis extends CrashableServer {
  /** The server's working directory (its AOF and log live here). */
  readonly dir: string;
  /** SIGSTOPs it: it keeps its connections and answers nothing (a hung server). */
  freeze(): void;
  /** SIGCONTs it after {@link freeze}. */
  thaw(): void;
}

/** Path of the redis-server binary, or null when none is installed. `REDIS_SERVER` overrides. */
export function findRedisServer(): string | null {
  const given = process.env.REDIS_SERVER;
  if (given) return existsSync(given) ? given : null;
  const dirs = [...(process.env.PATH ?? "").split(delimiter), "/usr/bin", "/usr/local/bin", "/opt/homebrew/bin"];
  for (const dir of dirs) {
    if (dir && existsSync(join(dir, "redis-server"))) return join(dir, "redis-server");
  }
  return null;
}

/**
 * Servers still running. A test process that ends without stopping its servers (a crash, a
 * timeout that skipped the teardown) kills them on its way out rather than leave them behind.
 */
const running = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

/** Starts a redis-server on a free port in a fresh temp dir; resolves once it answers PING. */
export async function startThrowawayRedis(options: RedisServerOptions = {}): Promise<ThrowawayRedis> {
  const binary = findRedisServer();
  if (binary === null) {
    throw new Error("no redis-server found: install one (apt-get install redis-server, brew install redis) or point " + "REDIS_URL at a Redis you provide");
  }
  const dir = await mkdtemp(join(tmpdir(), "conveyor-redis-"));
  const persistence = options.persistence ?? "none";
  let port = 0;
  let child: ChildProcess | null = null;

  const args = () => [
    "--port",
    String(port),
    "--bind",
    "127.0.0.1",
    "--dir",
    dir,
    "--logfile",
    join(dir, "redis.log"),
    "--daemonize",
    "no",
    "--save",
    "",
    ...(persistence === "none" ? ["--appendonly", "no"] : ["--appendonly", "yes", "--appendfsync", persistence]),
    ...(options.args ?? []),
  ];

  const start = async () => {
    // A second process on the same port would fail to bind and exit, while PING, answered by the
    // first, said it started: every later kill would then hit the dead one and leave the server up.
    const previous: ChildProcess | null = child;
    if (previous !== null && previous.exitCode === null && previous.signalCode === null) {
      throw new Error(`redis-server on port ${port} is still running (pid ${previous.pid}): stop or kill it before starting it again`);
    }
    const proc = spawn(binary, args(), { stdio: "ignore" });
    child = proc;
    running.add(proc);
    proc.once("exit", () => running.delete(proc));
    const exited = new Promise<string>((resolve) => {
      proc.once("exit", (code, signal) => resolve(`redis-server exited (${signal ?? code})`));
      proc.once("error", (error) => resolve(`redis-server did not start: ${error.message}`));
    });
    const ready = waitForPing(port, 20_000).then(() => null);
    const failure = await Promise.race([ready, exited]);
    if (failure !== null) {
      const log = await readFile(join(dir, "redis.log"), "utf8").catch(() => "");
      throw new Error(`${failure}${log ? `; log:\n${log.slice(-2_000)}` : ""}`);
    }
  };

  try {
    // A free port can be taken by someone else before the server binds it: a few tries.
    port = await startOnFreePort((free) => ((port = free), start()));
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }

  const waitExit = async (signal: NodeJS.Signals) => {
    const proc = child;
    child = null;
    // Redis drops a SIGTERM it cannot act on yet ("Writing initial AOF, can't exit.": a replica
    // rewriting its AOF right after a full sync, as a restarted cluster node does) and keeps running;
    // a test's teardown waited on it past 120 s. It gets the SIGTERM again every second, and a
    // SIGKILL if it still runs after 30 s. A stopped (SIGSTOP) server is continued first.
    if (signal === "SIGTERM") proc?.kill("SIGCONT");
    await signalAndWait(proc, signal, signal === "SIGTERM" ? { resendEveryMs: 1_000, forceAfterMs: 30_000 } : {});
  };
  let stopped = false;
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    dir,
    kill: () => waitExit("SIGKILL"),
    freeze: () => void child?.kill("SIGSTOP"),
    thaw: () => void child?.kill("SIGCONT"),
    terminate: () => waitExit("SIGTERM"),
    start,
    async stop() {
      if (stopped) return;
      stopped = true;
      await waitExit("SIGTERM");
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Resolves once a Redis on 127.0.0.1:`port` answers PING; rejects after `timeoutMs`. */
export async function waitForPing(port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await ping(port)) return;
    if (Date.now() > deadline) throw new Error(`no Redis answered on port ${port} within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** One raw PING, so waiting for a server needs no client library and leaves no connection behind. */
function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port });
    let answer = "";
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1_000, () => done(false));
    socket.once("error", () => done(false));
    socket.on("connect", () => socket.write("PING\r\n"));
    socket.on("data", (data) => {
      answer += data.toString();
      // "-LOADING" while the server replays its AOF: not ready yet.
      if (answer.includes("\r\n")) done(answer.startsWith("+PONG"));
    });
  });
}

/**
 * True when the Redis at `target` (a URL, or options naming sentinels) answers PING now: one fresh
 * connection with no retries and a 2 s connect timeout, closed after. What a chaos store's probe
 * asks ("is the store up?"), without the retries a client would hide an outage behind.
 */
export async function redisAnswers(target: string | RedisOptions): Promise<boolean> {
  const options: RedisOptions = {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    connectTimeout: 2_000,
    retryStrategy: () => null,
    sentinelRetryStrategy: () => null,
  };
  const client = typeof target === "string" ? new Redis(target, options) : new Redis({ ...options, ...target });
  client.on("error", () => undefined);
  try {
    await client.connect();
    return (await client.ping()) === "PONG";
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}

/** A key prefix no other test uses. */
export function testPrefix(label = "t"): string {
  return `cvt-${label}-${randomBytes(5).toString("hex")}`;
}

/** Deletes every key under `prefix` (and its `{prefix:...}` hash-tagged keys) on the server at `url`. */
export async function deletePrefix(url: string, prefix: string): Promise<void> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await redis.connect();
    for (const pattern of [`${prefix}:*`, `{${prefix}:*`]) {
      let cursor = "0";
      do {
        const [next, keys] = await redis.scan(cursor, "MATCH", pattern, "COUNT", 1000);
        cursor = next;
        if (keys.length > 0) await redis.unlink(...keys);
      } while (cursor !== "0");
    }
  } finally {
    redis.disconnect();
  }
}

/** The shared server's URL, or a failure saying why there is none (see test/setup/redis.ts). */
export function requireRedis(url: string, unavailable: string): string {
  if (!url) throw new Error(unavailable || "no Redis for the tests: set REDIS_URL");
  return url;
}

/**
 * A one-node Redis Cluster: cluster mode on, every slot on this node. Redis 7 then holds each
 * `#!lua` script to the slot of its first key, so a script touching another queue's (or any
 * untagged) key fails here exactly as it would on a real multi-node cluster.
 */
export async function startThrowawayRedisCluster(): Promise<ThrowawayRedis> {
  const server = await startThrowawayRedis({
    // Without a MEET a lone node does not know its own address and would announce an empty host.
    args: ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-announce-ip", "127.0.0.1"],
  });
  const admin = new Redis(server.url, { maxRetriesPerRequest: 1 });
  try {
    const slots = Array.from({ length: 16_384 }, (_, i) => i);
    await admin.call("CLUSTER", ["ADDSLOTS", ...slots]);
    const deadline = Date.now() + 20_000;
    while (!/cluster_state:ok/.test(String(await admin.call("CLUSTER", ["INFO"])))) {
      if (Date.now() > deadline) throw new Error("the one-node cluster did not reach cluster_state:ok within 20 s");
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } catch (error) {
    await server.stop();
    throw error;
  } finally {
    admin.disconnect();
  }
  return server;
}
