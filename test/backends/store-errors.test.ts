/**
 * Typed store errors at each driver boundary: a store that is down or locked rejects with a
 * retryable StoreUnavailableError (the HTTP service answers 503 with Retry-After, `conveyor worker`
 * waits), while a mistake keeps its own error.
 */
import Database from "better-sqlite3";
import { afterAll, describe, expect, inject, it } from "vitest";
import { isPostgresUnavailable, PostgresBackend } from "../../src/backend/postgres/backend.js";
import { RedisBackend } from "../../src/backend/redis/backend.js";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { isStoreUnreachable } from "../../src/cli/worker.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { createServer } from "../../src/http/index.js";
import { silentLogger, StoreUnavailableError } from "../../src/index.js";
import { send } from "../http/harness.js";
import { freePort } from "../helpers/ports.js";
import { TempDirs } from "../helpers/temp.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";
import { startThrowawayRedis } from "../helpers/redis.js";
import { waitFor } from "../helpers/wait-for.js";
import type { Backend } from "../../src/backend/contract.js";
import pg from "pg";
import { Redis } from "ioredis";

const temp = new TempDirs();
afterAll(() => temp.removeAll());

const job = () => buildJobSpec({ queue: "q", name: "n", data: null });

describe("StoreUnavailableError at the driver boundary", () => {
  it("PostgreSQL: connection-class SQLSTATEs and shutdowns are retryable; a protocol violation (a client bug) is not", () => {
    const pgError = (code: string) => Object.assign(new Error(`sqlstate ${code}`), { code });
    for (const code of ["08006", "08001", "08003", "57P01", "57P03", "53300"]) expect(isPostgresUnavailable(pgError(code)), code).toBe(true);
    // 08P01: e.g. "bind message supplies 2 parameters, but prepared statement requires 3".
    for (const code of ["08P01", "42P01", "23505", "22P02"]) expect(isPostgresUnavailable(pgError(code)), code).toBe(false);
  });

  it("SQLite: a database locked past busyTimeoutMs; over HTTP a 503 with Retry-After", async () => {
    const path = await temp.file("locked.db");
    const backend = new SqliteBackend({ path, busyTimeoutMs: 50 });
    const locker = new Database(path);
    try {
      locker.exec("BEGIN EXCLUSIVE");
      const error: unknown = await backend.enqueue([job()]).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect((error as StoreUnavailableError).retryable).toBe(true);
      expect(((error as Error).cause as { code?: string }).code).toMatch(/^SQLITE_BUSY/);
      expect(isStoreUnreachable(error)).toBe(true);
      const app = await createServer({ backend, apiKeys: false, logger: false, batchEnqueues: false });
      try {
        await app.listen({ port: 0, host: "127.0.0.1" });
        const r = await send(`http://127.0.0.1:${(app.server.address() as { port: number }).port}`, "POST", "/v1/queues/q/jobs", { body: { name: "n" } });
        expect(r.status).toBe(503);
        expect(r.headers.get("retry-after")).toBe("1");
      } finally {
        await app.close();
      }
      locker.exec("ROLLBACK");
      expect(await backend.enqueue([job()])).toHaveLength(1);
      // A mistake is not an outage.
      const mistake: unknown = await backend.enqueue([job()], { tx: {} }).catch((e: unknown) => e);
      expect(mistake).not.toBeInstanceOf(StoreUnavailableError);
    } finally {
      locker.close();
      await backend.close();
    }
  });

  it("PostgreSQL: a server that refuses connections", async () => {
    const backend = new PostgresBackend({ connectionString: `postgres://conveyor@127.0.0.1:${await freePort()}/conveyor`, logger: silentLogger });
    try {
      for (const call of [() => backend.migrate(), () => backend.get("x"), () => backend.enqueue([job()], { allOrNothing: true })]) {
        const error: unknown = await call().catch((e: unknown) => e);
        expect(error).toBeInstanceOf(StoreUnavailableError);
        expect(isStoreUnreachable(error)).toBe(true);
      }
    } finally {
      await backend.close();
    }
  });

  it("Redis: a server that refuses connections", async () => {
    const backend = new RedisBackend({
      connection: { host: "127.0.0.1", port: await freePort(), maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false },
      logger: silentLogger,
    });
    try {
      const error: unknown = await backend.get("x").catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect(isStoreUnreachable(error)).toBe(true);
    } finally {
      await backend.close().catch(() => undefined);
    }
  });
});

/** An HTTP service over `backend`, and its base URL. */
async function serve(backend: Backend): Promise<{ base: string; close: () => Promise<void> }> {
  const app = await createServer({ backend, apiKeys: false, logger: false, batchEnqueues: false });
  await app.listen({ port: 0, host: "127.0.0.1" });
  return { base: `http://127.0.0.1:${(app.server.address() as { port: number }).port}`, close: () => app.close() };
}

describe("a store that goes away mid-request: HTTP 503 with Retry-After, then service again", () => {
  it("PostgreSQL: the server ends the connection serving the request", async () => {
    const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
    const schemas = new TestSchemas(url);
    const schema = schemas.create();
    const application = `conveyor-outage-${process.pid}-${Date.now()}`;
    const backend = new PostgresBackend({ connectionString: url, schema, applicationName: application, logger: silentLogger });
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    const http = await serve(backend);
    try {
      await backend.migrate();
      // Hold the jobs table, so the enqueue is sure to be in the middle of its statement…
      await admin.query("BEGIN");
      await admin.query(`LOCK TABLE "${schema}".jobs IN ACCESS EXCLUSIVE MODE`);
      const reply = send(http.base, "POST", "/v1/queues/q/jobs", { body: { name: "n" } });
      const waiting = async () =>
        (await admin.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", [application])).rows;
      const [victim] = await waitFor(async () => ((await waiting()).length > 0 ? await waiting() : null), {
        timeoutMs: 20_000,
        description: "the enqueue waits on the lock",
      });
      // …then the server kills the process serving it (what a crash or failover does to it).
      await admin.query("SELECT pg_terminate_backend($1)", [victim!.pid]);
      const r = await reply;
      expect(r.status).toBe(503);
      expect(r.headers.get("retry-after")).toBe("1");
      expect(r.json).toMatchObject({ type: expect.stringContaining("store-unavailable") as string });
      await admin.query("ROLLBACK");
      // The pool reconnects: the next request is served, and the refused one stored nothing.
      const again = await send(http.base, "POST", "/v1/queues/q/jobs", { body: { name: "n" } });
      expect(again.status).toBeLessThan(300);
      expect(await backend.list({ queue: "q" })).toHaveLength(1);
    } finally {
      await http.close();
      await admin.end();
      await backend.close();
      await schemas.dropAll();
    }
  }, 60_000);

  it("Redis: the server is killed (SIGKILL) while the request waits on it", async () => {
    const server = await startThrowawayRedis();
    const backend = new RedisBackend({ connection: server.url, logger: silentLogger });
    const admin = new Redis(server.url);
    const http = await serve(backend);
    try {
      await backend.migrate();
      // Every client's commands wait (the admin's CLIENT PAUSE), so the enqueue cannot finish…
      await admin.call("CLIENT", "PAUSE", "30000", "ALL");
      const reply = send(http.base, "POST", "/v1/queues/q/jobs", { body: { name: "n" } });
      // …when the server dies, with the command sent or about to be: either way no answer comes.
      admin.disconnect();
      await server.kill();
      const r = await reply;
      expect(r.status).toBe(503);
      expect(r.headers.get("retry-after")).toBe("1");
      await server.start();
      await waitFor(async () => (await send(http.base, "POST", "/v1/queues/q/jobs", { body: { name: "n" } })).status < 300, {
        timeoutMs: 30_000,
        description: "service again once Redis is back",
      });
    } finally {
      admin.disconnect();
      await http.close();
      await backend.close().catch(() => undefined);
      await server.stop();
    }
  }, 90_000);
});
