/**
 * A PostgreSQL primary with a streaming-replication hot standby, on loopback, for the tests and
 * the chaos runner: the primary is a throwaway server of testkit/servers/postgres.ts, the standby a
 * `pg_basebackup -R` of it started with the same binaries. Controls: crash the primary
 * (`pg_ctl stop -m immediate`: no shutdown checkpoint, WAL not yet shipped stays behind) and
 * promote the standby (`pg_ctl promote`).
 *
 * `synchronous: true` names the standby in `synchronous_standby_names`, so a commit returns only
 * once the standby has flushed it (`synchronous_commit = on`): nothing acknowledged is lost on
 * promotion. Without it replication is asynchronous and a commit may be acknowledged before the
 * standby has it.
 */
import { execFile, spawn } from "node:child_process";
import { chmod, chown, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import pg from "pg";
import { freePort } from "./ports.js";
import { findPostgresBin, SERVER_USER, serverUser, startThrowawayPostgres } from "./postgres.js";

const exec = promisify(execFile);

/** The standby's name in `pg_stat_replication` and `synchronous_standby_names`. */
export const STANDBY_NAME = "conveyor_standby";

export interface PostgresPair {
  /** `postgresql://postgres@127.0.0.1:A,127.0.0.1:B/DB?target_session_attrs=read-write` (both servers). */
  readonly url: string;
  readonly synchronous: boolean;
  /** Port of the server that is primary now (roles swap on promote). */
  primaryPort(): number;
  standbyPort(): number;
  /** Crashes the primary: `pg_ctl stop -m immediate`. */
  crashPrimary(): Promise<void>;
  /** `pg_ctl promote` on the standby; resolves once it accepts writes. It is the primary from then on. */
  promote(): Promise<void>;
  /**
   * Makes the crashed old primary a standby of the new one: its data directory replaced by a
   * `pg_basebackup -R` of the primary, started on its old port (so the multi-host URL still lists
   * both), synchronous again when the pair is. Ready for the next failover.
   */
  rebuildStandby(): Promise<void>;
  /** Bytes of WAL the standby has not replayed yet (`pg_stat_replication` on the primary); null when not streaming. */
  replayLagBytes(): Promise<number | null>;
  stop(): Promise<void>;
}

export interface PostgresPairOptions {
  database?: string;
  /** Commits wait for the standby's flush (synchronous replication). Default false. */
  synchronous?: boolean;
  /** Extra settings for both servers. */
  settings?: Record<string, string>;
}

export async function startPostgresPair(options: PostgresPairOptions = {}): Promise<PostgresPair> {
  const bin = await findPostgresBin();
  if (bin === null) throw new Error("no PostgreSQL server under /usr/lib/postgresql (apt-get install postgresql-15)");
  const database = options.database ?? "conveyor_test";
  const synchronous = options.synchronous ?? false;
  const first = await startThrowawayPostgres({
    database,
    bin,
    settings: { wal_level: "replica", max_wal_senders: "10", wal_keep_size: "512MB", ...(options.settings ?? {}) },
  });
  const asRoot = userInfo().uid === 0;
  const dir = await mkdtemp(join(tmpdir(), "conveyor-pg-standby-"));
  if (asRoot) {
    const { uid, gid } = serverUser();
    await chown(dir, uid, gid);
  }
  await chmod(dir, 0o700);
  const run = async (program: string, args: string[], logFile?: string) => {
    const file = join(bin, program);
    const [cmd, argv] = asRoot ? ["runuser", ["-u", SERVER_USER, "--", file, ...args]] : [file, args];
    try {
      return await exec(cmd, argv, { cwd: dir, timeout: 120_000 });
    } catch (error) {
      const log = logFile ? await readFile(logFile, "utf8").catch(() => "") : "";
      const e = error as { stderr?: string; message: string };
      throw new Error(`${program} failed: ${e.stderr ?? e.message}${log ? `\nserver log:\n${log.slice(-4_000)}` : ""}`, { cause: error });
    }
  };
  /** The two servers; `roles[0]` is the primary now, `roles[1]` the standby. */
  const a: Server = { dataDir: first.dataDir, port: first.port };
  const b: Server = { dataDir: join(dir, "data"), port: 0 };
  let roles: [Server, Server] = [a, b];
  const socketDir = (server: Server) => dirname(server.dataDir);
  const logOf = (server: Server) => join(socketDir(server), "server.log");
  const start = (server: Server) =>
    run(
      "pg_ctl",
      [
        "-D",
        server.dataDir,
        "-l",
        logOf(server),
        "-w",
        "-t",
        "60",
        "start",
        "-o",
        [
          `-c port=${server.port}`,
          "-c listen_addresses=127.0.0.1",
          `-c unix_socket_directories=${socketDir(server)}`,
          "-c max_connections=400",
          "-c hot_standby=on",
          "-c log_min_messages=warning",
          "-c wal_level=replica",
          "-c max_wal_senders=10",
          "-c wal_keep_size=512MB",
          ...Object.entries(options.settings ?? {}).map(([k, v]) => `-c ${k}=${v}`),
        ].join(" "),
      ],
      logOf(server),
    );
  /** A base backup of `from` into `into`'s (empty) data directory, started as its standby. */
  const makeStandby = async (from: Server, into: Server) => {
    await rm(into.dataDir, { recursive: true, force: true });
    await run("pg_basebackup", [
      "-d",
      `host=127.0.0.1 port=${from.port} user=${SERVER_USER} application_name=${STANDBY_NAME}`,
      "-D",
      into.dataDir,
      "-R",
      "-X",
      "stream",
      "-c",
      "fast",
      "--no-sync",
    ]);
    // -R wrote primary_conninfo; the name must be in it for synchronous_standby_names to match.
    // Settings the old primary got by ALTER SYSTEM came along in the copy: a standby has none.
    await writeFile(
      join(into.dataDir, "postgresql.auto.conf"),
      `primary_conninfo = 'host=127.0.0.1 port=${from.port} user=${SERVER_USER} application_name=${STANDBY_NAME}'\n`,
    );
    if (asRoot) {
      const { uid, gid } = serverUser();
      await chown(join(into.dataDir, "postgresql.auto.conf"), uid, gid);
    }
    for (let attempt = 1; ; attempt++) {
      if (into.port === 0 || attempt > 1) into.port = await freePort();
      try {
        await start(into);
        break;
      } catch (error) {
        if (attempt >= 5) throw error;
      }
    }
    // Synchronous only now: with the standby named before it exists, every commit would wait for it.
    const primaryUrl = urlOf(from, "postgres");
    await onServer(primaryUrl, async (c) => {
      await c.query(`ALTER SYSTEM SET synchronous_standby_names = '${synchronous ? STANDBY_NAME : ""}'`);
      await c.query("SELECT pg_reload_conf()");
    });
    const deadline = Date.now() + 60_000;
    for (;;) {
      const state = await onServer(primaryUrl, (c) =>
        c.query<{ state: string; sync_state: string }>("SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1", [STANDBY_NAME]),
      ).catch(() => null);
      const row = state?.rows[0];
      if (row?.state === "streaming" && (!synchronous || row.sync_state === "sync")) break;
      if (Date.now() > deadline) throw new Error(`the standby did not start streaming within 60 s (${JSON.stringify(row ?? null)})`);
      await sleep(100);
    }
  };
  const stopServer = (server: Server) => run("pg_ctl", ["-D", server.dataDir, "-m", "immediate", "-w", "stop"]).catch(() => undefined);
  let watchdog: ReturnType<typeof spawn> | null = null;
  const cleanUp = async () => {
    watchdog?.kill();
    await stopServer(b);
    await rm(dir, { recursive: true, force: true });
    await first.stop();
  };
  try {
    await makeStandby(a, b);
    const stopCommand = `${asRoot ? `runuser -u ${SERVER_USER} -- ` : ""}${join(bin, "pg_ctl")} -D '${b.dataDir}' -m immediate -w stop`;
    watchdog = spawn("sh", ["-c", `while kill -0 ${process.pid} 2>/dev/null; do sleep 1; done; ${stopCommand} >/dev/null 2>&1; rm -rf '${dir}'`], {
      detached: true,
      stdio: "ignore",
    });
    watchdog.unref();
  } catch (error) {
    await cleanUp();
    throw error;
  }

  const path = new URL(first.url).pathname;
  let stopped = false;
  return {
    url: `postgresql://${SERVER_USER}@127.0.0.1:${a.port},127.0.0.1:${b.port}${path}?target_session_attrs=read-write`,
    synchronous,
    primaryPort: () => roles[0].port,
    standbyPort: () => roles[1].port,
    async crashPrimary() {
      await run("pg_ctl", ["-D", roles[0].dataDir, "-m", "immediate", "-w", "stop"]);
    },
    async promote() {
      const standby = roles[1];
      await run("pg_ctl", ["-D", standby.dataDir, "-w", "-t", "60", "promote"], logOf(standby));
      const deadline = Date.now() + 60_000;
      for (;;) {
        const r = await onServer(urlOf(standby, "postgres"), (c) => c.query<{ transaction_read_only: string }>("SHOW transaction_read_only")).catch(() => null);
        if (r?.rows[0]?.transaction_read_only === "off") break;
        if (Date.now() > deadline) throw new Error("the promoted standby did not accept writes within 60 s");
        await sleep(50);
      }
      roles = [standby, roles[0]];
    },
    async rebuildStandby() {
      const [primary, old] = roles;
      await stopServer(old);
      await makeStandby(primary, old);
    },
    async replayLagBytes() {
      const r = await onServer(urlOf(roles[0], "postgres"), (c) =>
        c.query<{ lag: string | null }>(
          "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::text AS lag FROM pg_stat_replication WHERE application_name = $1",
          [STANDBY_NAME],
        ),
      ).catch(() => null);
      const lag = r?.rows[0]?.lag;
      return lag === undefined || lag === null ? null : Number(lag);
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await cleanUp();
    },
  };
}

interface Server {
  dataDir: string;
  port: number;
}

function urlOf(server: Server, database: string): string {
  return `postgresql://${SERVER_USER}@127.0.0.1:${server.port}/${database}`;
}

async function onServer<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3_000 });
  client.on("error", () => undefined);
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}
