/**
 * The per-file store helpers themselves (test/helpers/postgres-stores.ts, redis-stores.ts): what a
 * test opens is closed after it, workers it registers close before their backend, a schema is
 * dropped once its test is over and a Redis prefix's keys once the file is.
 */
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { Queue } from "../../src/index.js";
import { postgresTestStores } from "../helpers/postgres-stores.js";
import { redisTestStores } from "../helpers/redis-stores.js";

// Registered before the stores' hooks, so it runs after them (vitest runs after-hooks last first).
const prefixesToCheck: string[] = [];
afterAll(async () => {
  const { Redis } = await import("ioredis");
  const client = new Redis(redisStores.url);
  try {
    for (const prefix of prefixesToCheck) expect(await client.keys(`${prefix}:*`)).toEqual([]);
  } finally {
    client.disconnect();
  }
});

const stores = postgresTestStores({ eventLog: false }, { schemaPrefix: "stores" });
const redisStores = redisTestStores({}, { prefixLabel: "stores" });

async function schemaExists(schema: string): Promise<boolean> {
  const { rows } = await stores.admin.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema]);
  return rows.length === 1;
}

describe("postgresTestStores", () => {
  const closed: string[] = [];
  let previous: { schema: string; pool: pg.Pool } | null = null;

  it("opens a migrated backend on a fresh schema with the file's defaults; closes latest first after the test", async () => {
    const b = await stores.open();
    expect(b.schema).toMatch(/^stores_[0-9a-f]{12}$/);
    expect(await schemaExists(b.schema)).toBe(true);
    await new Queue("q", { backend: b }).add("job", {});
    const pool = (b as unknown as { pool: pg.Pool }).pool;
    expect(b.capabilities.eventLog).toBe(false);
    const close = b.close.bind(b);
    b.close = async () => {
      closed.push("backend");
      return close();
    };
    stores.closeAfterTest({ close: async () => void closed.push("worker") });
    previous = { schema: b.schema, pool };
  });

  it("(after the test) closed the worker, then the backend, then dropped its schema", async () => {
    expect(closed).toEqual(["worker", "backend"]);
    expect(previous!.pool.ended).toBe(true);
    expect(await schemaExists(previous!.schema)).toBe(false);
  });

  it("closeNow closes at once and not again after the test; refuses what it never registered", async () => {
    let closes = 0;
    const worker = stores.closeAfterTest({ close: async () => void closes++ });
    await stores.closeNow(worker);
    expect(closes).toBe(1);
    await expect(stores.closeNow(worker)).rejects.toThrow(/not registered/);
  });
});

describe("redisTestStores", () => {
  it("opens a backend under a fresh prefix (or the one given) and deletes its keys after the file", async () => {
    const b = redisStores.backend();
    expect(b.description).toMatch(/prefix cvt-stores-[0-9a-f]{10}/);
    await new Queue("q", { backend: b }).add("job", {});
    const named = redisStores.prefix("named");
    const c = redisStores.backend({ prefix: named });
    await new Queue("q", { backend: c }).add("job", {});
    const prefix = /prefix ([^)\s]+)/.exec(b.description)![1]!;
    expect(await redisStores.admin.keys(`${prefix}:*`)).not.toEqual([]);
    prefixesToCheck.push(prefix, named);
  });
});
