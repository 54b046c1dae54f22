/**
 * Poll mode: relays side by side never reorder a key nor publish an event twice; NOTIFY wakes an
 * idle relay; a refused event is set aside and the relay goes on; a failing target is retried
 * with backoff and a key never overtakes its failed event; SQLite relays take turns; a relay
 * claims its next batch while the target confirms the previous one, and never lets that batch
 * overtake an event of the previous one that failed.
 */
import { readFileSync } from "node:fs";
import pg from "pg";
import { afterAll, afterEach, describe, expect, inject, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { silentLogger } from "../../src/core/logger.js";
import { OutboxDeadLetters } from "../../src/outbox/dead.js";
import { Relay, type ClaimedBatch, type OutboxSource, type SourceHooks } from "../../src/outbox/relay.js";
import { PostgresPollSource, SqlitePollSource } from "../../src/outbox/relay-polling.js";
import { RejectedEventError } from "../../src/outbox/target.js";
import { SqliteOutbox } from "../../src/outbox/writer.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";
import { migrateSchema, RecordingTarget, sequencesByKey, writeEvents } from "./helpers.js";
import Database from "better-sqlite3";

const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const schemas = new TestSchemas(url);
const pool = new pg.Pool({ connectionString: url, max: 8 });
const temp = new TempDirs();
const relays: Relay[] = [];
afterEach(async () => {
  for (const r of relays.splice(0)) await r.close();
  await schemas.dropAll();
});
afterAll(async () => {
  await pool.end();
  await temp.removeAll();
});

function relay(schema: string, target: RecordingTarget, options: { pollIntervalMs?: number; batchSize?: number } = {}): Relay {
  const r = new Relay({
    source: new PostgresPollSource({ connectionString: url, schema, logger: silentLogger }),
    target,
    logger: silentLogger,
    backoffBaseMs: 5,
    backoffMaxMs: 50,
    ...options,
  });
  relays.push(r);
  return r;
}

/** A started relay whose target refuses for good the event numbered `n` (RejectedEventError `reason`); the ids it set aside. */
async function startRefusing(schema: string, target: RecordingTarget, n: number, reason: string): Promise<{ r: Relay; rejected: string[] }> {
  target.decide = (e) =>
    (JSON.parse(e.payloadText) as { n: number }).n === n ? { status: "rejected", error: new RejectedEventError(reason) } : { status: "published" };
  const r = relay(schema, target);
  const rejected: string[] = [];
  r.on("relay:rejected", ({ event }) => rejected.push(event.id));
  await r.start();
  return { r, rejected };
}

async function backlog(schema: string): Promise<number> {
  const { rows } = await pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${schema}.outbox`);
  return Number(rows[0]!.n);
}

describe("PostgreSQL poll relay", () => {
  it("three relays side by side: every event once, each key in commit order", async () => {
    const schema = schemas.create("ob");
    await migrateSchema(url, schema);
    const target = new RecordingTarget();
    target.maxDelayMs = 15;
    for (let i = 0; i < 3; i++) await relay(schema, target, { batchSize: 7 }).start();
    // Written while the relays run, from two writers at once.
    const ids = (await Promise.all([writeEvents(pool, schema, 600, { keys: 6, perTx: 3 }), writeEvents(pool, schema, 600, { keys: 6, perTx: 5 })])).flat();
    await waitFor(() => target.received.length >= ids.length, { timeoutMs: 60_000, description: "every event relayed" });
    await waitFor(async () => (await backlog(schema)) === 0, { timeoutMs: 10_000 });
    const receivedIds = target.received.map((e) => e.id);
    expect(new Set(receivedIds).size).toBe(receivedIds.length); // never twice
    expect(new Set(receivedIds)).toEqual(new Set(ids));
    // Per key, arrival order = seq order (= commit order of the key, see the writer test).
    const byKey = new Map<string, number[]>();
    for (const e of target.received) byKey.set(e.key!, [...(byKey.get(e.key!) ?? []), e.seq]);
    for (const seqs of byKey.values()) expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(sequencesByKey(target.received).size).toBe(6);
  });

  it("an idle relay is woken by the commit's NOTIFY, not by its poll interval", async () => {
    const schema = schemas.create("ob");
    await migrateSchema(url, schema);
    const target = new RecordingTarget();
    const r = relay(schema, target, { pollIntervalMs: 600_000 });
    await r.start();
    // Let it go idle (first claim finds nothing and sleeps for the poll interval).
    await new Promise((resolve) => setTimeout(resolve, 300));
    await writeEvents(pool, schema, 3, { keys: 1, perTx: 3 });
    await waitFor(() => target.received.length === 3, { timeoutMs: 15_000, description: "woken by NOTIFY" });
  });

  it("sets aside an event the target refuses for good, keeps going, and replays it on request", async () => {
    const schema = schemas.create("ob");
    await migrateSchema(url, schema);
    const target = new RecordingTarget();
    const { r, rejected } = await startRefusing(schema, target, 2, "too large for the target");
    const ids = await writeEvents(pool, schema, 6, { keys: 1, perTx: 6 });
    await waitFor(() => target.received.length === 5 && rejected.length === 1, { timeoutMs: 15_000 });
    // The key went on past its refused event.
    expect(sequencesByKey(target.received).get("k0")).toEqual([0, 1, 3, 4, 5]);
    expect(rejected).toEqual([ids[2]]);
    const dead = OutboxDeadLetters.postgres(pool, { schema });
    const [set] = await dead.list();
    expect(set).toMatchObject({ id: ids[2], topic: "t", key: "k0", payloadText: '{"n":2,"key":"k0"}', target: "recording", error: "too large for the target" });
    expect(await backlog(schema)).toBe(0);
    expect((await r.stats()).rejected).toBe(1);

    target.decide = () => ({ status: "published" });
    expect(await dead.replay([ids[2]!, "nope"])).toEqual([ids[2]]);
    await waitFor(() => target.received.length === 6, { timeoutMs: 15_000 });
    expect(target.received.at(-1)!.id).toBe(ids[2]);
    expect(await dead.count()).toBe(0);
  });

  it("sets aside an event whose refusal's reason holds U+0000 (kept as U+FFFD), once, and goes on", async () => {
    // PostgreSQL's text refuses U+0000: the settle failed, the batch was published again and
    // refused again, round after round, and the key behind it never moved.
    const schema = schemas.create("ob");
    await migrateSchema(url, schema);
    const target = new RecordingTarget();
    const { rejected } = await startRefusing(schema, target, 1, "broker said: bad\u0000byte");
    const ids = await writeEvents(pool, schema, 3, { keys: 1, perTx: 3 });
    await waitFor(() => target.received.length === 2 && rejected.length >= 1, { timeoutMs: 15_000 });
    await waitFor(async () => (await backlog(schema)) === 0, { timeoutMs: 10_000 });
    expect(rejected).toEqual([ids[1]]);
    expect(sequencesByKey(target.received).get("k0")).toEqual([0, 2]);
    const [set] = await OutboxDeadLetters.postgres(pool, { schema }).list();
    expect(set).toMatchObject({ id: ids[1], error: "broker said: bad\ufffdbyte" });
  });

  it("backs off while the target fails; a key never overtakes its failed event; nothing lost", async () => {
    const schema = schemas.create("ob");
    await migrateSchema(url, schema);
    const target = new RecordingTarget();
    let failures = 0;
    // Event 1 of key k0 fails its first three attempts; the rest of the batch is taken.
    target.decide = (e) => {
      const { n } = JSON.parse(e.payloadText) as { n: number };
      if (n === 1 && failures < 3) {
        failures++;
        return { status: "retry", error: new Error("broker busy") };
      }
      return { status: "published" };
    };
    const r = relay(schema, target);
    const retries: number[] = [];
    r.on("relay:retry", ({ delayMs }) => retries.push(delayMs));
    await writeEvents(pool, schema, 8, { keys: 2, perTx: 8 });
    await r.start();
    await waitFor(() => target.received.length >= 8, { timeoutMs: 15_000 });
    await waitFor(async () => (await backlog(schema)) === 0);
    expect(retries.length).toBe(3);
    expect(retries.every((d) => d >= 1 && d <= 50)).toBe(true);
    const order = sequencesByKey(target.received);
    // k1 (odd numbers) holds 1, 3, 5, 7: 3, 5 and 7 were accepted by the target while 1 failed,
    // so they were published again after it; the last copy of each arrives in order.
    const k1 = order.get("k1")!;
    const lastCopies = [...new Set([...k1].reverse())].reverse();
    expect(lastCopies).toEqual([1, 3, 5, 7]);
    expect(k1.indexOf(1)).toBeLessThan(k1.lastIndexOf(3));
    expect(order.get("k0")).toEqual([0, 2, 4, 6]);
    const stats = await r.stats();
    expect(stats).toMatchObject({ failures: 3, consecutiveFailures: 0, backlog: 0, oldestUnpublishedAgeMs: null });
  });

  it("reports lag while the target is down, and publishes the backlog when it is back", async () => {
    const schema = schemas.create("ob");
    await migrateSchema(url, schema);
    const target = new RecordingTarget();
    target.failWhole = new Error("connection refused");
    const r = relay(schema, target);
    await r.start();
    await writeEvents(pool, schema, 20, { keys: 4, perTx: 5 });
    await waitFor(async () => (await r.stats()).consecutiveFailures >= 3, { timeoutMs: 15_000 });
    const down = await r.stats();
    expect(down.backlog).toBe(20);
    expect(down.lastError).toBe("connection refused");
    await waitFor(async () => ((await r.stats()).oldestUnpublishedAgeMs ?? 0) > 0);
    target.failWhole = null;
    await waitFor(() => target.received.length === 20, { timeoutMs: 15_000 });
    await waitFor(async () => (await r.stats()).consecutiveFailures === 0 && (await r.stats()).backlog === 0);
  });
});

describe("SQLite poll relay", () => {
  it("one relay at a time takes its turn; a standby takes over when it stops; order kept", async () => {
    const path = await temp.file("app.db");
    await new SqliteBackend({ path }).close();
    const db = new Database(path);
    db.pragma("journal_mode = WAL");
    const outbox = new SqliteOutbox();
    const write = db.transaction((from: number, to: number) => {
      for (let n = from; n < to; n++) outbox.publish(db, { topic: "t", key: `k${n % 3}`, payload: { n } });
    });
    const target = new RecordingTarget();
    target.maxDelayMs = 5;
    const make = () => {
      const r = new Relay({ source: new SqlitePollSource({ path, leaseMs: 1_000 }), target, logger: silentLogger, batchSize: 10, pollIntervalMs: 20 });
      relays.push(r);
      return r;
    };
    const first = make();
    const second = make();
    await first.start();
    await second.start();
    write(0, 200);
    await waitFor(() => target.received.length >= 100, { timeoutMs: 20_000 });
    // Only one relay publishes at a time.
    const published = [(await first.stats()).published, (await second.stats()).published];
    expect(published.filter((n) => n > 0)).toHaveLength(1);
    const active = published[0]! > 0 ? first : second;
    await active.close();
    relays.splice(relays.indexOf(active), 1);
    write(200, 300);
    await waitFor(() => target.received.length >= 300, { timeoutMs: 20_000, description: "the standby took over" });
    const ids = target.received.map((e) => e.id);
    expect(new Set(ids).size).toBe(300);
    for (const seq of sequencesByKey(target.received).values()) expect(seq).toEqual([...seq].sort((a, b) => a - b));
    db.close();
  });
});

/**
 * The real source, counting the batches it has out at once (claimed, not yet settled or given
 * back) and the claims that returned events while another batch was out.
 */
class OpenBatchCounter implements OutboxSource {
  open = 0;
  maxOpen = 0;
  claimsWhileOpen = 0;
  /** Claims made while another batch was out that returned an event of a key that batch holds. */
  sameKeyClaimsWhileOpen = 0;
  private readonly openKeys: Array<Set<string | null>> = [];
  constructor(readonly inner: OutboxSource) {}
  get description(): string {
    return this.inner.description;
  }
  get defaultPollIntervalMs(): number {
    return this.inner.defaultPollIntervalMs;
  }
  start(hooks: SourceHooks): Promise<void> {
    return this.inner.start(hooks);
  }
  lag() {
    return this.inner.lag();
  }
  close(): Promise<void> {
    return this.inner.close();
  }
  async claim(limit: number): Promise<ClaimedBatch | null> {
    const batch = await this.inner.claim(limit);
    if (batch === null || batch.events.length === 0) return batch;
    const keys = new Set(batch.events.map((e) => e.key));
    if (this.open > 0) {
      this.claimsWhileOpen++;
      if (this.openKeys.some((held) => [...keys].some((k) => k !== null && held.has(k)))) this.sameKeyClaimsWhileOpen++;
    }
    this.open++;
    this.maxOpen = Math.max(this.maxOpen, this.open);
    this.openKeys.push(keys);
    let closed = false;
    const close = () => {
      if (closed) return;
      closed = true;
      this.open--;
      this.openKeys.splice(this.openKeys.indexOf(keys), 1);
    };
    return {
      events: batch.events,
      settle: (published, rejected, target) => batch.settle(published, rejected, target).finally(close),
      abandon: () => batch.abandon().finally(close),
    };
  }
}

describe("pipelined rounds", () => {
  for (const store of ["postgres", "sqlite"] as const) {
    it(`${store}: the next batch is claimed while the target confirms the previous one; every event once, each key in order`, async () => {
      let source: OutboxSource;
      let write: (count: number) => Promise<void>;
      let remaining: () => Promise<number>;
      if (store === "postgres") {
        const schema = schemas.create("ob");
        await migrateSchema(url, schema);
        source = new PostgresPollSource({ connectionString: url, schema, logger: silentLogger });
        // Four events a transaction, one per key: every batch of 10 holds every key.
        write = async (count) => void (await writeEvents(pool, schema, count, { keys: 4, perTx: 4 }));
        remaining = () => backlog(schema);
      } else {
        const path = await temp.file("app.db");
        await new SqliteBackend({ path }).close();
        const db = new Database(path);
        db.pragma("journal_mode = WAL");
        const outbox = new SqliteOutbox();
        const tx = db.transaction((count: number) => {
          for (let n = 0; n < count; n++) outbox.publish(db, { topic: "t", key: `k${n % 4}`, payload: { n } });
        });
        write = async (count) => tx(count);
        remaining = async () => (db.prepare("SELECT count(*) AS n FROM conveyor_outbox").get() as { n: number }).n;
        source = new SqlitePollSource({ path });
      }
      const counter = new OpenBatchCounter(source);
      const target = new RecordingTarget();
      target.maxDelayMs = 20; // the target is the slow side, so the next claim lands while it works
      await write(200);
      const r = new Relay({ source: counter, target, logger: silentLogger, batchSize: 10, pollIntervalMs: 20 });
      relays.push(r);
      await r.start();
      await waitFor(() => target.received.length >= 200, { timeoutMs: 30_000, description: "every event relayed" });
      await waitFor(async () => (await remaining()) === 0, { timeoutMs: 10_000 });
      const ids = target.received.map((e) => e.id);
      expect(new Set(ids).size).toBe(ids.length); // never twice in the normal path
      expect(ids).toHaveLength(200);
      for (const seq of sequencesByKey(target.received).values()) expect(seq).toEqual([...seq].sort((a, b) => a - b));
      // Pipelined: two batches out at once, never more, and the claimed-ahead batch carried the
      // later events of keys the open batch holds (not only keys it does not).
      expect(counter.maxOpen).toBe(2);
      expect(counter.claimsWhileOpen).toBeGreaterThan(5);
      expect(counter.sameKeyClaimsWhileOpen).toBeGreaterThan(5);
    });
  }

  it("a batch claimed ahead is given back, not published, when an event of the batch before it is to be retried", async () => {
    const schema = schemas.create("ob");
    await migrateSchema(url, schema);
    const target = new RecordingTarget();
    target.maxDelayMs = 10;
    let failures = 0;
    target.decide = (e) => {
      const { n } = JSON.parse(e.payloadText) as { n: number };
      if (n === 1 && failures < 3) {
        failures++;
        return { status: "retry", error: new Error("broker busy") };
      }
      return { status: "published" };
    };
    // One key, one event a batch: [1] is out (and fails) while [2] is claimed ahead.
    await writeEvents(pool, schema, 8, { keys: 1, perTx: 4 });
    const counter = new OpenBatchCounter(new PostgresPollSource({ connectionString: url, schema, logger: silentLogger }));
    const r = new Relay({ source: counter, target, logger: silentLogger, batchSize: 1, backoffBaseMs: 5, backoffMaxMs: 20 });
    relays.push(r);
    const retries: number[] = [];
    r.on("relay:retry", ({ delayMs }) => retries.push(delayMs));
    await r.start();
    await waitFor(() => target.received.length >= 8, { timeoutMs: 15_000 });
    await waitFor(async () => (await backlog(schema)) === 0);
    expect(retries).toHaveLength(3);
    expect(counter.sameKeyClaimsWhileOpen).toBeGreaterThan(3);
    // Event 2 was claimed ahead each time 1 failed: it reached the target only after 1 did, and
    // nothing went twice.
    expect(sequencesByKey(target.received).get("k0")).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });
});

describe("poll settle plan", () => {
  it("deletes a batch through the primary key on a fresh outbox with a large backlog (no statistics yet)", async () => {
    const schema = schemas.create("ob");
    await migrateSchema(url, schema);
    await pool.query(
      `INSERT INTO ${schema}.outbox (id, topic, key, payload, created_at) SELECT 'e' || g, 't', 'k' || (g % 100), '{"n":1}', 1 FROM generate_series(1, 100000) g`,
    );
    const { rows: stats } = await pool.query<{ reltuples: number }>(
      `SELECT c.reltuples FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = 'outbox'`,
      [schema],
    );
    expect(stats[0]!.reltuples).toBe(-1); // never analyzed: the planner has only the table's size
    const settle = readFileSync(new URL("../../src/outbox/queries/poll-settle.sql", import.meta.url), "utf8").replaceAll("{{schema}}", schema);
    const published = Array.from({ length: 500 }, (_, i) => 5_001 + i);
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      const { rows } = await client.query<{ "QUERY PLAN": unknown }>(`EXPLAIN (FORMAT JSON) ${settle}`, [published, [5_600], ["refused"], "t"]);
      const plan = JSON.stringify(rows[0]!["QUERY PLAN"]);
      // The DELETE's own scan of outbox (the set-aside INSERT probes it by seq too).
      expect(plan).not.toMatch(/"Node Type":"Seq Scan"/);
      expect(plan).toMatch(/"Index Name":"outbox_pkey"/);
      const deleted = await client.query(settle, [published, [5_600], ["refused"], "t"]);
      expect(deleted.rowCount).toBe(501);
    } finally {
      await client.query("ROLLBACK");
      client.release();
    }
  });
});
