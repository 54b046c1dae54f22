/**
 * `npm run bench -- --outbox [--events 20000] [--samples 200] [--runs 3] [--modes poll,cdc] [--targets queue,amqp,redis]`
 *
 * The transactional outbox's relay, on a throwaway PostgreSQL (wal_level=logical), a throwaway
 * RabbitMQ and a throwaway Redis: for poll and cdc mode, to a Conveyor PostgreSQL queue, to
 * RabbitMQ (quorum queue, publisher confirms) and to Redis Streams:
 * - relay events/s: `--events` committed events (100 keys, 100 per transaction) drained from the
 *   outbox to target-confirmed and recorded;
 * - beside it, the target's own raw rate, measured in the same run with that system's own client
 *   and no relay code: Conveyor's `queue.addBulk` (job ids set), amqplib publishing persistent
 *   messages on a confirm channel and waiting for the confirms, ioredis pipelining XADD — the same
 *   events in the same batch size (the limit a relay can reach); relay / raw is their ratio;
 * - commit→published latency p50/p99: one event committed at a time into an idle relay, timed from
 *   COMMIT's return to the relay's `relay:published`.
 * Then, once: marking published rows by DELETE versus UPDATE published_at (the migration's choice).
 * Each figure is the median of `--runs`. Not part of `npm test`.
 */
import { connect as amqpConnect } from "amqplib";
import { Redis } from "ioredis";
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import pg from "pg";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { silentLogger } from "../src/core/logger.js";
import type { OutboxEvent } from "../src/outbox/event.js";
import { CdcSource } from "../src/outbox/relay-cdc.js";
import { PostgresPollSource } from "../src/outbox/relay-polling.js";
import { Relay, type OutboxSource } from "../src/outbox/relay.js";
import type { Target } from "../src/outbox/target.js";
import { AmqpTarget } from "../src/outbox/targets/amqp.js";
import { QueueTarget } from "../src/outbox/targets/queue.js";
import { RedisStreamTarget } from "../src/outbox/targets/redis-stream.js";
import { outboxHeaders } from "../src/outbox/target.js";
import { PostgresOutbox } from "../src/outbox/writer.js";
import { Queue } from "../src/producer/queue.js";
import { startThrowawayPostgres } from "../testkit/servers/postgres.js";
import { startThrowawayRabbit } from "../testkit/servers/rabbitmq.js";
import { startThrowawayRedis } from "../testkit/servers/redis.js";
import { fmt, median, percentile, sleep } from "./lib.js";

const { values } = parseArgs({
  options: {
    outbox: { type: "boolean" },
    events: { type: "string", default: "20000" },
    samples: { type: "string", default: "200" },
    runs: { type: "string", default: "3" },
    modes: { type: "string", default: "poll,cdc" },
    targets: { type: "string", default: "queue,amqp,redis" },
  },
});
const MODES = values.modes.split(",").filter((m): m is "poll" | "cdc" => m === "poll" || m === "cdc");
const TARGET_KINDS = ["queue", "amqp", "redis"] as const;
type TargetKind = (typeof TARGET_KINDS)[number];
const TARGETS = values.targets.split(",").filter((t): t is TargetKind => (TARGET_KINDS as readonly string[]).includes(t));
const EVENTS = Number(values.events);
const SAMPLES = Number(values.samples);
const RUNS = Number(values.runs);
const SCHEMA = "bench_outbox";
const BATCH = 500;

const postgres = await startThrowawayPostgres({ database: "bench", settings: { wal_level: "logical", max_wal_senders: "4", max_replication_slots: "4" } });
const rabbit = await startThrowawayRabbit();
const redis = await startThrowawayRedis({ persistence: "none" });
const pool = new pg.Pool({ connectionString: postgres.url, max: 8 });
const outbox = new PostgresOutbox({ schema: SCHEMA });

async function resetSchema(): Promise<void> {
  await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  const b = new PostgresBackend({ connectionString: postgres.url, schema: SCHEMA, logger: silentLogger, poolSize: 1 });
  await b.migrate();
  await b.close();
}

/**
 * Writes `count` events through the public writer, 100 per transaction over 100 keys, from
 * FILL_WRITERS connections at once, each writing its own quarter of the keys (so writers never
 * wait on each other's key locks). Only speeds the setup up: the relay starts after.
 */
const FILL_WRITERS = 4;
async function fill(count: number): Promise<void> {
  const keysPerWriter = 100 / FILL_WRITERS;
  await Promise.all(
    Array.from({ length: FILL_WRITERS }, async (_, w) => {
      const client = await pool.connect();
      try {
        for (let i = w * 100; i < count; i += 100 * FILL_WRITERS) {
          await client.query("BEGIN");
          for (let k = 0; k < Math.min(100, count - i); k++) {
            const key = `k${w * keysPerWriter + (k % keysPerWriter)}`;
            await outbox.publish(client, { topic: "order.created", key, payload: { n: i + k, orderId: `o-${i + k}` } });
          }
          await client.query("COMMIT");
        }
      } finally {
        client.release();
      }
    }),
  );
}

let targetSeq = 0;
function makeTarget(kind: TargetKind, queueBackend: PostgresBackend): Target {
  targetSeq++;
  if (kind === "queue") return new QueueTarget({ backend: queueBackend, queue: `bench-${targetSeq}` });
  if (kind === "redis") return new RedisStreamTarget({ url: redis.url, streamPrefix: `bench-${targetSeq}:` });
  return new AmqpTarget({ url: rabbit.url, exchange: `bench-x-${targetSeq}`, declare: { queue: `bench-q-${targetSeq}` } });
}

/**
 * The target's own rate with its own client and no relay code: `events` in batches of BATCH,
 * each batch confirmed before the next (as a relay round does), carrying what the relay's
 * messages carry (job id / messageId / id field, the outbox headers). Events per second.
 */
async function rawRate(kind: TargetKind, queueBackend: PostgresBackend, events: readonly OutboxEvent[]): Promise<number> {
  targetSeq++;
  const batches: OutboxEvent[][] = [];
  for (let i = 0; i < events.length; i += BATCH) batches.push(events.slice(i, i + BATCH));
  if (kind === "queue") {
    // Conveyor's own bulk enqueue, job id = outbox id, the same data and meta as QueueTarget's jobs.
    const queue = new Queue(`bench-raw-${targetSeq}`, { backend: queueBackend });
    const t0 = performance.now();
    for (const batch of batches) {
      await queue.addBulk(
        batch.map((e) => ({
          name: e.topic,
          data: JSON.parse(e.payloadText) as unknown,
          options: { jobId: e.id, meta: { outbox: { id: e.id, topic: e.topic, key: e.key, headers: e.headers, createdAt: e.createdAt } } },
        })),
      );
    }
    return events.length / ((performance.now() - t0) / 1000);
  }
  if (kind === "redis") {
    const client = new Redis(redis.url);
    try {
      const t0 = performance.now();
      for (const batch of batches) {
        const pipeline = client.pipeline();
        for (const e of batch) {
          pipeline.xadd(
            `bench-raw-${targetSeq}:${e.topic}`,
            "*",
            "id",
            e.id,
            "topic",
            e.topic,
            "key",
            e.key ?? "",
            "payload",
            e.payloadText,
            "headers",
            JSON.stringify(outboxHeaders(e)),
            "created_at",
            String(e.createdAt),
          );
        }
        const replies = await pipeline.exec();
        const failed = replies?.find(([error]) => error !== null);
        if (!replies || failed) throw failed?.[0] ?? new Error("XADD pipeline answered nothing");
      }
      return events.length / ((performance.now() - t0) / 1000);
    } finally {
      client.disconnect();
    }
  }
  // amqplib: a durable quorum queue bound to a durable topic exchange, persistent messages on a
  // confirm channel, each batch's confirms awaited (the seed's topology, as AmqpTarget declares it).
  const connection = await amqpConnect(rabbit.url);
  try {
    const channel = await connection.createConfirmChannel();
    const exchange = `bench-raw-x-${targetSeq}`;
    const queue = `bench-raw-q-${targetSeq}`;
    await channel.assertExchange(exchange, "topic", { durable: true });
    await channel.assertQueue(queue, { durable: true, arguments: { "x-queue-type": "quorum" } });
    await channel.bindQueue(queue, exchange, "#");
    const t0 = performance.now();
    for (const batch of batches) {
      for (const e of batch) {
        channel.publish(exchange, e.topic, Buffer.from(e.payloadText), {
          persistent: true,
          mandatory: true,
          messageId: e.id,
          type: e.topic,
          contentType: "application/json",
          timestamp: Math.floor(e.createdAt / 1000),
          headers: outboxHeaders(e),
        });
      }
      await channel.waitForConfirms();
    }
    const rate = events.length / ((performance.now() - t0) / 1000);
    await channel.deleteQueue(queue);
    await channel.deleteExchange(exchange);
    return rate;
  } finally {
    await connection.close();
  }
}

async function makeSource(mode: "poll" | "cdc", slot: string): Promise<OutboxSource> {
  if (mode === "poll") return new PostgresPollSource({ connectionString: postgres.url, schema: SCHEMA, logger: silentLogger });
  const source = new CdcSource({ connectionString: postgres.url, schema: SCHEMA, slot, publication: slot });
  await source.setup();
  return source;
}

async function outboxEmpty(): Promise<boolean> {
  const { rows } = await pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${SCHEMA}.outbox`);
  return rows[0]!.n === "0";
}

/** One measurement of relay throughput, raw target rate and commit→published latency. */
async function measure(mode: "poll" | "cdc", kind: TargetKind, run: number): Promise<{ relay: number; raw: number; p50: number; p99: number }> {
  await resetSchema();
  const queueBackend = new PostgresBackend({ connectionString: postgres.url, schema: `${SCHEMA}_q`, logger: silentLogger, poolSize: 4 });
  await queueBackend.migrate();
  const slot = `bench_${mode}_${kind}_${run}`;
  // cdc reads commits after its slot exists: create it before the backlog is written.
  const source = await makeSource(mode, slot);
  await fill(EVENTS);

  // Raw: the target's own client, the same events and batch size, straight from memory.
  const { rows } = await pool.query<{ seq: string; id: string; topic: string; key: string; payload: string; created_at: string }>(
    `SELECT seq::text, id, topic, key, payload::text AS payload, created_at::text FROM ${SCHEMA}.outbox ORDER BY seq`,
  );
  const events: OutboxEvent[] = rows.map((r) => ({
    id: `raw-${r.id}`,
    seq: Number(r.seq),
    topic: r.topic,
    key: r.key,
    payloadText: r.payload,
    headers: {},
    createdAt: Number(r.created_at),
  }));
  const raw = await rawRate(kind, queueBackend, events);

  const target = makeTarget(kind, queueBackend);
  const relay = new Relay({ source, target, logger: silentLogger, batchSize: BATCH });
  let published = 0;
  const publishedAt = new Map<string, number>();
  relay.on("relay:published", ({ count, ids }) => {
    published += count;
    const now = performance.now();
    for (const id of ids) publishedAt.set(id, now);
  });
  const t1 = performance.now();
  await relay.start();
  while (published < EVENTS) await sleep(5);
  const relayRate = EVENTS / ((performance.now() - t1) / 1000);
  while (!(await outboxEmpty())) await sleep(20);

  // Latency: one event per transaction into the idle relay, a random gap between samples.
  const latencies: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    await sleep(2 + Math.random() * 8);
    const client = await pool.connect();
    await client.query("BEGIN");
    const id = await outbox.publish(client, { topic: "order.created", key: `lat${i % 10}`, payload: { i } });
    await client.query("COMMIT");
    const committed = performance.now();
    client.release();
    while (!publishedAt.has(id)) await sleep(0.2);
    latencies.push(publishedAt.get(id)! - committed);
  }
  await relay.close();
  if (mode === "cdc") {
    const cleanup = new CdcSource({ connectionString: postgres.url, schema: SCHEMA, slot, publication: slot });
    await cleanup.teardown();
    await cleanup.close();
  }
  await queueBackend.close();
  await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA}_q CASCADE`);
  return { relay: relayRate, raw, p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
}

/** DELETE vs UPDATE published_at, same claim, same batch; rows/s and the table's size after. */
async function markStrategies(): Promise<Array<{ strategy: string; rowsPerSecond: number; tableBytes: number }>> {
  const out = [];
  for (const strategy of ["delete", "published_at"]) {
    await pool.query("DROP TABLE IF EXISTS bench_mark");
    await pool.query(
      `CREATE TABLE bench_mark (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id text NOT NULL, payload json NOT NULL, published_at bigint)`,
    );
    if (strategy === "published_at") await pool.query("CREATE INDEX bench_mark_unpublished ON bench_mark (seq) WHERE published_at IS NULL");
    await pool.query(`INSERT INTO bench_mark (id, payload) SELECT 'e' || g, '{"n":1}' FROM generate_series(1, $1) g`, [EVENTS]);
    await pool.query("VACUUM ANALYZE bench_mark");
    const unpublished = strategy === "delete" ? "" : "WHERE published_at IS NULL";
    const mark =
      strategy === "delete" ? "DELETE FROM bench_mark WHERE seq = ANY ($1::bigint[])" : "UPDATE bench_mark SET published_at = 1 WHERE seq = ANY ($1::bigint[])";
    const client = await pool.connect();
    const t0 = performance.now();
    for (;;) {
      await client.query("BEGIN");
      const { rows } = await client.query<{ seq: string }>(`SELECT seq FROM bench_mark ${unpublished} ORDER BY seq LIMIT ${BATCH} FOR UPDATE SKIP LOCKED`);
      if (rows.length === 0) {
        await client.query("COMMIT");
        break;
      }
      await client.query(mark, [rows.map((r) => r.seq)]);
      await client.query("COMMIT");
    }
    const rowsPerSecond = EVENTS / ((performance.now() - t0) / 1000);
    client.release();
    const { rows } = await pool.query<{ bytes: string }>("SELECT pg_total_relation_size('bench_mark')::text AS bytes");
    out.push({ strategy, rowsPerSecond, tableBytes: Number(rows[0]!.bytes) });
  }
  await pool.query("DROP TABLE IF EXISTS bench_mark");
  return out;
}

try {
  console.log(
    `outbox relay: ${EVENTS} events (100 keys), batch ${BATCH}, ${SAMPLES} latency samples, median of ${RUNS} run(s); load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(" ")}\n`,
  );
  console.log("| mode | target | relay events/s | target raw events/s | relay / raw | commit→published p50 ms | p99 ms |");
  console.log("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
  for (const mode of MODES) {
    for (const kind of TARGETS) {
      const runs = [];
      for (let r = 0; r < RUNS; r++) runs.push(await measure(mode, kind, r));
      const relay = median(runs.map((x) => x.relay));
      const raw = median(runs.map((x) => x.raw));
      const label = { queue: "Conveyor PostgreSQL queue", amqp: "RabbitMQ quorum queue", redis: "Redis Streams" }[kind];
      console.log(
        `| ${mode} | ${label} | ${fmt(relay)} | ${fmt(raw)} | ${(relay / raw).toFixed(2)} | ${median(runs.map((x) => x.p50)).toFixed(1)} | ${median(runs.map((x) => x.p99)).toFixed(1)} |`,
      );
    }
  }
  console.log(
    `\nload average after: ${loadavg()
      .map((l) => l.toFixed(1))
      .join(" ")}`,
  );
  console.log("\nmarking published rows (claim 500 with SKIP LOCKED, then mark), one run:");
  for (const m of await markStrategies())
    console.log(`  ${m.strategy.padEnd(12)} ${fmt(m.rowsPerSecond)} rows/s, table + indexes after: ${(m.tableBytes / 1024).toFixed(0)} KiB`);
} finally {
  await pool.end();
  await rabbit.stop();
  await redis.stop();
  await postgres.stop();
}
