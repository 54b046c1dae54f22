/**
 * Failures on real servers: the relay SIGKILLed between the target's confirm and the outbox's
 * record (a redelivery, never a loss); the target down (backoff, backlog, then everything); the
 * seed's dual-write hazard next to the outbox under the same kill.
 */
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect as amqpConnect } from "amqplib";
import Database from "better-sqlite3";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { SqliteOutbox } from "../../src/outbox/writer.js";
import { rabbitName, requireRabbit, startThrowawayRabbit } from "../helpers/rabbitmq.js";
import { AmqpTarget } from "../../src/outbox/targets/amqp.js";
import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, afterEach, describe, expect, inject, it } from "vitest";
import { silentLogger } from "../../src/core/logger.js";
import { Relay } from "../../src/outbox/relay.js";
import { PostgresPollSource } from "../../src/outbox/relay-polling.js";
import { RedisStreamTarget } from "../../src/outbox/targets/redis-stream.js";
import { ROOT, runCli, spawnCli } from "../helpers/cli.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";
import { deletePrefix, requireRedis, startThrowawayRedis, testPrefix, type ThrowawayRedis } from "../helpers/redis.js";
import { waitFor } from "../helpers/wait-for.js";
import { expectRedeliveryAfterRelayCrash, migrateSchema, writeEvents } from "./helpers.js";

const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const redisUrl = requireRedis(inject("redisUrl"), inject("redisUnavailable"));
const schemas = new TestSchemas(url);
const pool = new pg.Pool({ connectionString: url, max: 4 });
const redis = new Redis(redisUrl);
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await schemas.dropAll();
});
afterAll(async () => {
  await pool.end();
  redis.disconnect();
});

async function backlog(schema: string): Promise<number> {
  const { rows } = await pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${schema}.outbox`);
  return Number(rows[0]!.n);
}

async function streamIds(client: Redis, stream: string): Promise<string[]> {
  const entries = (await client.xrange(stream, "-", "+")) as Array<[string, string[]]>;
  return entries.map(([, fields]) => fields[fields.indexOf("id") + 1]!);
}

describe("relay crashes", () => {
  it("SIGKILLed after the target confirmed and before the outbox recorded it: published again, never lost", async () => {
    const schema = schemas.create("ob");
    await migrateSchema(url, schema);
    const prefix = testPrefix("ob");
    cleanups.push(() => deletePrefix(redisUrl, prefix));
    const ids = await writeEvents(pool, schema, 40, { keys: 4, perTx: 10 });
    const db = `${url}?schema=${schema}`;
    const args = ["relay", "--db", db, "--target", redisUrl, "--stream-prefix", `${prefix}:`, "--batch-size", "25", "--stats-interval", "0"];
    await expectRedeliveryAfterRelayCrash({ args, ids, backlog: () => backlog(schema), received: () => streamIds(redis, `${prefix}:t`), cleanups });
  });
});

describe("target down", () => {
  let server: ThrowawayRedis;
  it("Redis stopped: the relay backs off with jitter, the backlog grows, nothing is lost, delivery resumes", async () => {
    server = await startThrowawayRedis({ persistence: "always" });
    cleanups.push(() => server.stop());
    const schema = schemas.create("ob");
    await migrateSchema(url, schema);
    const relay = new Relay({
      source: new PostgresPollSource({ connectionString: url, schema, logger: silentLogger }),
      target: new RedisStreamTarget({ url: server.url, streamPrefix: "s:" }),
      logger: silentLogger,
      backoffBaseMs: 20,
      backoffMaxMs: 200,
    });
    cleanups.push(() => relay.close());
    const delays: number[] = [];
    relay.on("relay:retry", ({ delayMs }) => delays.push(delayMs));
    await relay.start();
    const before = await writeEvents(pool, schema, 10, { keys: 2 });
    await waitFor(async () => (await backlog(schema)) === 0, { timeoutMs: 10_000 });

    await server.kill();
    const during = await writeEvents(pool, schema, 30, { keys: 3 });
    await waitFor(() => delays.length >= 4, { timeoutMs: 20_000, description: "retries while Redis is down" });
    const stats = await relay.stats();
    expect(stats.backlog).toBe(30);
    expect(stats.consecutiveFailures).toBeGreaterThanOrEqual(4);
    // Full jitter below a growing ceiling (20, 40, 80, 160, 200 ms).
    expect(delays.every((d) => d >= 1 && d <= 200)).toBe(true);
    expect(new Set(delays).size).toBeGreaterThan(1);

    await server.start();
    await waitFor(async () => (await backlog(schema)) === 0, { timeoutMs: 20_000, description: "delivery resumed" });
    const client = new Redis(server.url);
    try {
      expect(new Set(await streamIds(client, "s:t"))).toEqual(new Set([...before, ...during]));
    } finally {
      client.disconnect();
    }
  });
});

describe("RabbitMQ down", () => {
  // A stop, not a SIGKILL: after a SIGKILL this single-node RabbitMQ 3.10 took over a minute to
  // confirm publishes to its recovered quorum queue (the relay kept backing off meanwhile).
  it("broker stopped: the relay backs off, the backlog waits, every confirmed message survives in the quorum queue", { timeout: 90_000 }, async () => {
    const broker = await startThrowawayRabbit();
    cleanups.push(() => broker.stop());
    const schema = schemas.create("ob");
    await migrateSchema(url, schema);
    const queue = rabbitName("down");
    const relay = new Relay({
      source: new PostgresPollSource({ connectionString: url, schema, logger: silentLogger }),
      target: new AmqpTarget({ url: broker.url, declare: { queue } }),
      logger: silentLogger,
      backoffBaseMs: 50,
      backoffMaxMs: 500,
    });
    cleanups.push(() => relay.close());
    let retries = 0;
    relay.on("relay:retry", () => retries++);
    await relay.start();
    const before = await writeEvents(pool, schema, 10, { keys: 2 });
    await waitFor(async () => (await backlog(schema)) === 0, { timeoutMs: 20_000 });

    await broker.terminate();
    const during = await writeEvents(pool, schema, 20, { keys: 2 });
    await waitFor(() => retries >= 2, { timeoutMs: 20_000, description: "retries while the broker is down" });
    expect(await backlog(schema)).toBe(20);
    await broker.start();
    await waitFor(async () => (await backlog(schema)) === 0, { timeoutMs: 40_000, description: "delivery resumed" });

    const connection = await amqpConnect(broker.url);
    try {
      const channel = await connection.createChannel();
      const ids: string[] = [];
      for (let m = await channel.get(queue, { noAck: true }); m !== false; m = await channel.get(queue, { noAck: true }))
        ids.push(String(m.properties.messageId));
      // Confirmed before the kill, or after the restart: all there (redeliveries allowed).
      expect(new Set(ids)).toEqual(new Set([...before, ...during]));
    } finally {
      await connection.close();
    }
  });
});

describe("the dual-write hazard (seed)", () => {
  it("naive commit-then-publish loses the event when the process dies between the two; the outbox loses none", async () => {
    const schema = schemas.create("ob");
    await migrateSchema(url, schema);
    await pool.query(`CREATE TABLE ${schema}.orders (id text PRIMARY KEY)`);
    const stream = `${testPrefix("dw")}:orders`;
    cleanups.push(() => deletePrefix(redisUrl, stream.split(":")[0]!));
    const place = (mode: string, orderId: string) =>
      new Promise<string | number>((resolve) => {
        const child = spawn(process.execPath, ["--import", "tsx", "test/fixtures/outbox-dual-write.ts", mode, url, schema, redisUrl, stream, orderId], {
          cwd: ROOT,
          env: { ...process.env, DIE_AFTER_COMMIT: "1" },
          stdio: "ignore",
        });
        child.on("exit", (code, signal) => resolve(signal ?? code ?? -1));
      });

    // Naive: the order is committed, the process dies, the message is never sent.
    expect(await place("naive", "order-naive")).toBe("SIGKILL");
    expect((await pool.query(`SELECT id FROM ${schema}.orders`)).rows).toEqual([{ id: "order-naive" }]);
    const relayArgs = ["relay", "--db", `${url}?schema=${schema}`, "--target", redisUrl, "--stream-prefix", `${stream}:`, "--stats-interval", "0"];

    // Outbox: same kill at the same point; the event committed with the order.
    expect(await place("outbox", "order-outbox")).toBe("SIGKILL");
    const relay = spawnCli(relayArgs);
    cleanups.push(async () => {
      if (relay.child.exitCode === null) {
        relay.child.kill("SIGTERM");
        await relay.exited;
      }
    });
    await waitFor(async () => (await redis.xlen(`${stream}:order.created`)) === 1, { timeoutMs: 20_000, description: "the outbox event relayed" });
    const [[, fields]] = (await redis.xrange(`${stream}:order.created`, "-", "+")) as [[string, string[]]];
    expect(JSON.parse(fields[fields.indexOf("payload") + 1]!)).toEqual({ orderId: "order-outbox" });
    // The naive order's message is gone for good.
    expect(await redis.xlen(stream)).toBe(0);
  });
});

describe("conveyor relay from an SQLite outbox to RabbitMQ", () => {
  it("publishes to the declared quorum queue; an unroutable event is set aside and listed by `relay dead ls`", async () => {
    const rabbitUrl = requireRabbit(inject("rabbitmqUrl"), inject("rabbitmqUnavailable"));
    const dir = await mkdtemp(join(tmpdir(), "conveyor-outbox-cli-"));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const path = join(dir, "app.db");
    await new SqliteBackend({ path }).close();
    const db = new Database(path);
    const outbox = new SqliteOutbox();
    const ids = db.transaction(() => [
      outbox.publish(db, { topic: "order.created", key: "o1", payload: { n: 1 } }),
      outbox.publish(db, { topic: "nobody.listens", key: "o1", payload: { n: 2 } }),
      outbox.publish(db, { topic: "order.paid", key: "o1", payload: { n: 3 } }),
    ])();
    db.close();
    const queue = rabbitName("cli");
    const exchange = rabbitName("cli-x");
    const relay = spawnCli([
      "relay",
      "--db",
      `sqlite:${path}`,
      "--target",
      rabbitUrl,
      "--exchange",
      exchange,
      "--declare-queue",
      queue,
      "--binding-key",
      "order.#",
      "--stats-interval",
      "0",
    ]);
    cleanups.push(async () => {
      if (relay.child.exitCode === null) {
        relay.child.kill("SIGTERM");
        await relay.exited;
      }
    });
    const connection = await amqpConnect(rabbitUrl);
    connection.on("error", () => undefined);
    cleanups.push(() => connection.close().catch(() => undefined));
    // checkQueue on a queue not declared yet closes its channel: one channel per look.
    const depth = async () => {
      const probe = await connection.createChannel();
      probe.on("error", () => undefined);
      try {
        return (await probe.checkQueue(queue)).messageCount;
      } catch {
        return -1;
      } finally {
        await probe.close().catch(() => undefined);
      }
    };
    await waitFor(async () => (await depth()) === 2, { timeoutMs: 30_000, description: "two events in the quorum queue" });
    const channel = await connection.createChannel();
    const first = await channel.get(queue, { noAck: true });
    const second = await channel.get(queue, { noAck: true });
    expect([first && first.properties.messageId, second && second.properties.messageId]).toEqual([ids[0], ids[2]]);
    const dead = await waitFor(
      async () => {
        const listed = await runCli(["relay", "dead", "ls", "--db", `sqlite:${path}`, "--json"]);
        const events = JSON.parse(listed.stdout) as Array<{ id: string; error: string }>;
        return events.length === 1 ? events : null;
      },
      { timeoutMs: 15_000 },
    );
    expect(dead[0]).toMatchObject({ id: ids[1] });
    expect(dead[0]!.error).toMatch(/no queue is bound to exchange/);
    relay.child.kill("SIGTERM");
    expect(await relay.exited).toBe(0);
    await channel.deleteQueue(queue);
    await channel.deleteQueue(`${queue}.dead`);
    await channel.deleteExchange(`${queue}.dlx`);
    await channel.deleteExchange(exchange);
  });
});
