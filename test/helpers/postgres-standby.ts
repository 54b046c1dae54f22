/**
 * A PostgreSQL primary with a streaming-replication hot standby, on loopback, for the tests and
 * the chaos runner: the primary is a throwaway server of test/helpers/postgres.ts, the standby a
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
import { appendFile, chmod, chown, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import pg from "pg";
import { freePort } from "./ports.js";
import { findPostgresBin, SERVER_USER, serverUser, startThrowawayPostgres, type ThrowawayPostgres } from "./postgres.js";

const exec = promisify(execFile);

/** The standby's name in `pg_stat_replication` and `synchronous_standby_names`. */
export const STANDBY_NAME = "conveyor_standby";

export interface PostgresPair {
  readonly primary: ThrowawayPostgres;
  readonly standbyPort: number;
  readonly standbyDataDir: string;
  /** `postgresql://postgres@127.0.0.1:PRIMARY,127.0.0.1:STANDBY/DB?target_session_attrs=read-write` */
  readonly url: string;
  /** The standby alone (read-only until promoted). */
  readonly standbyUrl: string;
  readonly synchronous: boolean;
  /** Crashes the primary: `pg_ctl stop -m immediate`. */
  crashPrimary(): Promise<void>;
  /** `pg_ctl promote` on the standby; resolves once it accepts writes. */
  promote(): Promise<void>;
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
  const primary = await startThrowawayPostgres({
    database,
    bin,
    settings: {
      wal_level: "replica",
      max_wal_senders: "10",
      wal_keep_size: "512MB",
      ...(options.settings ?? {}),
    },
  });
  const asRoot = userInfo().uid === 0;
  const dir = await mkdtemp(join(tmpdir(), "conveyor-pg-standby-"));
  const dataDir = join(dir, "data");
  const logFile = join(dir, "server.log");
  if (asRoot) {
    const { uid, gid } = serverUser();
    await chown(dir, uid, gid);
  }
  await chmod(dir, 0o700);
  const run = async (program: string, args: string[]) => {
    const file = join(bin, program);
    const [cmd, argv] = asRoot ? ["runuser", ["-u", SERVER_USER, "--", file, ...args]] : [file, args];
    try {
      return await exec(cmd, argv, { cwd: dir, timeout: 120_000 });
    } catch (error) {
      const log = await readFile(logFile, "utf8").catch(() => "");
      const e = error as { stderr?: string; message: string };
      throw new Error(`${program} failed: ${e.stderr ?? e.message}${log ? `\nstandby log:\n${log.slice(-4_000)}` : ""}`, { cause: error });
    }
  };
  let standbyPort = 0;
  let watchdog: ReturnType<typeof spawn> | null = null;
  const cleanUp = async () => {
    watchdog?.kill();
    await run("pg_ctl", ["-D", dataDir, "-m", "immediate", "-w", "stop"]).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
    await primary.stop();
  };
  try {
    await run("pg_basebackup", [
      "-d", `host=127.0.0.1 port=${primary.port} user=${SERVER_USER} application_name=${STANDBY_NAME}`,
      "-D", dataDir, "-R", "-X", "stream", "-c", "fast", "--no-sync",
    ]);
    // -R wrote primary_conninfo; the name must be in it for synchronous_standby_names to match.
    await appendFile(
      join(dataDir, "postgresql.auto.conf"),
      `primary_conninfo = 'host=127.0.0.1 port=${primary.port} user=${SERVER_USER} application_name=${STANDBY_NAME}'\n`,
    );
    for (let attempt = 1; ; attempt++) {
      standbyPort = await freePort();
      const serverOptions = [
        `-c port=${standbyPort}`,
        "-c listen_addresses=127.0.0.1",
        `-c unix_socket_directories=${dir}`,
        "-c max_connections=400",
        "-c hot_standby=on",
        "-c log_min_messages=warning",
        ...Object.entries(options.settings ?? {}).map(([k, v]) => `-c ${k}=${v}`),
      ].join(" ");
      try {
        await run("pg_ctl", ["-D", dataDir, "-l", logFile, "-o", serverOptions, "-w", "-t", "60", "start"]);
        break;
      } catch (error) {
        if (attempt >= 5) throw error;
      }
    }
    const stopCommand = `${asRoot ? `runuser -u ${SERVER_USER} -- ` : ""}${join(bin, "pg_ctl")} -D '${dataDir}' -m immediate -w stop`;
    watchdog = spawn("sh", ["-c", `while kill -0 ${process.pid} 2>/dev/null; do sleep 1; done; ${stopCommand} >/dev/null 2>&1; rm -rf '${dir}'`], {
      detached: true,
      stdio: "ignore",
    });
    watchdog.unref();
    // Synchronous only now: with the standby named before it exists, every commit (the helper's
    // own CREATE DATABASE first) would wait for it for ever.
    if (synchronous) {
      await onPrimary(primary.url, async (c) => {
        await c.query(`ALTER SYSTEM SET synchronous_standby_names = '${STANDBY_NAME}'`);
        await c.query("SELECT pg_reload_conf()");
      });
    }
    // Streaming, and (when synchronous) counted as the synchronous standby.
    const deadline = Date.now() + 60_000;
    for (;;) {
      const state = await onPrimary(primary.url, (c) =>
        c.query<{ state: string; sync_state: string }>("SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1", [STANDBY_NAME]),
      ).catch(() => null);
      const row = state?.rows[0];
      if (row?.state === "streaming" && (!synchronous || row.sync_state === "sync")) break;
      if (Date.now() > deadline) throw new Error(`the standby did not start streaming within 60 s (${JSON.stringify(row ?? null)})`);
      await sleep(100);
    }
  } catch (error) {
    await cleanUp();
    throw error;
  }

  const url = new URL(primary.url);
  const hosts = `127.0.0.1:${primary.port},127.0.0.1:${standbyPort}`;
  let stopped = false;
  return {
    primary,
    standbyPort,
    standbyDataDir: dataDir,
    url: `postgresql://${SERVER_USER}@${hosts}${url.pathname}?target_session_attrs=read-write`,
    standbyUrl: `postgresql://${SERVER_USER}@127.0.0.1:${standbyPort}${url.pathname}`,
    synchronous,
    async crashPrimary() {
      await run("pg_ctl", ["-D", primary.dataDir, "-m", "immediate", "-w", "stop"]);
    },
    async promote() {
      await run("pg_ctl", ["-D", dataDir, "-w", "-t", "60", "promote"]);
      const deadline = Date.now() + 60_000;
      for (;;) {
        const r = await onPrimary(`postgresql://${SERVER_USER}@127.0.0.1:${standbyPort}/postgres`, (c) =>
          c.query<{ transaction_read_only: string }>("SHOW transaction_read_only"),
        ).catch(() => null);
        if (r?.rows[0]?.transaction_read_only === "off") return;
        if (Date.now() > deadline) throw new Error("the promoted standby did not accept writes within 60 s");
        await sleep(50);
      }
    },
    async replayLagBytes() {
      const r = await onPrimary(primary.url, (c) =>
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

async function onPrimary<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3_000 });
  client.on("error", () => undefined);
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}
