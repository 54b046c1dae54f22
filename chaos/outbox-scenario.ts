/**
 * `npm run chaos -- --scenario outbox [--seconds N] [--seed S]` (the backend is PostgreSQL)
 *
 * The transactional outbox under faults. A producer writes a business row and its event in one
 * transaction (one in ten rolls back on purpose); two `conveyor relay` processes move events to a
 * Redis stream (appendfsync always); the runner SIGKILLs relays (some armed to die exactly between
 * the target's confirm and the outbox's record) and SIGKILLs Redis, restarting each. Then the
 * faults stop, everything drains, and the checker proves from the database and the stream:
 * - every committed event was delivered at least once (the business table is the truth);
 * - no uncommitted event was delivered (a rolled-back event id never appears);
 * - per-key order: each key's events, by the last copy delivered of each, are in commit order
 *   (1, 2, 3 … with no gap).
 * Evidence stays in .tmp/chaos/outbox-<seed>/ (relay logs, report.json).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, createWriteStream, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Redis } from "ioredis";
import pg from "pg";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { silentLogger } from "../src/core/logger.js";
import { PostgresOutbox } from "../src/outbox/writer.js";
import { startThrowawayPostgres } from "../test/helpers/postgres.js";
import { startThrowawayRedis } from "../test/helpers/redis.js";
import { ROOT } from "./fleet.js";
import { Prng } from "./prng.js";

const SCHEMA = "chaos_outbox";
const KEYS = 20;
const RELAYS = 2;

export interface OutboxChaosResult {
  ok: boolean;
  rows: Array<[string, string | number]>;
}

export async function runOutboxScenario(options: { seconds: number; seed: number; log: (line: string) => void }): Promise<OutboxChaosResult> {
  const rng = new Prng(options.seed);
  const dir = join(ROOT, ".tmp", "chaos", `outbox-${options.seed}`);
  mkdirSync(dir, { recursive: true });
  const postgres = await startThrowawayPostgres({ database: "chaos" });
  const redis = await startThrowawayRedis({ persistence: "always" });
  const pool = new pg.Pool({ connectionString: postgres.url, max: 4 });
  pool.on("error", () => undefined);
  const relays: Array<ChildProcess | null> = Array.from({ length: RELAYS }, () => null);
  const killedByRunner = new WeakSet<ChildProcess>();
  let stopping = false;
  const counts = { committed: 0, rolledBack: 0, commitUnknown: 0, relayKills: 0, failpointKills: 0, redisKills: 0 };
  try {
    const backend = new PostgresBackend({ connectionString: postgres.url, schema: SCHEMA, logger: silentLogger, poolSize: 1 });
    await backend.migrate();
    await backend.close();
    await pool.query(`CREATE TABLE ${SCHEMA}.orders (event_id text PRIMARY KEY, key text NOT NULL, n int NOT NULL)`);
    await pool.query(`CREATE TABLE ${SCHEMA}.counters (key text PRIMARY KEY, n int NOT NULL)`);
    await pool.query(`INSERT INTO ${SCHEMA}.counters SELECT 'k' || g, 0 FROM generate_series(0, ${KEYS - 1}) g`);

    const startRelay = (slot: number) => {
      const armed = rng.next() < 0.3;
      const child = spawn(
        process.execPath,
        ["--import", "tsx", "src/cli/bin.ts", "relay", "--db", `${postgres.url}?schema=${SCHEMA}`, "--target", redis.url, "--stream-prefix", "chaos:", "--batch-size", "50", "--backoff-max", "500", "--stats-interval", "0"],
        { cwd: ROOT, env: { ...process.env, ...(armed ? { CONVEYOR_FAILPOINTS: `relay-after-publish:${rng.int(1, 20)}` } : {}) }, stdio: ["ignore", "ignore", "pipe"] },
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
    const outbox = new PostgresOutbox({ schema: SCHEMA });
    const rolledBackIds: string[] = [];
    const producer = (async () => {
      while (!stopping) {
        const key = `k${rng.int(0, KEYS - 1)}`;
        const rollback = rng.next() < 0.1;
        let client: pg.PoolClient | null = null;
        let id: string | null = null;
        try {
          client = await pool.connect();
          await client.query("BEGIN");
          const { rows } = await client.query<{ n: number }>(`UPDATE ${SCHEMA}.counters SET n = n + 1 WHERE key = $1 RETURNING n`, [key]);
          const n = rows[0]!.n;
          id = await outbox.publish(client, { topic: "orders", key, payload: { key, n } });
          await client.query(`INSERT INTO ${SCHEMA}.orders (event_id, key, n) VALUES ($1, $2, $3)`, [id, key, n]);
          if (rollback) {
            await client.query("ROLLBACK");
            rolledBackIds.push(id);
            counts.rolledBack++;
          } else {
            await client.query("COMMIT");
            counts.committed++;
          }
        } catch {
          // A COMMIT whose answer was lost: the orders table says whether it committed.
          counts.commitUnknown++;
          await client?.query("ROLLBACK").catch(() => undefined);
        } finally {
          client?.release();
        }
        await new Promise((resolve) => setTimeout(resolve, rng.int(1, 8)));
      }
    })();

    for (let slot = 0; slot < RELAYS; slot++) startRelay(slot);
    const deadline = Date.now() + options.seconds * 1000;
    while (Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, rng.int(500, 2_500)));
      for (let slot = 0; slot < RELAYS; slot++) if (relays[slot] === null) startRelay(slot);
      const fault = rng.next();
      if (fault < 0.6) {
        const slot = rng.int(0, RELAYS - 1);
        const victim = relays[slot];
        if (victim) {
          killedByRunner.add(victim);
          victim.kill("SIGKILL");
          counts.relayKills++;
        }
      } else {
        await redis.kill();
        counts.redisKills++;
        await new Promise((resolve) => setTimeout(resolve, rng.int(300, 2_000)));
        await redis.start();
      }
    }
    stopping = true;
    await producer;
    options.log(`faults stopped: ${counts.relayKills} relay kills (+${counts.failpointKills} at the failpoint), ${counts.redisKills} Redis kills; draining`);
    for (let slot = 0; slot < RELAYS; slot++) if (relays[slot] === null) startRelay(slot);
    const drainDeadline = Date.now() + 120_000;
    for (;;) {
      for (let slot = 0; slot < RELAYS; slot++) if (relays[slot] === null) startRelay(slot);
      const { rows } = await pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${SCHEMA}.outbox`);
      if (rows[0]!.n === "0") break;
      if (Date.now() > drainDeadline) throw new Error(`the outbox did not drain within 120 s (${rows[0]!.n} left)`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    for (const child of relays) child?.kill("SIGTERM");

    // ── the checker ──
    const { rows: committed } = await pool.query<{ event_id: string; key: string; n: number }>(`SELECT event_id, key, n FROM ${SCHEMA}.orders`);
    const committedIds = new Set(committed.map((r) => r.event_id));
    const client = new Redis(redis.url);
    const entries = (await client.xrange("chaos:orders", "-", "+")) as Array<[string, string[]]>;
    client.disconnect();
    const delivered = entries.map(([, f]) => ({ id: f[f.indexOf("id") + 1]!, ...(JSON.parse(f[f.indexOf("payload") + 1]!) as { key: string; n: number }) }));
    const deliveredIds = new Set(delivered.map((d) => d.id));
    const missing = committed.filter((r) => !deliveredIds.has(r.event_id));
    const phantom = delivered.filter((d) => !committedIds.has(d.id));
    const rolledBackDelivered = rolledBackIds.filter((id) => deliveredIds.has(id));
    // Per key, the last copy of each event, in stream order, must run 1, 2, 3 … without a gap.
    const orderViolations: string[] = [];
    const byKey = new Map<string, Array<{ id: string; n: number }>>();
    for (const d of delivered) byKey.set(d.key, [...(byKey.get(d.key) ?? []), d]);
    for (const [key, list] of byKey) {
      const lastIndex = new Map<string, number>();
      list.forEach((d, i) => lastIndex.set(d.id, i));
      const lastOrder = list.filter((d, i) => lastIndex.get(d.id) === i).map((d) => d.n);
      const expected = committed.filter((r) => r.key === key).map((r) => r.n).sort((a, b) => a - b);
      if (JSON.stringify(lastOrder) !== JSON.stringify(expected)) orderViolations.push(`${key}: delivered ${lastOrder.slice(0, 12).join(",")}… expected ${expected.slice(0, 12).join(",")}…`);
    }
    const duplicates = delivered.length - deliveredIds.size;
    const ok = missing.length === 0 && phantom.length === 0 && rolledBackDelivered.length === 0 && orderViolations.length === 0 && committed.length > 0;
    const rows: Array<[string, string | number]> = [
      ["committed events (orders table)", committed.length],
      ["rolled back on purpose", counts.rolledBack],
      ["commits with a lost answer", counts.commitUnknown],
      ["relay SIGKILLs (timed / at relay-after-publish)", `${counts.relayKills} / ${counts.failpointKills}`],
      ["Redis SIGKILLs", counts.redisKills],
      ["delivered (copies / distinct)", `${delivered.length} / ${deliveredIds.size}`],
      ["redeliveries (duplicates)", duplicates],
      ["committed but never delivered", missing.length],
      ["delivered but never committed", phantom.length + rolledBackDelivered.length],
      ["keys out of commit order", orderViolations.length],
      ["verdict", ok ? "ok" : "FAILED"],
    ];
    writeFileSync(join(dir, "report.json"), JSON.stringify({ seed: options.seed, seconds: options.seconds, counts, missing: missing.slice(0, 50), phantom: phantom.slice(0, 50), orderViolations }, null, 2));
    return { ok, rows };
  } finally {
    stopping = true;
    for (const child of relays) {
      if (child) killedByRunner.add(child);
      child?.kill("SIGKILL");
    }
    await pool.end().catch(() => undefined);
    await redis.stop();
    await postgres.stop();
  }
}

export function formatOutboxTable(result: OutboxChaosResult): string {
  const width = Math.max(...result.rows.map(([label]) => label.length));
  return ["| check | value |", "| --- | ---: |", ...result.rows.map(([label, value]) => `| ${label.padEnd(width)} | ${value} |`)].join("\n");
}
