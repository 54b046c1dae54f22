/**
 * `npm run chaos -- --scenario outbox [--source pg-poll|pg-cdc|sqlite-poll]
 *   [--target redis|rabbitmq|queue] [--seconds N] [--seed S]`
 *
 * The transactional outbox under faults. A producer writes a business row and its event in one
 * transaction (one in ten rolls back on purpose) into the outbox of the source database:
 * - `pg-poll` (default): PostgreSQL, two polling `conveyor relay` processes;
 * - `pg-cdc`: PostgreSQL with wal_level=logical, one cdc relay (a slot has one reader);
 * - `sqlite-poll`: an SQLite file, two polling relays (one holds the lease, the other waits;
 *   `--lease 2000` so a killed holder's successor takes over within two seconds).
 * The relays publish to the target:
 * - `redis` (default): a Redis stream (appendfsync always), SIGKILLed and restarted;
 * - `rabbitmq`: a durable quorum queue, stopped (SIGTERM) and restarted (a SIGKILLed single node
 *   did not confirm publishes for over a minute after its restart: docs/outbox.md);
 * - `queue`: a Conveyor queue in a second PostgreSQL server (job id = outbox id), restarted.
 * The runner SIGKILLs relays (some armed to die exactly between the target's confirm and the
 * outbox's record) and takes the target down. Then the faults stop, everything drains, and the
 * checker proves from the database and the target:
 * - every committed event was delivered at least once (the business table is the truth);
 * - no uncommitted event was delivered (a rolled-back event id never appears);
 * - per-key order: each key's events, by the last copy delivered of each, are in commit order
 *   (1, 2, 3 … with no gap). A queue target keeps the first copy (a redelivery is a duplicate
 *   job id, refused), so there the first copy is what counts.
 * Evidence stays in .tmp/chaos/outbox-<source>-<target>-<seed>/ (relay logs, report.json).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, createWriteStream, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { Redis } from "ioredis";
import pg from "pg";
import { openBackend } from "../src/backend/open.js";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { silentLogger } from "../src/core/logger.js";
import { PostgresOutbox, SqliteOutbox } from "../src/outbox/writer.js";
import { startThrowawayPostgres } from "../testkit/servers/postgres.js";
import { startThrowawayRabbit } from "../testkit/servers/rabbitmq.js";
import { startThrowawayRedis } from "../testkit/servers/redis.js";
import { ROOT } from "./fleet.js";
import { Prng } from "./prng.js";

const SCHEMA = "chaos_outbox";
const KEYS = 20;

export const OUTBOX_SOURCES = ["pg-poll", "pg-cdc", "sqlite-poll"] as const;
export const OUTBOX_TARGETS = ["redis", "rabbitmq", "queue"] as const;
export type OutboxSourceKind = (typeof OUTBOX_SOURCES)[number];
export type OutboxTargetKind = (typeof OUTBOX_TARGETS)[number];

export interface OutboxChaosResult {
  ok: boolean;
  rows: Array<[string, string | number]>;
  /** Relays SIGKILLed by the runner (timed kills; failpoint kills not counted). */
  relayKills: number;
}

export interface OutboxChaosOptions {
  seconds: number;
  /**
   * The faults go on past `seconds` until the runner has SIGKILLed relays this many times (the
   * later faults all kills), so a short run cannot end without any. Default 0.
   */
  minRelayKills?: number;
  seed: number;
  /** Default "pg-poll". */
  source?: OutboxSourceKind;
  /** Default "redis". */
  target?: OutboxTargetKind;
  log: (line: string) => void;
}

interface Committed {
  event_id: string;
  key: string;
  n: number;
}

/** Where the events are written and the relays read. */
interface SourceEnv {
  readonly label: string;
  readonly relays: number;
  /** `conveyor relay` arguments naming the outbox and the mode. */
  readonly relayArgs: string[];
  /** One business transaction: the id, or null when the commit's answer was lost. */
  produce(key: string, rollback: boolean): Promise<string | null>;
  committed(): Promise<Committed[]>;
  backlog(): Promise<number>;
  /** What the source looks like when it did not drain (for the report). */
  diagnose(): Promise<unknown>;
  close(): Promise<void>;
}

/** Where the relays publish, how it fails, what reached it (in delivery order). */
interface TargetEnv {
  readonly label: string;
  readonly relayArgs: string[];
  /** Takes the target down and back up; the count's name. */
  fault(rng: Prng): Promise<void>;
  readonly faultLabel: string;
  /** True: a redelivery is dropped by the target (the first copy stands). */
  readonly dedups: boolean;
  delivered(): Promise<Array<{ id: string; key: string; n: number }>>;
  close(): Promise<void>;
}

async function postgresSource(kind: "pg-poll" | "pg-cdc", dir: string): Promise<SourceEnv> {
  const cdc = kind === "pg-cdc";
  const server = await startThrowawayPostgres({
    database: "chaos",
    ...(cdc ? { settings: { wal_level: "logical", max_wal_senders: "5", max_replication_slots: "5" } } : {}),
  });
  const pool = new pg.Pool({ connectionString: server.url, max: 4 });
  pool.on("error", () => undefined);
  try {
    const backend = new PostgresBackend({ connectionString: server.url, schema: SCHEMA, logger: silentLogger, poolSize: 1 });
    await backend.migrate();
    await backend.close();
    await pool.query(`CREATE TABLE ${SCHEMA}.orders (event_id text PRIMARY KEY, key text NOT NULL, n int NOT NULL)`);
    await pool.query(`CREATE TABLE ${SCHEMA}.counters (key text PRIMARY KEY, n int NOT NULL)`);
    await pool.query(`INSERT INTO ${SCHEMA}.counters SELECT 'k' || g, 0 FROM generate_series(0, ${KEYS - 1}) g`);
    const db = `${server.url}?schema=${SCHEMA}`;
    if (cdc) {
      const setup = await runRelayCli(["--mode", "cdc", "--setup", "--db", db], join(dir, "setup.log"));
      if (setup !== 0) throw new Error(`conveyor relay --mode cdc --setup exited ${setup} (see ${dir}/setup.log)`);
    }
  } catch (error) {
    await pool.end().catch(() => undefined);
    await server.stop();
    throw error;
  }
  const outbox = new PostgresOutbox({ schema: SCHEMA });
  return {
    label: cdc ? "PostgreSQL outbox, one cdc relay" : "PostgreSQL outbox, two polling relays",
    relays: cdc ? 1 : 2,
    relayArgs: ["--db", `${server.url}?schema=${SCHEMA}`, "--mode", cdc ? "cdc" : "poll"],
    async produce(key, rollback) {
      let client: pg.PoolClient | null = null;
      try {
        client = await pool.connect();
        await client.query("BEGIN");
        const { rows } = await client.query<{ n: number }>(`UPDATE ${SCHEMA}.counters SET n = n + 1 WHERE key = $1 RETURNING n`, [key]);
        const n = rows[0]!.n;
        const id = await outbox.publish(client, { topic: "orders", key, payload: { key, n } });
        await client.query(`INSERT INTO ${SCHEMA}.orders (event_id, key, n) VALUES ($1, $2, $3)`, [id, key, n]);
        await client.query(rollback ? "ROLLBACK" : "COMMIT");
        return id;
      } catch {
        // A COMMIT whose answer was lost: the orders table says whether it committed.
        await client?.query("ROLLBACK").catch(() => undefined);
        return null;
      } finally {
        client?.release();
      }
    },
    committed: async () => (await pool.query<Committed>(`SELECT event_id, key, n FROM ${SCHEMA}.orders`)).rows,
    backlog: async () => Number((await pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${SCHEMA}.outbox`)).rows[0]!.n),
    diagnose: async () => ({
      left: (await pool.query(`SELECT seq::text, id, key, created_at FROM ${SCHEMA}.outbox ORDER BY seq LIMIT 20`)).rows,
      slots: (
        await pool.query(
          `SELECT slot_name, active, active_pid, restart_lsn::text, confirmed_flush_lsn::text, pg_current_wal_lsn()::text AS current_lsn FROM pg_replication_slots`,
        )
      ).rows,
      senders: (await pool.query(`SELECT pid, state, sent_lsn::text, flush_lsn::text, application_name FROM pg_stat_replication`)).rows,
    }),
    async close() {
      await pool.end().catch(() => undefined);
      await server.stop();
    },
  };
}

async function sqliteSource(dir: string): Promise<SourceEnv> {
  const path = join(dir, "app.db");
  // A rerun of the same seed starts from an empty database, not the last run's.
  for (const suffix of ["", "-wal", "-shm"]) rmSync(path + suffix, { force: true });
  const backend = await openBackend(`sqlite:${path}`);
  await backend.close();
  const db = new Database(path, { timeout: 10_000 });
  db.pragma("journal_mode = WAL");
  db.exec(`CREATE TABLE orders (event_id TEXT PRIMARY KEY, key TEXT NOT NULL, n INTEGER NOT NULL);
           CREATE TABLE counters (key TEXT PRIMARY KEY, n INTEGER NOT NULL);`);
  const seed = db.prepare("INSERT INTO counters (key, n) VALUES (?, 0)");
  for (let k = 0; k < KEYS; k++) seed.run(`k${k}`);
  const outbox = new SqliteOutbox();
  const bump = db.prepare("UPDATE counters SET n = n + 1 WHERE key = ? RETURNING n");
  const order = db.prepare("INSERT INTO orders (event_id, key, n) VALUES (?, ?, ?)");
  class RollBack extends Error {}
  return {
    label: "SQLite outbox, two polling relays (one lease holder)",
    relays: 2,
    relayArgs: ["--db", `sqlite:${path}`, "--mode", "poll", "--lease", "2000"],
    async produce(key, rollback) {
      let id: string | null = null;
      try {
        db.transaction(() => {
          const n = (bump.get(key) as { n: number }).n;
          id = outbox.publish(db, { topic: "orders", key, payload: { key, n } });
          order.run(id, key, n);
          if (rollback) throw new RollBack();
        }).immediate();
      } catch (error) {
        if (!(error instanceof RollBack)) return null;
      }
      return id;
    },
    committed: async () => db.prepare("SELECT event_id, key, n FROM orders").all() as Committed[],
    backlog: async () => (db.prepare("SELECT count(*) AS n FROM conveyor_outbox").get() as { n: number }).n,
    diagnose: async () => ({
      left: db.prepare("SELECT seq, id, key, created_at FROM conveyor_outbox ORDER BY seq LIMIT 20").all(),
      lease: db.prepare("SELECT * FROM conveyor_outbox_relay").all(),
    }),
    async close() {
      db.close();
    },
  };
}

async function redisTarget(): Promise<TargetEnv> {
  const redis = await startThrowawayRedis({ persistence: "always" });
  return {
    label: "Redis stream",
    relayArgs: ["--target", redis.url, "--stream-prefix", "chaos:"],
    faultLabel: "Redis SIGKILLs",
    dedups: false,
    async fault(rng) {
      await redis.kill();
      await sleep(rng.int(300, 2_000));
      await redis.start();
    },
    async delivered() {
      const client = new Redis(redis.url);
      try {
        const entries = (await client.xrange("chaos:orders", "-", "+")) as Array<[string, string[]]>;
        return entries.map(([, f]) => ({ id: f[f.indexOf("id") + 1]!, ...(JSON.parse(f[f.indexOf("payload") + 1]!) as { key: string; n: number }) }));
      } finally {
        client.disconnect();
      }
    },
    close: () => redis.stop(),
  };
}

async function rabbitTarget(): Promise<TargetEnv> {
  const rabbit = await startThrowawayRabbit();
  const queue = "chaos.orders";
  return {
    label: "RabbitMQ quorum queue",
    relayArgs: ["--target", rabbit.url, "--declare-queue", queue],
    faultLabel: "RabbitMQ stops (SIGTERM) and restarts",
    dedups: false,
    async fault(rng) {
      await rabbit.terminate();
      await sleep(rng.int(300, 2_000));
      await rabbit.start();
    },
    async delivered() {
      const amqp = await import("amqplib");
      const connection = await amqp.connect(rabbit.url);
      try {
        const channel = await connection.createChannel();
        const out: Array<{ id: string; key: string; n: number }> = [];
        for (;;) {
          const message = await channel.get(queue, { noAck: true });
          if (message === false) break;
          out.push({ id: String(message.properties.messageId), ...(JSON.parse(message.content.toString("utf8")) as { key: string; n: number }) });
        }
        return out;
      } finally {
        await connection.close();
      }
    },
    close: () => rabbit.stop(),
  };
}

async function queueTarget(): Promise<TargetEnv> {
  const server = await startThrowawayPostgres({ database: "jobs" });
  const schema = "chaos_jobs";
  const backend = new PostgresBackend({ connectionString: server.url, schema, logger: silentLogger, poolSize: 1 });
  await backend.migrate();
  await backend.close();
  return {
    label: "Conveyor queue (second PostgreSQL)",
    relayArgs: ["--target", `conveyor+${server.url}?schema=${schema}`, "--queue", "orders"],
    faultLabel: "target PostgreSQL restarts",
    dedups: true,
    async fault() {
      await server.restart();
    },
    async delivered() {
      const client = new pg.Client({ connectionString: server.url });
      await client.connect();
      try {
        const { rows } = await client.query<{ id: string; payload: string }>(
          `SELECT id, payload::text AS payload FROM ${schema}.jobs WHERE queue = 'orders' ORDER BY seq`,
        );
        return rows.map((r) => ({ id: r.id, ...(JSON.parse(r.payload) as { key: string; n: number }) }));
      } finally {
        await client.end();
      }
    },
    close: () => server.stop(),
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function runRelayCli(args: string[], logFile: string): Promise<number | null> {
  const child = spawn(process.execPath, ["--import", "tsx", "src/cli/bin.ts", "relay", ...args], { cwd: ROOT, stdio: ["ignore", "ignore", "pipe"] });
  child.stderr?.pipe(createWriteStream(logFile, { flags: "a" }));
  return new Promise((resolve) => child.on("exit", (code) => resolve(code)));
}

export async function runOutboxScenario(options: OutboxChaosOptions): Promise<OutboxChaosResult> {
  const sourceKind = options.source ?? "pg-poll";
  const targetKind = options.target ?? "redis";
  const rng = new Prng(options.seed);
  const dir = join(ROOT, ".tmp", "chaos", `outbox-${sourceKind}-${targetKind}-${options.seed}`);
  mkdirSync(dir, { recursive: true });
  const source = sourceKind === "sqlite-poll" ? await sqliteSource(dir) : await postgresSource(sourceKind, dir);
  let target: TargetEnv | null = null;
  const relays: Array<ChildProcess | null> = Array.from({ length: source.relays }, () => null);
  const killedByRunner = new WeakSet<ChildProcess>();
  let stopping = false;
  const counts = { committed: 0, rolledBack: 0, commitUnknown: 0, relayKills: 0, failpointKills: 0, targetFaults: 0 };
  try {
    target = targetKind === "rabbitmq" ? await rabbitTarget() : targetKind === "queue" ? await queueTarget() : await redisTarget();
    const relayTarget = target;
    options.log(`${source.label} → ${relayTarget.label}`);

    const startRelay = (slot: number) => {
      const armed = rng.next() < 0.3;
      const child = spawn(
        process.execPath,
        [
          "--import",
          "tsx",
          "src/cli/bin.ts",
          "relay",
          ...source.relayArgs,
          ...relayTarget.relayArgs,
          "--batch-size",
          "50",
          "--backoff-max",
          "500",
          "--stats-interval",
          "0",
        ],
        {
          cwd: ROOT,
          env: { ...process.env, ...(armed ? { CONVEYOR_FAILPOINTS: `relay-after-publish:${rng.int(1, 20)}` } : {}) },
          stdio: ["ignore", "ignore", "pipe"],
        },
      );
      child.stderr?.pipe(createWriteStream(join(dir, `relay-${slot}.log`), { flags: "a" }));
      child.on("exit", (_code, signal) => {
        if (relays[slot] === child) relays[slot] = null;
        // Killed, but not by the runner: the failpoint fired.
        if (signal === "SIGKILL" && !killedByRunner.has(child)) counts.failpointKills++;
      });
      relays[slot] = child;
    };

    // Producer: business row + event in one transaction; one in ten rolled back.
    const rolledBackIds: string[] = [];
    const producer = (async () => {
      while (!stopping) {
        const key = `k${rng.int(0, KEYS - 1)}`;
        const rollback = rng.next() < 0.1;
        const id = await source.produce(key, rollback);
        if (id === null) counts.commitUnknown++;
        else if (rollback) {
          rolledBackIds.push(id);
          counts.rolledBack++;
        } else counts.committed++;
        await sleep(rng.int(1, 8));
      }
    })();

    for (let slot = 0; slot < source.relays; slot++) startRelay(slot);
    const deadline = Date.now() + options.seconds * 1000;
    const minRelayKills = options.minRelayKills ?? 0;
    while (Date.now() < deadline || counts.relayKills < minRelayKills) {
      await sleep(rng.int(500, 2_500));
      for (let slot = 0; slot < source.relays; slot++) if (relays[slot] === null) startRelay(slot);
      if (rng.next() < 0.6 || Date.now() >= deadline) {
        const victim = relays[rng.int(0, source.relays - 1)];
        if (victim) {
          killedByRunner.add(victim);
          victim.kill("SIGKILL");
          counts.relayKills++;
        }
      } else {
        await relayTarget.fault(rng);
        counts.targetFaults++;
      }
    }
    stopping = true;
    await producer;
    options.log(
      `faults stopped: ${counts.relayKills} relay kills (+${counts.failpointKills} at the failpoint), ${counts.targetFaults} target faults; draining`,
    );
    const drainDeadline = Date.now() + 120_000;
    // Not drained in time is a failed run, still checked: the table then says whether the events
    // left behind had reached the target, and report.json holds the source's state.
    let undrained: { left: number; state: unknown } | null = null;
    for (;;) {
      for (let slot = 0; slot < source.relays; slot++) if (relays[slot] === null) startRelay(slot);
      const left = await source.backlog();
      if (left === 0) break;
      if (Date.now() > drainDeadline) {
        undrained = { left, state: await source.diagnose() };
        options.log(`the outbox did not drain within 120 s: ${left} left`);
        break;
      }
      await sleep(250);
    }
    for (const child of relays) child?.kill("SIGTERM");

    // ── the checker ──
    const committed = await source.committed();
    const committedIds = new Set(committed.map((r) => r.event_id));
    const delivered = await relayTarget.delivered();
    const deliveredIds = new Set(delivered.map((d) => d.id));
    const missing = committed.filter((r) => !deliveredIds.has(r.event_id));
    const phantom = delivered.filter((d) => !committedIds.has(d.id));
    const rolledBackDelivered = rolledBackIds.filter((id) => deliveredIds.has(id));
    // Per key, the last copy of each event (first, where the target drops redeliveries), in
    // delivery order, must run 1, 2, 3 … without a gap.
    const orderViolations: string[] = [];
    const byKey = new Map<string, Array<{ id: string; n: number }>>();
    for (const d of delivered) byKey.set(d.key, [...(byKey.get(d.key) ?? []), d]);
    for (const [key, list] of byKey) {
      const keptIndex = new Map<string, number>();
      list.forEach((d, i) => {
        if (!relayTarget.dedups || !keptIndex.has(d.id)) keptIndex.set(d.id, i);
      });
      const keptOrder = list.filter((d, i) => keptIndex.get(d.id) === i).map((d) => d.n);
      const expected = committed
        .filter((r) => r.key === key)
        .map((r) => r.n)
        .sort((a, b) => a - b);
      if (JSON.stringify(keptOrder) !== JSON.stringify(expected))
        orderViolations.push(`${key}: delivered ${keptOrder.slice(0, 12).join(",")}… expected ${expected.slice(0, 12).join(",")}…`);
    }
    const duplicates = delivered.length - deliveredIds.size;
    const ok =
      undrained === null &&
      missing.length === 0 &&
      phantom.length === 0 &&
      rolledBackDelivered.length === 0 &&
      orderViolations.length === 0 &&
      committed.length > 0;
    const rows: Array<[string, string | number]> = [
      ["source → target", `${sourceKind} → ${targetKind}`],
      ["committed events (orders table)", committed.length],
      ["rolled back on purpose", counts.rolledBack],
      ["commits with a lost answer", counts.commitUnknown],
      ["relay SIGKILLs (timed / at relay-after-publish)", `${counts.relayKills} / ${counts.failpointKills}`],
      [relayTarget.faultLabel, counts.targetFaults],
      [
        relayTarget.dedups ? "delivered (jobs; redeliveries refused by job id)" : "delivered (copies / distinct)",
        relayTarget.dedups ? delivered.length : `${delivered.length} / ${deliveredIds.size}`,
      ],
      ["redeliveries (duplicates)", relayTarget.dedups ? "dropped by the target" : duplicates],
      ["committed but never delivered", missing.length],
      ["delivered but never committed", phantom.length + rolledBackDelivered.length],
      ["keys out of commit order", orderViolations.length],
      ["left in the outbox after 120 s of draining", undrained?.left ?? 0],
      ["verdict", ok ? "ok" : "FAILED"],
    ];
    // How often each event left behind reached the target (0: it never did, the relay is stuck).
    const copiesOfLeft = Object.fromEntries(
      ((undrained?.state as { left?: Array<{ id: string }> } | undefined)?.left ?? []).map((r) => [r.id, delivered.filter((d) => d.id === r.id).length]),
    );
    writeFileSync(
      join(dir, "report.json"),
      JSON.stringify(
        {
          seed: options.seed,
          seconds: options.seconds,
          source: sourceKind,
          target: targetKind,
          counts,
          undrained,
          copiesOfLeft,
          missing: missing.slice(0, 50),
          phantom: phantom.slice(0, 50),
          orderViolations,
        },
        null,
        2,
      ),
    );
    return { ok, rows, relayKills: counts.relayKills };
  } finally {
    stopping = true;
    for (const child of relays) {
      if (child) killedByRunner.add(child);
      child?.kill("SIGKILL");
    }
    await target?.close().catch(() => undefined);
    await source.close();
  }
}

export function formatOutboxTable(result: OutboxChaosResult): string {
  const width = Math.max(...result.rows.map(([label]) => label.length));
  return ["| check | value |", "| --- | ---: |", ...result.rows.map(([label, value]) => `| ${label.padEnd(width)} | ${value} |`)].join("\n");
}
