/**
 * RabbitMQ: Conveyor's AMQP backend beside RabbitMQ's own rate with plain amqplib (the limit:
 * what a client gets from the broker with the same guarantees, persistent messages on a quorum
 * queue, publisher confirms, manual acks) and beside BullMQ (on a throwaway Redis, exactly as
 * bench/redis.ts runs it). A throwaway broker (testkit/servers/rabbitmq.ts) unless RABBITMQ_URL is set;
 * every measurement uses queue names of its own, deleted afterwards.
 */
import { Redis } from "ioredis";
import { connect, type ChannelModel } from "amqplib";
import { AmqpBackend } from "../src/backend/amqp/index.js";
import { silentLogger } from "../src/index.js";
import { deleteBackendQueues, startThrowawayRabbit, type ThrowawayRabbit } from "../testkit/servers/rabbitmq.js";
import { startThrowawayRedis, type ThrowawayRedis } from "../testkit/servers/redis.js";
import { bullmq, Prefixes } from "./redis.js";
import {
  type BenchSizes,
  chunks,
  conveyorLatency,
  conveyorThroughput,
  deferred,
  FILL_CHUNK,
  latencySamples,
  machineLine,
  peerVersions,
  printReport,
  rate,
  runSideBySide,
  sleep,
  type Subject,
  type WithFreshBackend,
} from "./lib.js";

/** Deliveries buffered ahead of free slots, for Conveyor (Worker `prefetch`) and raw amqplib alike. */
const PREFETCH = 100;

let n = 0;
const fresh = (label: string) => `bench-${label}-${process.pid}-${n++}`;

function conveyor(url: string): Subject {
  const withFreshBackend: WithFreshBackend = async (fn) => {
    const backend = new AmqpBackend({ url, prefix: fresh("conveyor"), logger: silentLogger });
    try {
      return await fn(backend);
    } finally {
      await backend.close();
      await deleteBackendQueues(url, backend);
    }
  };
  return {
    name: "Conveyor (amqp)",
    ...conveyorThroughput(withFreshBackend, PREFETCH),
    latency: async (samples) => {
      const prefix = fresh("conveyor");
      const worker = new AmqpBackend({ url, prefix, logger: silentLogger });
      const producer = new AmqpBackend({ url, prefix, logger: silentLogger });
      try {
        return await conveyorLatency(worker, producer, samples);
      } finally {
        await deleteBackendQueues(url, worker);
      }
    },
  };
}

/**
 * Plain amqplib with the guarantees Conveyor gives: a durable quorum queue, persistent messages,
 * publisher confirms (bulk: publish all, then wait for every confirm; single: wait for each),
 * manual acks with prefetch = concurrency + PREFETCH, one ack per message.
 */
function raw(url: string): Subject {
  const withQueue = async <T>(fn: (connection: ChannelModel, queue: string) => Promise<T>): Promise<T> => {
    const connection = await connect(url);
    const queue = fresh("raw");
    try {
      const channel = await connection.createChannel();
      await channel.assertQueue(queue, { durable: true, arguments: { "x-queue-type": "quorum" } });
      await channel.close();
      return await fn(connection, queue);
    } finally {
      const channel = await connection.createChannel();
      await channel.deleteQueue(queue);
      await connection.close();
    }
  };
  const body = (i: number) => Buffer.from(JSON.stringify({ name: "noop", data: { i } }));
  const fill = async (connection: ChannelModel, queue: string, count: number) => {
    const channel = await connection.createConfirmChannel();
    for (const [start, length] of chunks(count, FILL_CHUNK)) {
      for (let i = start; i < start + length; i++) channel.sendToQueue(queue, body(i), { persistent: true });
      await channel.waitForConfirms();
    }
    await channel.close();
  };
  return {
    name: "raw amqplib",
    bulk: (count) => withQueue((connection, queue) => rate(count, () => fill(connection, queue, count))),
    single: (count) =>
      withQueue(async (connection, queue) => {
        const channel = await connection.createConfirmChannel();
        const r = await rate(count, async () => {
          for (let i = 0; i < count; i++) {
            await new Promise<void>((resolve, reject) =>
              channel.sendToQueue(queue, body(i), { persistent: true }, (error: unknown) =>
                error ? reject(error instanceof Error ? error : new Error("nack")) : resolve(),
              ),
            );
          }
        });
        await channel.close();
        return r;
      }),
    processing: (count, concurrency) =>
      withQueue(async (connection, queue) => {
        await fill(connection, queue, count);
        const channel = await connection.createChannel();
        await channel.prefetch(concurrency + PREFETCH);
        const done = deferred();
        let completed = 0;
        const r = await rate(count, async () => {
          await channel.consume(queue, (message) => {
            if (!message) return;
            JSON.parse(message.content.toString());
            channel.ack(message);
            if (++completed === count) done.resolve();
          });
          await done.promise;
        });
        await channel.close();
        return r;
      }),
    latency: (samples) =>
      withQueue(async (connection, queue) => {
        const consumer = await connection.createChannel();
        await consumer.prefetch(10);
        let onStart: (() => void) | null = null;
        await consumer.consume(queue, (message) => {
          if (!message) return;
          onStart?.();
          consumer.ack(message);
        });
        // The producer on a connection of its own, as Conveyor's latency figure has it.
        const producerConnection = await connect(url);
        const producer = await producerConnection.createConfirmChannel();
        await sleep(200);
        const out = await latencySamples(
          [],
          samples,
          (i) =>
            new Promise<void>((resolve, reject) =>
              producer.sendToQueue(queue, body(i), { persistent: true }, (error: unknown) =>
                error ? reject(error instanceof Error ? error : new Error("nack")) : resolve(),
              ),
            ),
          (fn) => (onStart = fn),
        );
        await consumer.close();
        await producerConnection.close();
        return out;
      }),
  };
}

export async function main(sizes: BenchSizes): Promise<void> {
  let rabbit: ThrowawayRabbit | null = null;
  let admin: Redis | null = null;
  let redis: ThrowawayRedis | null = null;
  let amqpUrl = process.env.RABBITMQ_URL;
  let redisUrl = process.env.REDIS_URL;
  try {
    if (!amqpUrl) {
      rabbit = await startThrowawayRabbit();
      amqpUrl = rabbit.url;
    }
    if (!redisUrl) {
      redis = await startThrowawayRedis({ persistence: "none" });
      redisUrl = redis.url;
    }
    console.log(
      `RabbitMQ (${rabbit ? "throwaway node" : "RABBITMQ_URL"}), quorum queues; Redis for BullMQ (${redis ? "throwaway, no persistence" : "REDIS_URL"}); ` +
        `${peerVersions(["amqplib", "bullmq"])}; ${sizes.jobs} jobs; ${machineLine()}\n`,
    );
    admin = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
    // BullMQ exactly as bench/redis.ts runs it, without its Redis memory figure (not comparable here).
    const { memory: _memory, ...bull } = bullmq(redisUrl, new Prefixes(redisUrl), admin);
    const subjects = [conveyor(amqpUrl), raw(amqpUrl), bull];
    const report = await runSideBySide(subjects, sizes);
    console.log("");
    printReport(subjects, report);
  } finally {
    admin?.disconnect();
    await rabbit?.stop();
    await redis?.stop();
  }
}
