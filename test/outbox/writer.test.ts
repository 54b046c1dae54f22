/**
 * Writing events inside the caller's transaction: commit and rollback, bad input refused with
 * nothing written, the payload limit, time-sortable ids, per-key commit order (PostgreSQL), and
 * SQLite inside db.transaction().
 */
import Database from "better-sqlite3";
import pg from "pg";
import { afterAll, afterEach, describe, expect, inject, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { InvalidInputError } from "../../src/core/errors.js";
import { PostgresOutbox, SqliteOutbox } from "../../src/outbox/writer.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";
import { TempDirs } from "../helpers/temp.js";
import { migrateSchema } from "./helpers.js";

const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const schemas = new TestSchemas(url);
const pool = new pg.Pool({ connectionString: url, max: 6 });
const temp = new TempDirs();
afterEach(() => schemas.dropAll());
afterAll(async () => {
  await pool.end();
  await temp.removeAll();
});

async function count(schema: string): Promise<number> {
  const { rows } = await pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${schema}.outbox`);
  return Number(rows[0]!.n);
}

describe("PostgresOutbox", () => {
  it("writes with the caller's transaction: commit keeps the event, rollback leaves nothing", async () => {
    const schema = schemas.create("ob");
    await migrateSchema(url, schema);
    const outbox = new PostgresOutbox({ schema });
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      await client.query(`CREATE TABLE ${schema}.orders (id text PRIMARY KEY)`);
      await client.query("COMMIT");

      await client.query("BEGIN");
      await client.query(`INSERT INTO ${schema}.orders VALUES ('o1')`);
      const id = await outbox.publish(client, { topic: "order.created", key: "o1", payload: { orderId: "o1" }, headers: { "trace-id": "abc" } });
      // Not visible outside the transaction before COMMIT.
      expect(await count(schema)).toBe(0);
      await client.query("COMMIT");
      const { rows } = await pool.query(`SELECT id, topic, key, payload::text AS payload, headers::text AS headers FROM ${schema}.outbox`);
      expect(rows).toEqual([{ id, topic: "order.created", key: "o1", payload: '{"orderId":"o1"}', headers: '{"trace-id":"abc"}' }]);

      await client.query("BEGIN");
      await client.query(`INSERT INTO ${schema}.orders VALUES ('o2')`);
      await outbox.publish(client, { topic: "order.created", key: "o2", payload: { orderId: "o2" } });
      await client.query("ROLLBACK");
      expect(await count(schema)).toBe(1);
    } finally {
      client.release();
    }
  });

  it("refuses bad input with a clear error and writes nothing", async () => {
    const schema = schemas.create("ob");
    await migrateSchema(url, schema);
    const outbox = new PostgresOutbox({ schema, maxPayloadBytes: 1_000 });
    const bad: Array<[unknown, RegExp]> = [
      [{ payload: 1 }, /topic must be a non-empty string/],
      [{ topic: "", payload: 1 }, /topic must be a non-empty string/],
      [{ topic: "t" }, /payload is required/],
      [{ topic: "t", key: 5, payload: 1 }, /key must be a non-empty string/],
      [{ topic: "t", payload: { x: "y".repeat(2_000) } }, /over the limit of 1000.*raise maxPayloadBytes/],
      [{ topic: "t", payload: { n: Number.NaN } }, /not JSON-serialisable/],
      [{ topic: "t", payload: 1, headers: { "outbox-id": "x" } }, /reserved/],
      [{ topic: "t", payload: 1, headers: { a: "x\r\ny" } }, /without CR, LF/],
      [{ topic: "t", payload: 1, extra: true }, /unknown field "extra"/],
    ];
    for (const [event, message] of bad) {
      await expect(outbox.publish(pool, event as never)).rejects.toThrow(message);
      await expect(outbox.publish(pool, event as never)).rejects.toBeInstanceOf(InvalidInputError);
    }
    await expect(outbox.publish({} as never, { topic: "t", payload: 1 })).rejects.toThrow(/must be the client your transaction runs on/);
    expect(await count(schema)).toBe(0);
  });

  it("explains a missing table: run the migrations", async () => {
    const outbox = new PostgresOutbox({ schema: "no_such_schema_here" });
    await expect(outbox.publish(pool, { topic: "t", payload: 1 })).rejects.toThrow(/run the Conveyor migrations first/);
  });

  it("gives time-sortable ids, and later commits of one key a later position", async () => {
    const schema = schemas.create("ob");
    await migrateSchema(url, schema);
    const outbox = new PostgresOutbox({ schema });
    const ids: string[] = [];
    for (let i = 0; i < 50; i++) ids.push(await outbox.publish(pool, { topic: "t", payload: i }));
    expect([...ids].sort()).toEqual(ids);

    // Two transactions write key K; the first to insert commits LAST. The key's lock makes the
    // second wait, so its event gets the later position, matching commit order.
    const a = await pool.connect();
    const b = await pool.connect();
    try {
      await a.query("BEGIN");
      await outbox.publish(a, { topic: "t", key: "K", payload: "a" });
      await b.query("BEGIN");
      const bWrites = outbox.publish(b, { topic: "t", key: "K", payload: "b" }).then(() => b.query("COMMIT"));
      // b is blocked on the key lock until a ends.
      const early = await Promise.race([bWrites.then(() => "b-done"), new Promise((r) => setTimeout(() => r("b-waiting"), 300))]);
      expect(early).toBe("b-waiting");
      await a.query("COMMIT");
      await bWrites;
    } finally {
      a.release();
      b.release();
    }
    const { rows } = await pool.query<{ payload: string }>(`SELECT payload::text AS payload FROM ${schema}.outbox WHERE key = 'K' ORDER BY seq`);
    expect(rows.map((r) => r.payload)).toEqual(['"a"', '"b"']);
  });
});

describe("SqliteOutbox", () => {
  it("writes inside db.transaction(), refuses outside one, and rolls back with it", async () => {
    const path = await temp.file("app.db");
    await new SqliteBackend({ path }).close(); // migrates: creates the outbox tables
    const db = new Database(path);
    try {
      db.exec("CREATE TABLE orders (id TEXT PRIMARY KEY)");
      const outbox = new SqliteOutbox();
      const place = db.transaction((orderId: string, fail: boolean) => {
        db.prepare("INSERT INTO orders VALUES (?)").run(orderId);
        const id = outbox.publish(db, { topic: "order.created", key: orderId, payload: { orderId } });
        if (fail) throw new Error("business rule");
        return id;
      });
      const id = place("o1", false);
      expect(() => place("o2", true)).toThrow("business rule");
      const rows = db.prepare("SELECT id, topic, key, payload FROM conveyor_outbox").all();
      expect(rows).toEqual([{ id, topic: "order.created", key: "o1", payload: '{"orderId":"o1"}' }]);
      expect(() => outbox.publish(db, { topic: "t", payload: 1 })).toThrow(/must run inside your db.transaction/);
      expect(() => db.transaction(() => outbox.publish(db, { topic: "t" } as never))()).toThrow(InvalidInputError);
      expect(db.prepare("SELECT count(*) AS n FROM conveyor_outbox").get()).toEqual({ n: 1 });
    } finally {
      db.close();
    }
    const bare = new Database(":memory:");
    try {
      expect(() => bare.transaction(() => new SqliteOutbox().publish(bare, { topic: "t", payload: 1 }))()).toThrow(/run the Conveyor migrations first/);
    } finally {
      bare.close();
    }
  });
});
