/**
 * The store under test, as the chaos runner controls it: a URL per scenario, and the faults the
 * store itself can suffer (crash and restart, connections cut).
 *
 * PostgreSQL and Redis run as throwaway servers started with the test helpers
 * (testkit/servers/postgres.ts, testkit/servers/redis.ts): the runner owns them, so it may crash them.
 * SQLite has no server: its "crash" is every process that has the file open (the writers) being
 * SIGKILLed at once, which the runner does itself (crashMode "processes").
 */
import { execFile } from "node:child_process";
import { readFileSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { userInfo } from "node:os";
import { promisify } from "node:util";
import pg from "pg";
import { Redis } from "ioredis";
import { findPostgresBin, startThrowawayPostgres, type ThrowawayPostgres } from "../testkit/servers/postgres.js";
import { findRedisServer, redisAnswers, startThrowawayRedis, waitForPing, type ThrowawayRedis } from "../testkit/servers/redis.js";
import type { ReplicationAtKill } from "./records.js";
import { rabbitmqStore, rabbitmqUnavailable, type BrokerView } from "./rabbitmq-store.js";

const exec = promisify(execFile);

export type BackendKind = "sqlite" | "postgres" | "redis" | "rabbitmq";
export const BACKENDS: readonly BackendKind[] = ["sqlite", "postgres", "redis", "rabbitmq"];

export interface Store {
  readonly kind: BackendKind;
  /**
   * The URL one scenario's processes use: a database file (in `dir`, the scenario's fresh
   * directory), a schema or a key prefix of its own.
   */
  urlFor(label: string, dir: string): string;
  /** How this store crashes, for the report. */
  readonly crashHow: string;
  /** "server": crash() and restart() act on the server. "processes": the runner kills every client. */
  readonly crashMode: "server" | "processes";
  /** Crashes the server without a clean shutdown. */
  crash(): Promise<void>;
  /** Starts it again; resolves once it accepts connections. */
  restart(): Promise<void>;
  /**
   * Whether the server answers a fresh connection now (true for SQLite, which has no server).
   * A crash counts as an outage only once a probe after it failed.
   */
  probe(): Promise<boolean>;
  /** Cuts every client connection; resolves with how many. Null: not possible here. */
  readonly cut: (() => Promise<number>) | null;
  /**
   * A store with one write lock for all its clients (SQLite): whether process `pid` holds it for
   * the store at `url`. A worker SIGSTOPped while holding it blocks every other process's writes
   * (claims, heartbeats, rescues) until its SIGCONT: the store is down for that long.
   */
  readonly holdsWriteLock?: (pid: number, url: string) => boolean;
  /**
   * Replicated stores (chaos/topologies.ts): kills the primary (the master serving the chaos
   * queue) and resolves once a replica took over, then gives the topology its redundancy back
   * (the killed node rejoins as a replica, or a new standby is built).
   */
  readonly failover?: () => Promise<FailoverOutcome>;
  /** Redis Cluster: moves the chaos queue's slot (with slots around it) to another master. */
  readonly reshard?: () => Promise<ReshardOutcome>;
  /**
   * A store without job records (a broker: `capabilities.jobRecords` false) is judged from what
   * the harness observes independently, and this is how it reads the broker (chaos/rabbitmq-store.ts).
   * Null for the stores that keep a record of every job.
   */
  readonly broker: BrokerView | null;
  close(): Promise<void>;
}

export interface FailoverOutcome {
  /** When the kill was sent. */
  from: number;
  /** When a direct connection to the killed primary failed (the kill is observed), or null. */
  probeFailedAt: number | null;
  /** When the replica was seen serving as primary. */
  promotedAt: number;
  /** When the topology had its redundancy back (killed node rejoined, standby rebuilt). */
  restoredAt: number;
  how: string;
  /** Which node died and which took over. */
  detail: string;
  /** Where replication stood at the kill (Redis Sentinel): what ties a lost acknowledged write to it. */
  replication?: ReplicationAtKill;
}

export interface ReshardOutcome {
  from: number;
  to: number;
  slots: number;
  detail: string;
}

/**
 * Whether this store's backend holds its rescue after store trouble: the PostgreSQL and Redis
 * backends leave leases alone while the store fails and for a lease after it answers again
 * (src/backend/lease-hold.ts), so a dead worker's jobs come back up to a lease later when an
 * outage or a connection cut came between. SQLite has no connection to lose; RabbitMQ's broker
 * redelivers by itself.
 */
export function holdsRescueAfterStoreTrouble(kind: BackendKind): boolean {
  return kind === "postgres" || kind === "redis";
}

/** Why a backend cannot be used on this machine, or null when it can. */
export async function unavailable(kind: BackendKind): Promise<string | null> {
  if (kind === "postgres" && (await findPostgresBin()) === null) return "no PostgreSQL server under /usr/lib/postgresql (apt-get install postgresql-15)";
  if (kind === "redis" && findRedisServer() === null) return "no redis-server on PATH (apt-get install redis-server)";
  if (kind === "rabbitmq") return rabbitmqUnavailable();
  return null;
}

export async function openStore(kind: BackendKind): Promise<Store> {
  switch (kind) {
    case "sqlite":
      return sqliteStore();
    case "postgres":
      return postgresStore();
    case "redis":
      return redisStore();
    case "rabbitmq":
      return rabbitmqStore(label);
  }
}

function label(text: string): string {
  return text
    .toLowerCase()
    .replace(/[^a-z0-9_]/g, "_")
    .slice(0, 40);
}

/** Whether a fresh connection to `url` runs `SELECT 1` (within 2 s to connect). */
export async function postgresAnswers(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  client.on("error", () => undefined);
  try {
    await client.connect();
    await client.query("SELECT 1");
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

function sqliteStore(): Store {
  return {
    kind: "sqlite",
    urlFor: (name, dir) => `sqlite:${join(dir, `${label(name)}.db`)}`,
    crashHow: "SIGKILL of every process with the database open (producer and workers) at once",
    crashMode: "processes",
    crash: async () => {},
    restart: async () => {},
    probe: async () => true,
    cut: null,
    holdsWriteLock: (pid, url) => holdsWalWriteLock(pid, url.slice("sqlite:".length)),
    broker: null,
    close: async () => {},
  };
}

/**
 * Byte offset of the WAL write lock in a SQLite database's `-shm` file (WALINDEX_LOCK_OFFSET
 * 120 + WAL_WRITE_LOCK 0, sqlite3's wal.c): the writer holds a POSIX write lock on that byte
 * from BEGIN IMMEDIATE (or its first write) to COMMIT, and /proc/locks lists it with its pid.
 */
const WAL_WRITE_LOCK_BYTE = 120;

/** Whether `pid` holds the WAL write lock of the database file `file` (Linux /proc/locks). */
export function holdsWalWriteLock(pid: number, file: string, locks?: string): boolean {
  let inode: number;
  try {
    inode = statSync(`${file}-shm`).ino;
  } catch {
    return false;
  }
  const table = locks ?? readFileSync("/proc/locks", "utf8");
  // "1: POSIX  ADVISORY  WRITE 18777 fe:00:2148549 120 120"; the end may be EOF.
  for (const line of table.split("\n")) {
    const m = /^\d+:\s+POSIX\s+\S+\s+WRITE\s+(\d+)\s+[0-9a-f]+:[0-9a-f]+:(\d+)\s+(\d+)\s+(\d+|EOF)\s*$/.exec(line);
    if (!m || Number(m[1]) !== pid || Number(m[2]) !== inode) continue;
    const start = Number(m[3]);
    const end = m[4] === "EOF" ? Infinity : Number(m[4]);
    if (start <= WAL_WRITE_LOCK_BYTE && WAL_WRITE_LOCK_BYTE <= end) return true;
  }
  return false;
}

async function postgresStore(): Promise<Store> {
  const bin = await findPostgresBin();
  if (bin === null) throw new Error("no PostgreSQL installed");
  const server: ThrowawayPostgres = await startThrowawayPostgres({ database: "chaos", bin });
  const asRoot = userInfo().uid === 0;
  const pgCtl = async (args: string[]) => {
    const file = join(bin, "pg_ctl");
    const [cmd, argv] = asRoot ? ["runuser", ["-u", "postgres", "--", file, ...args]] : [file, args];
    await exec(cmd, argv, { timeout: 120_000 });
  };
  const admin = () => new pg.Client({ connectionString: server.url, connectionTimeoutMillis: 5_000 });
  return {
    kind: "postgres",
    urlFor: (name) => `${server.url}?schema=chaos_${label(name)}`,
    crashHow: "pg_ctl stop -m immediate (no checkpoint, crash recovery on restart), then pg_ctl restart",
    crashMode: "server",
    crash: () => pgCtl(["-D", server.dataDir, "-m", "immediate", "-w", "stop"]),
    // With the server stopped, `pg_ctl restart` starts it with the options it last ran with
    // (postmaster.opts): same port, socket directory and settings as the helper chose.
    restart: () => pgCtl(["-D", server.dataDir, "-l", join(dirname(server.dataDir), "server.log"), "-w", "-t", "60", "restart"]),
    probe: () => postgresAnswers(server.url),
    cut: async () => {
      const client = admin();
      await client.connect();
      try {
        const r = await client.query<{ n: string }>(
          `SELECT count(pg_terminate_backend(pid))::text AS n FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`,
        );
        return Number(r.rows[0]?.n ?? 0);
      } finally {
        await client.end();
      }
    },
    broker: null,
    close: () => server.stop(),
  };
}

async function redisStore(): Promise<Store> {
  // appendfsync always: every write is on disk before Redis replies, so a SIGKILL loses nothing
  // that was acknowledged.
  const server: ThrowawayRedis = await startThrowawayRedis({ persistence: "always" });
  return {
    kind: "redis",
    urlFor: (name) => `${server.url}?prefix=chaos-${label(name)}`,
    crashHow: "SIGKILL of redis-server (appendonly yes, appendfsync always), then a restart on the same AOF",
    crashMode: "server",
    crash: () => server.kill(),
    restart: async () => {
      await server.start();
      await waitForPing(server.port, 30_000);
    },
    probe: () => redisAnswers(server.url),
    cut: async () => {
      const admin = new Redis(server.url, { maxRetriesPerRequest: 1, lazyConnect: true });
      try {
        await admin.connect();
        // SKIPME yes (the default) spares this connection; normal and pub/sub clients both go.
        const normal = Number(await admin.call("CLIENT", ["KILL", "TYPE", "normal"]));
        const pubsub = Number(await admin.call("CLIENT", ["KILL", "TYPE", "pubsub"]));
        return normal + pubsub;
      } finally {
        admin.disconnect();
      }
    },
    broker: null,
    close: () => server.stop(),
  };
}
