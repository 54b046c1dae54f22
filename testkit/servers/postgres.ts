/**
 * PostgreSQL for tests: a throwaway server (initdb in a temp dir, started on a free port, removed
 * afterwards) and a schema per test so tests never see each other's jobs.
 *
 * Used by the vitest globalSetup (test/setup/postgres.ts) for the shared server, and by tests that
 * must restart a server of their own without disturbing other test files.
 */
import { execFile, spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmod, chown, mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { startOnFreePort } from "./ports.js";
import type { ThrowawayServer } from "./server.js";

const exec = promisify(execFile);

/** Where Debian/Ubuntu install PostgreSQL; the highest version found wins, 15 preferred. */
const INSTALL_ROOT = "/usr/lib/postgresql";
const PREFERRED_VERSION = "15";

/** The OS user that runs the server when we are root: PostgreSQL refuses to run as root. */
export const SERVER_USER = "postgres";

/** A server at `postgresql://postgres@127.0.0.1:PORT/DB`, DB the database created at start. */
export interface ThrowawayPostgres extends ThrowawayServer {
  readonly dataDir: string;
  /** Stops the server (fast shutdown) and starts it again on the same port and data. */
  restart(): Promise<void>;
}

/** The bin directory of the PostgreSQL to run, or null when none is installed. */
export async function findPostgresBin(): Promise<string | null> {
  if (!existsSync(INSTALL_ROOT)) return null;
  const versions = (await readdir(INSTALL_ROOT)).filter((v) => existsSync(join(INSTALL_ROOT, v, "bin", "postgres")));
  if (versions.length === 0) return null;
  const chosen = versions.includes(PREFERRED_VERSION) ? PREFERRED_VERSION : versions.sort((a, b) => Number(b) - Number(a))[0]!;
  return join(INSTALL_ROOT, chosen, "bin");
}

/**
 * initdb + pg_ctl start in a fresh temp dir, then creates database `database`. Durability
 * settings are left at their defaults (fsync and synchronous_commit on), so what tests and
 * benchmarks measure is what production gets.
 */
export async function startThrowawayPostgres(
  options: { database?: string; bin?: string; /** Extra server settings, e.g. { autovacuum_naptime: "1s" }. */ settings?: Record<string, string> } = {},
): Promise<ThrowawayPostgres> {
  const bin = options.bin ?? (await findPostgresBin());
  if (bin === null) {
    throw new Error(
      `no PostgreSQL server found under ${INSTALL_ROOT}/*/bin; install one (apt-get install postgresql-15) ` + `or point DATABASE_URL at a server you provide`,
    );
  }
  const database = options.database ?? "conveyor_test";
  const asRoot = userInfo().uid === 0;
  const dir = await mkdtemp(join(tmpdir(), "conveyor-pg-"));
  const dataDir = join(dir, "data");
  const logFile = join(dir, "server.log");
  // The server user must own the directory (and reach it: mkdtemp makes it 0700).
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
      throw new Error(`${program} failed: ${e.stderr ?? e.message}${log ? `\nserver log:\n${log.slice(-4_000)}` : ""}`, { cause: error });
    }
  };

  let port = 0;
  const start = async () => {
    const serverOptions = [
      `-c port=${port}`,
      "-c listen_addresses=127.0.0.1",
      `-c unix_socket_directories=${dir}`,
      // Every test file and conformance test opens its own pools; the default 100 is tight.
      "-c max_connections=400",
      // Tests drop and create hundreds of schemas; keep the server quiet about it.
      "-c log_min_messages=warning",
      ...Object.entries(options.settings ?? {}).map(([k, v]) => `-c ${k}=${v}`),
    ].join(" ");
    await run("pg_ctl", ["-D", dataDir, "-l", logFile, "-o", serverOptions, "-w", "-t", "60", "start"]);
  };
  try {
    // --no-sync only skips initdb's own final flush of the fresh cluster (a throwaway one): the
    // server it then starts keeps fsync and synchronous_commit on.
    await run("initdb", ["-D", dataDir, "--auth=trust", `--username=${SERVER_USER}`, "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"]);
    // A free port can be taken by someone else before the server binds it: a few tries.
    port = await startOnFreePort((free) => ((port = free), start()));
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }

  // pg_ctl detaches the server, so it would outlive a test run that is killed before its
  // teardown (a CI timeout, Ctrl-C twice). A detached shell watches this process and, once it is
  // gone, stops the server and removes its directory.
  const pgCtl = join(bin, "pg_ctl");
  const stopCommand = `${asRoot ? `runuser -u ${SERVER_USER} -- ` : ""}${pgCtl} -D '${dataDir}' -m immediate -w stop`;
  const watchdog = spawn("sh", ["-c", `while kill -0 ${process.pid} 2>/dev/null; do sleep 1; done; ${stopCommand} >/dev/null 2>&1; rm -rf '${dir}'`], {
    detached: true,
    stdio: "ignore",
  });
  watchdog.unref();

  const admin = new pg.Client({ host: "127.0.0.1", port, user: SERVER_USER, database: "postgres" });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(database)}`);
  } finally {
    await admin.end();
  }

  let stopped = false;
  return {
    url: `postgresql://${SERVER_USER}@127.0.0.1:${port}/${database}`,
    port,
    dataDir,
    async restart() {
      await run("pg_ctl", ["-D", dataDir, "-m", "fast", "-w", "stop"]);
      await start();
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      watchdog.kill();
      await run("pg_ctl", ["-D", dataDir, "-m", "fast", "-w", "stop"]).catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Uid and gid of the OS user that runs the server when we are root. */
export function serverUser(): { uid: number; gid: number } {
  const id = (flag: string) => {
    const out = spawnSync("id", [flag, SERVER_USER], { encoding: "utf8" });
    if (out.status !== 0) {
      throw new Error(`running as root, PostgreSQL needs the OS user "${SERVER_USER}" (it refuses to run as root); create it or set DATABASE_URL`);
    }
    return Number(out.stdout.trim());
  };
  return { uid: id("-u"), gid: id("-g") };
}

/** A schema name no other test uses: lower case, so it never needs quoting in psql. */
export function randomSchema(prefix = "t"): string {
  return `${prefix}_${randomBytes(6).toString("hex")}`;
}

/** Drops schemas (with everything in them), for afterEach/afterAll. */
export async function dropSchemas(url: string, schemas: readonly string[]): Promise<void> {
  if (schemas.length === 0) return;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const schema of schemas) await client.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`);
  } finally {
    await client.end();
  }
}

/**
 * Schemas for one test file: `create()` names a fresh one (the backend's migrate() creates it),
 * `dropAll()` (in afterEach/afterAll, after the backends are closed) drops every one named so far.
 */
export class TestSchemas {
  private readonly made: string[] = [];

  constructor(private readonly url: string) {}

  create(prefix = "t"): string {
    const schema = randomSchema(prefix);
    this.made.push(schema);
    return schema;
  }

  async dropAll(): Promise<void> {
    await dropSchemas(this.url, this.made.splice(0));
  }
}

/** The URL the globalSetup provided, or an error saying why there is none. */
export function requireDatabase(url: string, unavailable: string): string {
  if (!url) throw new Error(unavailable || "no PostgreSQL for the tests: set DATABASE_URL");
  return url;
}
