/**
 * cdc mode on a throwaway PostgreSQL with wal_level=logical (the shared test server keeps its
 * own settings): setup/teardown of publication and slot, per-key commit order, the LSN confirmed
 * only after the target confirmed, resuming from the slot after a relay restart and after a
 * PostgreSQL restart, retained WAL reported and warned about, and the message for wal_level.
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { silentLogger } from "../../src/core/logger.js";
import { CdcSource, lsnToBigInt, WalLevelError } from "../../src/outbox/relay-cdc.js";
import { Relay } from "../../src/outbox/relay.js";
import { OutboxDeadLetters } from "../../src/outbox/dead.js";
import { RejectedEventError } from "../../src/outbox/target.js";
import { PostgresOutbox } from "../../src/outbox/writer.js";
import { runCli } from "../helpers/cli.js";
import { requireDatabase, startThrowawayPostgres, type ThrowawayPostgres } from "../helpers/postgres.js";
import { waitFor } from "../helpers/wait-for.js";
import { migrateSchema, RecordingTarget, sequencesByKey, writeEvents } from "./helpers.js";

const sharedUrl = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
let server: ThrowawayPostgres;
let pool: pg.Pool;
const schema = "cdc_outbox";

beforeAll(async () => {
  server = await startThrowawayPostgres({ settings: { wal_level: "logical", max_wal_senders: "5", max_replication_slots: "5" } });
  pool = new pg.Pool({ connectionString: server.url, max: 4 });
  pool.on("error", () => undefined);
  await migrateSchema(server.url, schema);
}, 120_000);
afterAll(async () => {
  await pool?.end();
  await server?.stop();
});

function source(options: Partial<ConstructorParameters<typeof CdcSource>[0]> = {}): CdcSource {
  return new CdcSource({ connectionString: server.url, schema, ...options });
}

/** A second outbox schema on the server, its publication and slot set up; a CdcSource of it each call. */
async function setUpCdcSchema(name: string): Promise<() => CdcSource> {
  await migrateSchema(server.url, name);
  const make = () => new CdcSource({ connectionString: server.url, schema: name });
  const setup = make();
  await setup.setup();
  await setup.close();
  return make;
}

/** Drops the publication and slot of a schema set up by setUpCdcSchema. */
async function tearDownCdcSchema(make: () => CdcSource): Promise<void> {
  const down = make();
  await down.teardown();
  await down.close();
}

async function slotLsn(slot: string): Promise<string> {
  const { rows } = await pool.query<{ lsn: string }>("SELECT confirmed_flush_lsn::text AS lsn FROM pg_replication_slots WHERE slot_name = $1", [slot]);
  return rows[0]!.lsn;
}

describe("cdc relay", () => {
  it("says what to change when wal_level is not logical", async () => {
    await migrateSchema(sharedUrl, "cdc_wal_check");
    const s = new CdcSource({ connectionString: sharedUrl, schema: "cdc_wal_check" });
    try {
      await expect(s.setup()).rejects.toBeInstanceOf(WalLevelError);
      await expect(s.setup()).rejects.toThrow(/wal_level = logical.*restart PostgreSQL.*--mode poll/);
      const cli = await runCli(["relay", "--mode", "cdc", "--setup", "--db", `${sharedUrl}?schema=cdc_wal_check`]);
      expect(cli.code).toBe(1);
      expect(cli.stderr).toMatch(/conveyor relay: cdc mode needs wal_level = logical/);
    } finally {
      await s.close();
      const admin = new pg.Client({ connectionString: sharedUrl });
      await admin.connect();
      await admin.query("DROP SCHEMA cdc_wal_check CASCADE");
      await admin.end();
    }
  });

  it("relays in commit order per key, confirms only what the target confirmed, resumes from the slot", async () => {
    const setup = source();
    expect((await setup.setup()).created).toEqual([`publication conveyor_outbox_${schema}`, `slot conveyor_outbox_${schema}`]);
    expect((await setup.setup()).created).toEqual([]); // idempotent
    await setup.close();
    const slot = `conveyor_outbox_${schema}`;

    const target = new RecordingTarget();
    target.maxDelayMs = 5;
    let relay = new Relay({ source: source(), target, logger: silentLogger, batchSize: 50, backoffBaseMs: 5, backoffMaxMs: 50 });
    await relay.start();
    const ids = (await Promise.all([writeEvents(pool, schema, 150, { keys: 5, perTx: 3 }), writeEvents(pool, schema, 150, { keys: 5, perTx: 7 })])).flat();
    await waitFor(() => target.received.length >= 300, { timeoutMs: 30_000 });
    expect(new Set(target.received.map((e) => e.id))).toEqual(new Set(ids));
    expect(target.received).toHaveLength(300);
    const byKey = new Map<string, number[]>();
    for (const e of target.received) byKey.set(e.key!, [...(byKey.get(e.key!) ?? []), e.seq]);
    for (const seqs of byKey.values()) expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    await waitFor(async () => (await relay.stats()).backlog === 0, { timeoutMs: 10_000, description: "published rows deleted" });
    const confirmedAfterAll = await slotLsn(slot);

    // The target fails: nothing more is confirmed to PostgreSQL, the slot's lag grows.
    target.failWhole = new Error("target down");
    const retries: number[] = [];
    relay.on("relay:retry", ({ delayMs }) => retries.push(delayMs));
    const failing = await writeEvents(pool, schema, 20, { keys: 2, perTx: 20 });
    const failingCommitEnd = (await pool.query<{ lsn: string }>("SELECT pg_current_wal_insert_lsn()::text AS lsn")).rows[0]!.lsn;
    await waitFor(() => retries.length >= 3, { timeoutMs: 15_000 });
    // Not confirmed up to the failing transaction's commit (an idle relay may still confirm the
    // keepalives' positions before it; a new relay getting the events again, below, is the proof).
    expect(lsnToBigInt(await slotLsn(slot))).toBeLessThan(lsnToBigInt(failingCommitEnd));
    expect((await relay.stats()).slotLagBytes).toBeGreaterThan(0);

    // Stopped before the target comes back: a new relay gets those events from the slot.
    await relay.close();
    target.failWhole = null;
    const whileStopped = await writeEvents(pool, schema, 10, { keys: 2 });
    relay = new Relay({ source: source(), target, logger: silentLogger, batchSize: 50 });
    await relay.start();
    await waitFor(() => target.received.length >= 330, { timeoutMs: 30_000 });
    expect(
      target.received
        .slice(300)
        .map((e) => e.id)
        .sort(),
    ).toEqual([...failing, ...whileStopped].sort());
    await waitFor(async () => (await slotLsn(slot)) !== confirmedAfterAll);
    await relay.close();
  });

  it("delivers payload and headers exactly as committed: no JSON parse/stringify round trip", async () => {
    const exactSchema = "cdc_exact";
    const exact = await setUpCdcSchema(exactSchema);
    // Each text changes under JSON.parse + JSON.stringify: integers past 2^53, 1.0 and 1e3,
    // integer-like keys (JavaScript puts them first, ascending), a duplicate key, whitespace.
    const payloads = [
      '{ "z": 1.0, "2": 12345678901234567890123, "1": [1e3, -0.0] }',
      '{"id":9007199254740993,"id":"duplicate kept","amount":"12.50"}',
      '[\n  1.10,\n  {"b": true, "a": null}\n]',
      '"plain string"',
    ];
    const headers = '{ "trace-id" : "t-1", "9": "x" }';
    const target = new RecordingTarget();
    const relay = new Relay({ source: exact(), target, logger: silentLogger, backoffBaseMs: 5, backoffMaxMs: 50 });
    await relay.start();
    try {
      for (const [i, payload] of payloads.entries()) {
        await pool.query(`INSERT INTO ${exactSchema}.outbox (id, topic, key, payload, headers) VALUES ($1, 'exact', 'k', $2, $3)`, [
          `exact-${i}`,
          payload,
          headers,
        ]);
      }
      await waitFor(() => target.received.length >= payloads.length, { timeoutMs: 20_000, description: "the exact-text events relayed" });
      expect(target.received.map((e) => e.payloadText)).toEqual(payloads);
      expect(target.received.map((e) => e.headers)).toEqual(payloads.map(() => ({ "trace-id": "t-1", "9": "x" })));
    } finally {
      await relay.close();
      await tearDownCdcSchema(exact);
    }
  });

  it("sets aside an event whose refusal's reason holds U+0000 (kept as U+FFFD), once, and goes on", async () => {
    // PostgreSQL's text refuses U+0000: storing the set-aside event failed, round after round.
    const nulSchema = "cdc_nul";
    const nul = await setUpCdcSchema(nulSchema);
    const target = new RecordingTarget();
    target.decide = (e) => (e.id === "nul-1" ? { status: "rejected", error: new RejectedEventError("broker said: bad\u0000byte") } : { status: "published" });
    const relay = new Relay({ source: nul(), target, logger: silentLogger, backoffBaseMs: 5, backoffMaxMs: 50 });
    const rejected: string[] = [];
    relay.on("relay:rejected", ({ event }) => rejected.push(event.id));
    await relay.start();
    try {
      for (let i = 0; i < 3; i++) {
        await pool.query(`INSERT INTO ${nulSchema}.outbox (id, topic, key, payload) VALUES ($1, 'nul', 'k', '{}')`, [`nul-${i}`]);
      }
      await waitFor(() => target.received.length >= 2, { timeoutMs: 20_000, description: "the events around the refused one relayed" });
      await waitFor(async () => (await relay.stats()).backlog === 0, { timeoutMs: 10_000, description: "every handled row deleted" });
      expect(rejected).toEqual(["nul-1"]);
      expect(target.received.map((e) => e.id)).toEqual(["nul-0", "nul-2"]);
      const [set] = await OutboxDeadLetters.postgres(pool, { schema: nulSchema }).list();
      expect(set).toMatchObject({ id: "nul-1", error: "broker said: bad\ufffdbyte" });
    } finally {
      await relay.close();
      await tearDownCdcSchema(nul);
    }
  });

  // The WAL sender sends a transaction once its commit record is flushed, but other sessions see
  // its rows only once the committing backend leaves the proc array, a moment later (longer while
  // a synchronous standby is awaited, or when the backend waits for a CPU). A relay that publishes
  // in that moment found no row to delete and still confirmed the LSN: the row stayed in the
  // outbox for good (the chaos runs' "rows left"). Synchronous replication to a standby that never
  // comes holds one commit in exactly that moment.
  it("deletes a published row whose transaction was decoded before other sessions could see it", { timeout: 60_000 }, async () => {
    const visSchema = "cdc_visibility";
    const vis = await setUpCdcSchema(visSchema);
    // Only the producer's commit waits for the (absent) standby; the relay's own writes do not.
    // Set before the relay and the producer connect: a new session takes the settings the
    // postmaster has, while an open one applies a reload only when it next gets a command.
    await pool.query("ALTER SYSTEM SET synchronous_standby_names = 'conveyor_absent_standby'");
    await pool.query("ALTER SYSTEM SET synchronous_commit = 'local'");
    await pool.query("SELECT pg_reload_conf()");
    let relay: Relay | null = null;
    let producer: pg.Client | null = null;
    let commit: Promise<unknown> | null = null;
    try {
      await waitFor(
        async () => {
          const probe = new pg.Client({ connectionString: server.url });
          await probe.connect();
          try {
            const names = (await probe.query<{ v: string }>("SELECT current_setting('synchronous_standby_names') AS v")).rows[0]!.v;
            const level = (await probe.query<{ v: string }>("SELECT current_setting('synchronous_commit') AS v")).rows[0]!.v;
            return names === "conveyor_absent_standby" && level === "local";
          } finally {
            await probe.end();
          }
        },
        { timeoutMs: 20_000, description: "new sessions see the reloaded settings" },
      );
      const target = new RecordingTarget();
      const relaySource = vis();
      // Counts the relay's DELETEs of the outbox that found nothing to delete.
      const sourcePool = (relaySource as unknown as { pool: { query: (...args: unknown[]) => Promise<pg.QueryResult> } }).pool;
      const query = sourcePool.query.bind(sourcePool);
      let emptyDeletes = 0;
      sourcePool.query = async (...args: unknown[]) => {
        const result = await query(...args);
        if (typeof args[0] === "string" && args[0].startsWith("DELETE FROM") && result.rowCount === 0) emptyDeletes++;
        return result;
      };
      const warnings: string[] = [];
      const activeRelay = new Relay({ source: relaySource, target, logger: silentLogger, backoffBaseMs: 5, backoffMaxMs: 50 });
      relay = activeRelay;
      activeRelay.on("relay:warning", ({ message }) => warnings.push(message));
      await activeRelay.start();
      producer = new pg.Client({ connectionString: server.url });
      await producer.connect();
      producer.on("error", () => undefined);
      const pid = (await producer.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
      // A commit waits for the standby only once the checkpointer has applied the reload too (it
      // publishes "synchronous standbys are named" to every session), which no query shows: a
      // commit that finished without waiting was published the normal way; try another.
      let id = "";
      for (let attempt = 1; ; attempt++) {
        await producer.query("BEGIN");
        await producer.query("SET LOCAL synchronous_commit = on");
        id = await new PostgresOutbox({ schema: visSchema }).publish(producer, { topic: "t", key: "k", payload: { n: attempt } });
        let settled = false;
        const pending = producer.query("COMMIT");
        commit = pending;
        void pending.then(
          () => (settled = true),
          () => (settled = true),
        );
        const waiting = await waitFor(
          async () =>
            settled || ((await pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep'", [pid])).rowCount === 1 && "waiting"),
          { timeoutMs: 20_000, description: "the commit flushed and waiting for the standby (or done)" },
        );
        if (waiting === "waiting") break;
        if (attempt === 50) throw new Error("50 commits did not wait for the absent standby: synchronous_standby_names was never applied");
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect((await pool.query(`SELECT 1 FROM ${visSchema}.outbox WHERE id = $1`, [id])).rowCount).toBe(0); // not visible yet
      // The relay decodes and publishes it meanwhile, and its DELETE finds no row it can see.
      await waitFor(() => target.received.some((e) => e.id === id), { timeoutMs: 20_000, description: "the event published" });
      await waitFor(() => emptyDeletes > 0, { timeoutMs: 20_000, description: "the relay's DELETE that found nothing" });
      // It waits for the transaction (and says so after 2 s) rather than confirming the LSN.
      await waitFor(() => warnings.some((w) => /not visible yet/.test(w)), { timeoutMs: 20_000, description: "the not-visible warning" });
      // The standby wait ends (cancelled: the commit stays, locally); the row becomes visible.
      await pool.query("SELECT pg_cancel_backend($1)", [pid]);
      await commit;
      expect((await pool.query(`SELECT 1 FROM ${visSchema}.outbox WHERE id = $1`, [id])).rowCount).toBe(1);
      await waitFor(async () => (await activeRelay.stats()).backlog === 0, { timeoutMs: 15_000, description: "the published row deleted" });
      expect(target.received.filter((e) => e.id === id)).toHaveLength(1);
    } finally {
      await pool.query("ALTER SYSTEM RESET synchronous_standby_names");
      await pool.query("ALTER SYSTEM RESET synchronous_commit");
      await pool.query("SELECT pg_reload_conf()");
      await commit?.catch(() => undefined);
      await producer?.end().catch(() => undefined);
      await relay?.close();
      await tearDownCdcSchema(vis);
    }
  });

  it("resumes after PostgreSQL restarts under it, and warns when the slot retains too much WAL", { timeout: 90_000 }, async () => {
    const slot = "cdc_restart_slot";
    const setup = source({ slot, publication: "cdc_restart_pub" });
    await setup.setup();
    await setup.close();
    const target = new RecordingTarget();
    const warnings: string[] = [];
    const relay = new Relay({
      source: source({ slot, publication: "cdc_restart_pub", maxRetainedWalBytes: 1, walCheckIntervalMs: 100 }),
      target,
      logger: silentLogger,
    });
    relay.on("relay:warning", ({ message }) => warnings.push(message));
    await relay.start();
    try {
      const before = await writeEvents(pool, schema, 20, { keys: 2 });
      await waitFor(() => target.received.filter((e) => before.includes(e.id)).length === 20, { timeoutMs: 20_000 });
      await waitFor(() => warnings.some((w) => /holds back \d+ bytes of WAL.*teardown/.test(w)), {
        timeoutMs: 10_000,
        description: "the retained-WAL warning",
      });

      await server.restart();
      const after = await writeEvents(pool, schema, 20, { keys: 2 });
      await waitFor(() => after.every((id) => target.received.some((e) => e.id === id)), {
        timeoutMs: 60_000,
        description: "events after the restart relayed",
      });
      // Nothing lost; per key in order (a redelivery after the restart may repeat a tail).
      for (const seq of sequencesByKey(target.received.filter((e) => after.includes(e.id))).values()) {
        const last = [...new Set([...seq].reverse())].reverse();
        expect(last).toEqual([...last].sort((a, b) => a - b));
      }
      expect(warnings.some((w) => /replication connection was lost/.test(w))).toBe(true);
    } finally {
      await relay.close();
    }
    const db = `${server.url}?schema=${schema}`;
    const teardown = await runCli(["relay", "--mode", "cdc", "--teardown", "--slot", slot, "--publication", "cdc_restart_pub", "--db", db]);
    expect(teardown).toMatchObject({ code: 0, stdout: `dropped slot ${slot} and publication cdc_restart_pub\n` });
    expect((await pool.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = $1", [slot])).rowCount).toBe(0);
  });
});
