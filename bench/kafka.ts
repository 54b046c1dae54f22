/**
 * `npm run bench -- --kafka [--events 20000] [--jobs 10000] [--runs 3]`
 *
 * Kafka, against librdkafka's MOCK CLUSTER (a Kafka-protocol test broker in the kcat process: in
 * memory, no disk, no replication, on loopback). THE FIGURES DESCRIBE THE MOCK BROKER, NOT KAFKA:
 * they compare code paths on one machine, never what a Kafka cluster would do.
 * - relay events/s: `--events` committed events (100 keys, 100 per transaction) in a throwaway
 *   PostgreSQL's outbox, drained by the poll relay to the KafkaTarget (acks=all), batch 500;
 * - beside it, in the same run: the KafkaTarget publishing the same events from memory in the same
 *   batches (no outbox), and kafkajs's producer.sendBatch of the same records with nothing of
 *   Conveyor in between (the same client's raw produce rate);
 * - consumer processing: `--jobs` no-op jobs, KafkaWorker (one consumer, 4 partitions, concurrency
 *   4) beside BullMQ (one worker, concurrency 4, on a throwaway Redis without persistence), timed
 *   from the first handler start to the last completion, so the mock's ~3 s group-join delay and
 *   BullMQ's connection set-up are both left out.
 * Each figure is the median of `--runs` (after one discarded warm-up round of the producers), the
 * subjects interleaved per run. Not part of `npm test`.
 */
import { parseArgs } from "node:util";
import { Queue as BullQueue, Worker as BullWorker } from "bullmq";
import { Kafka, logLevel } from "kafkajs";
import pg from "pg";
import { PostgresBackend } from "../src/backend/postgres/index.js";
import { silentLogger } from "../src/core/logger.js";
import { KafkaWorker } from "../src/kafka/index.js";
import type { OutboxEvent } from "../src/outbox/event.js";
import { PostgresPollSource } from "../src/outbox/relay-polling.js";
import { Relay } from "../src/outbox/relay.js";
import { KafkaTarget } from "../src/outbox/targets/kafka.js";
import { PostgresOutbox } from "../src/outbox/writer.js";
import { kafkaBrokers, startMockKafka } from "../testkit/servers/kafka.js";
import { startThrowawayPostgres } from "../testkit/servers/postgres.js";
import { startThrowawayRedis } from "../testkit/servers/redis.js";
import { deferred, fmt, machineLine, median, peerVersions, sleep } from "./lib.js";

const { values } = parseArgs({
  options: {
    kafka: { type: "boolean" },
    events: { type: "string", default: "20000" },
    jobs: { type: "string", default: "10000" },
    runs: { type: "string", default: "3" },
  },
});
const EVENTS = Number(values.events);
const JOBS = Number(values.jobs);
const RUNS = Number(values.runs);
const BATCH = 500;
const SCHEMA = "bench_kafka";

console.log(`# Kafka — mock broker, not Kafka (librdkafka's mock cluster via kcat, 3 brokers, in memory)`);
console.log(machineLine());
const cluster = await startMockKafka();
const postgres = await startThrowawayPostgres({ database: "bench" });
const redis = await startThrowawayRedis();
const pool = new pg.Pool({ connectionString: postgres.url, max: 4 });
const kafka = new Kafka({ brokers: kafkaBrokers(cluster.url), logLevel: logLevel.NOTHING });
let seq = 0;
const name = (label: string) => `bench-${label}-${++seq}`;

async function fillOutbox(): Promise<void> {
  await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  const b = new PostgresBackend({ connectionString: postgres.url, schema: SCHEMA, logger: silentLogger, poolSize: 1 });
  await b.migrate();
  await b.close();
  const outbox = new PostgresOutbox({ schema: SCHEMA });
  for (let i = 0; i < EVENTS; i += 100) {
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      for (let k = 0; k < Math.min(100, EVENTS - i); k++)
        await outbox.publish(client, { topic: "order.created", key: `k${k}`, payload: { n: i + k, orderId: `o-${i + k}` } });
      await client.query("COMMIT");
    } finally {
      client.release();
    }
  }
}

const memoryEvents = (): OutboxEvent[] =>
  Array.from({ length: EVENTS }, (_, n) => ({
    id: `raw-${n}`,
    seq: n,
    topic: "order.created",
    key: `k${n % 100}`,
    payloadText: JSON.stringify({ n, orderId: `o-${n}` }),
    headers: {},
    createdAt: Date.now(),
  }));

async function relayRate(): Promise<number> {
  await fillOutbox();
  const relay = new Relay({
    source: new PostgresPollSource({ connectionString: postgres.url, schema: SCHEMA, logger: silentLogger }),
    target: new KafkaTarget({ url: cluster.url, topicPrefix: `${name("relay")}.` }),
    logger: silentLogger,
    batchSize: BATCH,
  });
  let published = 0;
  relay.on("relay:published", ({ count }) => void (published += count));
  const t0 = performance.now();
  await relay.start();
  while (published < EVENTS) await sleep(5);
  const r = EVENTS / ((performance.now() - t0) / 1000);
  await relay.close();
  return r;
}

async function targetRate(): Promise<number> {
  const events = memoryEvents();
  const target = new KafkaTarget({ url: cluster.url, topicPrefix: `${name("target")}.` });
  await target.connect();
  const t0 = performance.now();
  for (let i = 0; i < events.length; i += BATCH) await target.publish(events.slice(i, i + BATCH));
  const r = events.length / ((performance.now() - t0) / 1000);
  await target.close();
  return r;
}

async function rawProduceRate(): Promise<number> {
  const events = memoryEvents();
  const producer = kafka.producer({ maxInFlightRequests: 1 });
  await producer.connect();
  const topic = name("raw");
  const t0 = performance.now();
  for (let i = 0; i < events.length; i += BATCH) {
    await producer.sendBatch({
      acks: -1,
      topicMessages: [{ topic, messages: events.slice(i, i + BATCH).map((e) => ({ key: e.key, value: e.payloadText, headers: { "outbox-id": e.id } })) }],
    });
  }
  const r = events.length / ((performance.now() - t0) / 1000);
  await producer.disconnect();
  return r;
}

async function kafkaProcessing(): Promise<number> {
  const topic = name("consume");
  const producer = kafka.producer();
  await producer.connect();
  for (let i = 0; i < JOBS; i += BATCH) {
    await producer.send({
      topic,
      acks: -1,
      messages: Array.from({ length: Math.min(BATCH, JOBS - i) }, (_, k) => ({ key: `k${(i + k) % 100}`, value: JSON.stringify({ i: i + k }) })),
    });
  }
  await producer.disconnect();
  const done = deferred();
  let first = 0;
  let completed = 0;
  const worker = new KafkaWorker({ url: cluster.url, topic, groupId: `${topic}-g`, concurrency: 4, handlers: { [topic]: async () => undefined } });
  worker.on("job:started", () => void (first ||= performance.now()));
  worker.on("job:completed", () => {
    if (++completed === JOBS) done.resolve();
  });
  await done.promise;
  const r = JOBS / ((performance.now() - first) / 1000);
  await worker.close();
  return r;
}

async function bullmqProcessing(): Promise<number> {
  const connection = { host: "127.0.0.1", port: Number(new URL(redis.url).port), maxRetriesPerRequest: null };
  const prefix = name("bull");
  const q = new BullQueue("bench", { connection, prefix });
  for (let i = 0; i < JOBS; i += 5_000) await q.addBulk(Array.from({ length: Math.min(5_000, JOBS - i) }, (_, k) => ({ name: "noop", data: { i: i + k } })));
  const done = deferred();
  let first = 0;
  let completed = 0;
  const worker = new BullWorker(
    "bench",
    async () => {
      first ||= performance.now();
    },
    { connection, prefix, concurrency: 4 },
  );
  worker.on("completed", () => {
    if (++completed === JOBS) done.resolve();
  });
  await done.promise;
  const r = JOBS / ((performance.now() - first) / 1000);
  await worker.close();
  await q.obliterate({ force: true });
  await q.close();
  return r;
}

// One discarded round of the producers first: the first run otherwise measures the JIT warming up.
process.stderr.write("  .. warm-up (discarded)\n");
await rawProduceRate();
await targetRate();
const figures: Record<string, number[]> = { relay: [], target: [], raw: [], kafkaWorker: [], bullmq: [] };
for (let run = 1; run <= RUNS; run++) {
  process.stderr.write(`  .. run ${run}/${RUNS}\n`);
  figures.raw!.push(await rawProduceRate());
  figures.target!.push(await targetRate());
  figures.relay!.push(await relayRate());
  figures.kafkaWorker!.push(await kafkaProcessing());
  figures.bullmq!.push(await bullmqProcessing());
}

const m = (k: string) => median(figures[k]!);
console.log(`\n${peerVersions(["kafkajs", "bullmq"])}; PostgreSQL outbox (throwaway); medians of ${RUNS} runs; events ${EVENTS}, jobs ${JOBS}`);
console.log(`\n| figure (mock broker, not Kafka) | per second | ratio |`);
console.log(`| --- | ---: | ---: |`);
console.log(`| kafkajs producer.sendBatch, raw (acks=all, batch ${BATCH}) | ${fmt(m("raw"))} | 1.00 |`);
console.log(`| KafkaTarget.publish from memory (batch ${BATCH}) | ${fmt(m("target"))} | ${(m("target") / m("raw")).toFixed(2)} of raw |`);
console.log(`| relay PostgreSQL outbox → KafkaTarget (poll, batch ${BATCH}) | ${fmt(m("relay"))} | ${(m("relay") / m("raw")).toFixed(2)} of raw |`);
console.log(
  `| KafkaWorker processing, no-op, 4 partitions / concurrency 4 | ${fmt(m("kafkaWorker"))} | ${(m("kafkaWorker") / m("bullmq")).toFixed(2)} of BullMQ |`,
);
console.log(`| BullMQ processing, no-op, concurrency 4 (Redis, no persistence) | ${fmt(m("bullmq"))} | 1.00 |`);
console.log(
  `\nruns: ${Object.entries(figures)
    .map(([k, v]) => `${k} ${v.map(fmt).join(" / ")}`)
    .join("; ")}`,
);
console.log(machineLine());

await pool.end();
await redis.stop();
await postgres.stop();
await cluster.stop();
