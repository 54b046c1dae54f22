/**
 * Each target on its real server: RabbitMQ (confirms, persistent messages, the declared quorum
 * queue and dead-letter exchange, unroutable events set aside), Redis Streams (fields, MAXLEN,
 * oversize set aside), a Conveyor queue (outbox id = job id, so a redelivery is a duplicate) and a
 * webhook (Standard Webhooks signature verified, 4xx set aside, 5xx retried).
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { connect as amqpConnect } from "amqplib";
import { Redis } from "ioredis";
import { afterAll, describe, expect, inject, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { generateWebhookSecret, verifyWebhook } from "../../src/http/webhooks.js";
import type { OutboxEvent } from "../../src/outbox/event.js";
import { AmqpTarget } from "../../src/outbox/targets/amqp.js";
import { QueueTarget } from "../../src/outbox/targets/queue.js";
import { RedisStreamTarget } from "../../src/outbox/targets/redis-stream.js";
import { WebhookTarget } from "../../src/outbox/targets/webhook.js";
import { rabbitName, requireRabbit } from "../helpers/rabbitmq.js";
import { deletePrefix, requireRedis, testPrefix } from "../helpers/redis.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const rabbitUrl = requireRabbit(inject("rabbitmqUrl"), inject("rabbitmqUnavailable"));
const redisUrl = requireRedis(inject("redisUrl"), inject("redisUnavailable"));
const temp = new TempDirs();
afterAll(() => temp.removeAll());

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

describe("AmqpTarget (RabbitMQ)", () => {
  it("publishes persistent, confirmed messages with the outbox id to a declared quorum queue with a dead-letter exchange", async () => {
    const queue = rabbitName("q");
    const exchange = rabbitName("x");
    const target = new AmqpTarget({ url: rabbitUrl, exchange, declare: { queue, bindingKey: "order.*" } });
    const events = [event(), event(), event({ key: null })];
    try {
      expect(await target.publish(events)).toEqual(events.map(() => ({ status: "published" })));
      // Not bound for "invoice.created": comes back unroutable and is set aside, the rest goes on.
      const outcomes = await target.publish([event({ topic: "invoice.created" }), event()]);
      expect(outcomes[0]).toMatchObject({ status: "rejected" });
      expect((outcomes[0] as { error: Error }).error.message).toMatch(/no queue is bound/);
      expect(outcomes[1]).toEqual({ status: "published" });
      const tooBig = new AmqpTarget({ url: rabbitUrl, exchange, maxMessageBytes: 10 });
      expect((await tooBig.publish([event({ payloadText: JSON.stringify("x".repeat(100)) })]))[0]).toMatchObject({ status: "rejected" });
      await tooBig.close();
    } finally {
      await target.close();
    }
    const connection = await amqpConnect(rabbitUrl);
    try {
      const channel = await connection.createChannel();
      const got = [];
      for (let m = await channel.get(queue, { noAck: false }); m !== false; m = await channel.get(queue, { noAck: false })) got.push(m);
      expect(got).toHaveLength(4);
      expect(got[0]!.properties).toMatchObject({ messageId: events[0]!.id, deliveryMode: 2, type: "order.created", contentType: "application/json" });
      expect(got[0]!.properties.headers).toMatchObject({ "outbox-id": events[0]!.id, "outbox-key": "o1", "trace-id": "t1" });
      expect(got.slice(0, 3).map((m) => m.content.toString())).toEqual(events.map((e) => e.payloadText));
      // The topology is what the seed asks for: quorum queue, dead-lettering to <queue>.dlx → <queue>.dead.
      channel.nack(got[0]!, false, false);
      await waitFor(async () => (await channel.checkQueue(`${queue}.dead`)).messageCount === 1, { timeoutMs: 10_000 });
      await channel.deleteQueue(queue);
      await channel.deleteQueue(`${queue}.dead`);
      await channel.deleteExchange(`${queue}.dlx`);
      await channel.deleteExchange(exchange);
    } finally {
      await connection.close();
    }
  });
});

describe("RedisStreamTarget", () => {
  it("XADDs each event with its id in a field, trims with MAXLEN ~, and sets aside an oversize event", async () => {
    const prefix = `${testPrefix("ob")}:`;
    const target = new RedisStreamTarget({ url: redisUrl, streamPrefix: prefix, maxLen: 100, maxMessageBytes: 200 });
    const redis = new Redis(redisUrl);
    try {
      const events = Array.from({ length: 300 }, () => event());
      const outcomes = await target.publish([...events, event({ payloadText: JSON.stringify("y".repeat(500)) })]);
      expect(outcomes.slice(0, 300).every((o) => o.status === "published")).toBe(true);
      expect(outcomes[300]).toMatchObject({ status: "rejected" });
      expect((outcomes[300] as { error: Error }).error.message).toMatch(/over the stream target's maxMessageBytes/);
      const length = await redis.xlen(`${prefix}order.created`);
      expect(length).toBeLessThan(300); // approximately trimmed
      expect(length).toBeGreaterThanOrEqual(100);
      const [[, fields]] = (await redis.xrevrange(`${prefix}order.created`, "+", "-", "COUNT", 1)) as [[string, string[]]];
      const record: Record<string, string> = {};
      for (let i = 0; i < fields.length; i += 2) record[fields[i]!] = fields[i + 1]!;
      expect(record).toMatchObject({
        id: events[299]!.id,
        topic: "order.created",
        key: "o1",
        payload: events[299]!.payloadText,
        created_at: String(events[299]!.createdAt),
      });
      expect(JSON.parse(record.headers!) as unknown).toMatchObject({ "outbox-id": events[299]!.id, "trace-id": "t1" });
      // A key of another type under the stream's name: refused for good, not retried forever.
      await redis.set(`${prefix}taken`, "x");
      expect((await target.publish([event({ topic: "taken" })]))[0]).toMatchObject({ status: "rejected" });
    } finally {
      await target.close();
      redis.disconnect();
      await deletePrefix(redisUrl, prefix.slice(0, -1));
    }
  });
});

describe("QueueTarget", () => {
  it("makes each event a job whose id is the outbox id: a redelivery is a duplicate, not a second job", async () => {
    const backend = new SqliteBackend({ path: await temp.file("q.db") });
    const target = new QueueTarget({ backend, queue: "orders", closeBackend: true });
    try {
      const events = [event(), event()];
      expect(await target.publish(events)).toEqual([{ status: "published" }, { status: "published" }]);
      expect(await target.publish([events[0]!])).toEqual([{ status: "published" }]); // the redelivery
      const page = await backend.list({ queue: "orders" }, { limit: 10 });
      expect(page.map((j) => j.id).sort()).toEqual(events.map((e) => e.id).sort());
      const job = await backend.get(events[0]!.id);
      expect(job).toMatchObject({ name: "order.created", data: { n: events[0]!.seq }, meta: { outbox: { id: events[0]!.id, key: "o1" } } });
      // A topic that is no valid job name can never become a job: set aside.
      expect((await target.publish([event({ topic: "has space" })]))[0]).toMatchObject({ status: "rejected" });
    } finally {
      await target.close();
    }
  });
});

describe("WebhookTarget", () => {
  it("signs each delivery (Standard Webhooks), sets aside a 4xx, retries a 5xx and the key behind it", async () => {
    const secret = generateWebhookSecret();
    const received: Array<{ id: string; body: unknown }> = [];
    const statusFor = new Map<string, number>();
    const server: Server = createServer((req: IncomingMessage, res) => {
      let body = "";
      req.on("data", (d: Buffer) => (body += d.toString()));
      req.on("end", () => {
        const verified = verifyWebhook(secret, req.headers, body);
        const id = String(req.headers["webhook-id"]);
        received.push({ id, body: verified });
        res.statusCode = statusFor.get(id) ?? 204;
        res.end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as AddressInfo).port;
    try {
      const target = new WebhookTarget({ url: `http://127.0.0.1:${port}/hooks`, secrets: secret, ssrf: { allow: ["127.0.0.1"] } });
      const [ok, refused, failing, behind, other] = [event(), event({ key: "o2" }), event({ key: "o3" }), event({ key: "o3" }), event({ key: null })];
      statusFor.set(refused.id, 422);
      statusFor.set(failing.id, 503);
      const outcomes = await target.publish([ok, refused, failing, behind, other]);
      expect(outcomes.map((o) => o.status)).toEqual(["published", "rejected", "retry", "retry", "published"]);
      // The event behind the failing one (same key) was not even sent.
      expect(received.map((r) => r.id).sort()).toEqual([ok.id, refused.id, failing.id, other.id].sort());
      expect(received.find((r) => r.id === ok.id)!.body).toMatchObject({ type: "order.created", data: { n: ok.seq } });
      // The guard refuses loopback unless allow-listed, at construction.
      expect(() => new WebhookTarget({ url: `http://127.0.0.1:${port}/hooks`, secrets: secret })).toThrow(/refused unless allow-listed|https/);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
