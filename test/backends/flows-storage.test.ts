/**
 * What the contract cannot observe: a flow parent's records of its children's outcomes are
 * deleted with the parent (pruned or removed), on every backend, so flows leave nothing behind.
 */
import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, afterEach, describe, expect, inject, it } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { PostgresBackend } from "../../src/backend/postgres/backend.js";
import { RedisBackend } from "../../src/backend/redis/backend.js";
import { SqliteBackend } from "../../src/backend/sqlite/backend.js";
import { silentLogger } from "../../src/core/logger.js";
import { Queue } from "../../src/producer/queue.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";
import { deletePrefix, requireRedis, testPrefix } from "../helpers/redis.js";
import { TempDirs } from "../helpers/temp.js";

const pgUrl = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const redisUrl = requireRedis(inject("redisUrl"), inject("redisUnavailable"));
const schemas = new TestSchemas(pgUrl);
const temp = new TempDirs("conveyor-flows-storage-");
const prefixes: string[] = [];
const opened: Backend[] = [];
afterEach(async () => {
  for (const b of opened.splice(0)) await b.close();
  await schemas.dropAll();
});
afterAll(async () => {
  for (const p of prefixes) await deletePrefix(redisUrl, p);
  await temp.removeAll();
});

/** Runs flows to their end, removes the parents, and checks no outcome record of their children is left. */
async function runAndRemove(b: Backend, count: () => Promise<number>): Promise<void> {
  opened.push(b);
  const q = new Queue("q", { backend: b });
  await q.addFlow({ name: "parent", options: { jobId: "p" }, children: [{ name: "child", options: { jobId: "c" } }] });
  expect(await count()).toBeGreaterThan(0);
  const worker = { id: "w", host: "h", pid: 1 };
  for (const name of ["child", "parent"]) {
    const [claimed] = await b.claim({ queues: ["q"], names: [name], worker, limit: 1, leaseMs: 30_000 });
    expect(await b.complete([{ lease: claimed!.lease, result: null }])).toEqual(["applied"]);
  }
  expect(await b.remove("p")).toBe("removed");
  expect(await count()).toBe(0);

  // A parent that died of its first child and was removed: its other child settling later
  // leaves no record behind either.
  await q.addFlow({
    name: "parent",
    options: { jobId: "p2" },
    children: [
      { name: "child", options: { jobId: "c2" } },
      { name: "child", options: { jobId: "c3" } },
    ],
  });
  const [first, second] = await b.claim({ queues: ["q"], names: ["child"], worker, limit: 2, leaseMs: 30_000 });
  await b.fail([{ lease: first!.lease, error: { name: "Error", message: "no", stack: null }, retryDelayMs: null }]);
  expect((await b.get("p2"))!.state).toBe("dead");
  expect(await b.remove("p2")).toBe("removed");
  expect(await b.complete([{ lease: second!.lease, result: null }])).toEqual(["applied"]);
  expect(await count()).toBe(0);
}

describe("a flow parent's outcome records go with it", () => {
  it("SQLite: flow_children rows", async () => {
    const path = await temp.file("f.db");
    const b = new SqliteBackend({ path });
    const { default: Database } = await import("better-sqlite3");
    const raw = new Database(path, { readonly: true });
    try {
      await runAndRemove(b, async () => (raw.prepare("SELECT count(*) AS n FROM conveyor_flow_children").get() as { n: number }).n);
    } finally {
      raw.close();
    }
  });

  it("PostgreSQL: flow_children rows", async () => {
    const schema = schemas.create();
    const b = new PostgresBackend({ connectionString: pgUrl, schema, logger: silentLogger, poolSize: 2 });
    await b.migrate();
    const admin = new pg.Client({ connectionString: pgUrl });
    await admin.connect();
    try {
      await runAndRemove(
        b,
        async () => (await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${pg.escapeIdentifier(schema)}.flow_children`)).rows[0]!.n,
      );
    } finally {
      await admin.end();
    }
  });

  it("Redis: the parent's fc:<id> hash", async () => {
    const prefix = testPrefix("flows");
    prefixes.push(prefix);
    const b = new RedisBackend({ connection: redisUrl, prefix, logger: silentLogger });
    await b.migrate();
    const raw = new Redis(redisUrl);
    try {
      await runAndRemove(b, async () => (await raw.exists(`${prefix}:{q}:fc:p`)) + (await raw.exists(`${prefix}:{q}:fc:p2`)));
    } finally {
      raw.disconnect();
    }
  });
});
