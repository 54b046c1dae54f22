/**
 * The Kafka relay target against librdkafka's mock cluster (a Kafka-protocol TEST BROKER started
 * by kcat, not Kafka), read back with kcat (librdkafka, another client than the one publishing):
 * key → partition and per-key order, the outbox headers, oversize set aside; and the outbox
 * failure cases: the relay SIGKILLed mid-batch (after Kafka confirmed, before the outbox recorded
 * it) and the broker process killed and restarted (unconfirmed events published again).
 */
import pg from "pg";
import { afterAll, afterEach, describe, expect, inject, it } from "vitest";
import { silentLogger } from "../../src/core/logger.js";
import type { OutboxEvent } from "../../src/outbox/event.js";
import { Relay } from "../../src/outbox/relay.js";
import { PostgresPollSource } from "../../src/outbox/relay-polling.js";
import { KafkaTarget } from "../../src/outbox/targets/kafka.js";
import { kafkaName, readTopic, requireKafka, startMockKafka } from "../helpers/kafka.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";
import { waitFor } from "../helpers/wait-for.js";
import { expectRedeliveryAfterRelayCrash, migrateSchema, writeEvents } from "./helpers.js";

const kafkaUrl = requireKafka(inject("kafkaUrl"), inject("kafkaUnavailable"));
const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const schemas = new TestSchemas(url);
const pool = new pg.Pool({ connectionString: url, max: 4 });
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await schemas.dropAll();
});
afterAll(() => pool.end());

async function backlog(schema: string): Promise<number> {
  const { rows } = await pool.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${schema}.outbox`);
  return Number(rows[0]!.n);
}

let seq = 0;
function event(over: Partial<OutboxEvent> = {}): OutboxEvent {
  seq++;
  return {
    id: `ev-${seq}-${Math.random().toString(36).slice(2, 8)}`,
    seq,
    topic: "order.created",
    key: "o1",
    payloadText: `{"n":${seq}}`,
    headers: { "trace-id": "t1" },
    createdAt: 1_700_000_000_000 + seq,
    ...over,
  };
}

describe("KafkaTarget (mock broker, not Kafka)", () => {
  it("sends the outbox key as the record key (one partition per key, commit order kept) with the outbox headers, acks=all", async () => {
    const prefix = `${kafkaName("p")}.`;
    const target = new KafkaTarget({ url: kafkaUrl, topicPrefix: prefix });
    cleanups.push(() => target.close());
    const events = Array.from({ length: 60 }, (_, i) => event({ key: `k${i % 6}`, payloadText: JSON.stringify({ n: i, key: `k${i % 6}` }) }));
    const unkeyed = event({ key: null });
    expect(await target.publish([...events.slice(0, 30), unkeyed])).toEqual(Array.from({ length: 31 }, () => ({ status: "published" })));
    expect(await target.publish(events.slice(30))).toEqual(events.slice(30).map(() => ({ status: "published" })));

    const records = await readTopic(kafkaUrl, `${prefix}order.created`);
    expect(records).toHaveLength(61);
    const partitionOf = new Map<string, Set<number>>();
    const orderOf = new Map<string, number[]>();
    for (const r of records.sort((a, b) => a.partition - b.partition || a.offset - b.offset)) {
      if (r.key === null) continue;
      partitionOf.set(r.key, (partitionOf.get(r.key) ?? new Set()).add(r.partition));
      orderOf.set(r.key, [...(orderOf.get(r.key) ?? []), (JSON.parse(r.payload!) as { n: number }).n]);
    }
    // One partition per key, and within it the order the relay sent.
    for (const [, partitions] of partitionOf) expect(partitions.size).toBe(1);
    expect(new Set([...partitionOf.values()].map((s) => [...s][0])).size).toBeGreaterThan(1);
    for (const [key, ns] of orderOf) expect(ns).toEqual(events.filter((e) => e.key === key).map((e) => (JSON.parse(e.payloadText) as { n: number }).n));
    const first = records.find((r) => r.headers["outbox-id"] === events[0]!.id)!;
    expect(first).toMatchObject({ key: "k0", payload: events[0]!.payloadText });
    expect(first.headers).toMatchObject({ "outbox-id": events[0]!.id, "outbox-key": "k0", "outbox-topic": "order.created", "trace-id": "t1" });
    expect(records.find((r) => r.headers["outbox-id"] === unkeyed.id)).toMatchObject({ key: null });
  });

  it("sets aside an event over maxMessageBytes and publishes the rest of its batch; a URL path pins one topic", async () => {
    const topic = kafkaName("one");
    const warnings: string[] = [];
    const logger = { info: () => {}, warn: (_f: object, m: string) => void warnings.push(m), error: (_f: object, m: string) => void warnings.push(m) };
    const target = new KafkaTarget({ url: `${kafkaUrl}/${topic}`, maxMessageBytes: 500, logger });
    cleanups.push(() => target.close());
    const ok = event({ topic: "a" });
    const big = event({ topic: "b", payloadText: JSON.stringify("x".repeat(1_000)) });
    const outcomes = await target.publish([ok, big]);
    expect(outcomes[0]).toEqual({ status: "published" });
    expect(outcomes[1]).toMatchObject({ status: "rejected" });
    expect((outcomes[1] as { error: Error }).error.message).toMatch(/over the Kafka target's maxMessageBytes of 500/);
    expect((await readTopic(kafkaUrl, topic)).map((r) => r.headers["outbox-id"])).toEqual([ok.id]);
    expect(target.description).toBe(`${kafkaUrl}/${topic}`);
    // kafkajs's warnings reach the logger, and the partitioner is named, so it has none to give here.
    expect(warnings).toEqual([]);
  });

  it("refuses a URL that is not kafka://host:port", () => {
    expect(() => new KafkaTarget({ url: "kafka://nohost" })).toThrow(/must be host:port/);
    expect(() => new KafkaTarget({})).toThrow(/needs/);
  });
});

describe("relay to Kafka under failure (mock broker, not Kafka)", () => {
  it("relay SIGKILLed after Kafka confirmed a batch and before the outbox recorded it: that batch again, nothing lost", async () => {
    const schema = schemas.create("okf");
    await migrateSchema(url, schema);
    const prefix = `${kafkaName("crash")}.`;
    const ids = await writeEvents(pool, schema, 40, { keys: 4, perTx: 10 });
    const args = ["relay", "--db", `${url}?schema=${schema}`, "--target", kafkaUrl, "--topic-prefix", prefix, "--batch-size", "25", "--stats-interval", "0"];
    const received = async () => (await readTopic(kafkaUrl, `${prefix}t`)).map((r) => r.headers["outbox-id"]!);
    await expectRedeliveryAfterRelayCrash({ args, ids, backlog: () => backlog(schema), received, cleanups });
  });

  it(
    "broker process killed and restarted: the relay backs off, keeps the unconfirmed events and publishes them to the restarted cluster",
    { timeout: 60_000 },
    async () => {
      const cluster = await startMockKafka({ fixedPorts: true, brokers: 1 });
      cleanups.push(() => cluster.stop());
      const schema = schemas.create("okb");
      await migrateSchema(url, schema);
      const relay = new Relay({
        source: new PostgresPollSource({ connectionString: url, schema, logger: silentLogger }),
        target: new KafkaTarget({ url: cluster.url, ackTimeoutMs: 2_000 }),
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
      // The mock keeps records in memory only: read what the first cluster confirmed before killing it.
      const confirmedBefore = (await readTopic(cluster.url, "t")).map((r) => r.headers["outbox-id"]);

      await cluster.kill();
      const during = await writeEvents(pool, schema, 20, { keys: 2 });
      await waitFor(() => retries >= 2, { timeoutMs: 30_000, description: "retries while the broker is down" });
      expect(await backlog(schema)).toBe(20);
      await cluster.start();
      await waitFor(async () => (await backlog(schema)) === 0, { timeoutMs: 40_000, description: "delivery resumed on the restarted broker" });
      const afterRestart = (await readTopic(cluster.url, "t")).map((r) => r.headers["outbox-id"]);
      expect(new Set(confirmedBefore)).toEqual(new Set(before));
      // Everything written while the broker was down reached the new one; nothing was marked published without it.
      expect(new Set(afterRestart)).toEqual(new Set(during));
    },
  );
});
