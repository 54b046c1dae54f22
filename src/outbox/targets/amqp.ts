/**
 * Target: RabbitMQ (AMQP 0-9-1) through amqplib, on a confirm channel: an event counts as
 * published only once the broker confirmed it (for a quorum queue: replicated to a majority and
 * written to disk). Messages are persistent, carry the outbox id as `messageId` (and the
 * `outbox-id` header), the topic as routing key and `type`, and are published `mandatory`: an
 * event no queue is bound for comes back and is set aside instead of vanishing.
 *
 * With `declare`, the target creates the seed's topology on connect: the durable topic exchange,
 * a durable quorum queue bound to it, and a dead-letter exchange with its own quorum queue
 * (`<queue>.dlx` → `<queue>.dead`) for messages consumers reject.
 */
import type { ChannelModel, ConfirmChannel, ConsumeMessage } from "amqplib";
import { describeAmqpUrl, openAmqpConnection, publishConfirmed, withTimeout } from "../../amqp/connection.js";
import type { OutboxEvent } from "../event.js";
import { outboxHeaders, RejectedEventError, type PublishOutcome, type Target } from "../target.js";

/** Topology the target declares on connect. */
export interface AmqpTopology {
  /** Durable quorum queue bound to the exchange. */
  queue: string;
  /** Binding pattern of the queue (topic syntax). Default `"#"` (every topic). */
  bindingKey?: string;
  /**
   * Deliveries after which a quorum queue dead-letters a message its consumers keep returning
   * (`x-delivery-limit`). Default 20.
   */
  deliveryLimit?: number;
}

/** Options of {@link AmqpTarget}. */
export interface AmqpTargetOptions {
  /** `amqp://user:password@host:5672/vhost`. */
  url: string;
  /** Exchange published to (routing key = the event's topic). Default `"conveyor.outbox"`, a durable topic exchange. */
  exchange?: string;
  /** Declare the exchange, quorum queue and dead-letter exchange on connect. Default: declare only the exchange. */
  declare?: AmqpTopology;
  /** Largest payload accepted, in bytes; larger events are set aside. Default 16777216 (16 MiB, RabbitMQ's usual max_message_size is 128 MiB). */
  maxMessageBytes?: number;
  /** Give up on a broker confirm after this many ms (then retried). Default 30000. */
  confirmTimeoutMs?: number;
}

export class AmqpTarget implements Target {
  readonly description: string;
  readonly exchange: string;
  private readonly url: string;
  private readonly topology: AmqpTopology | null;
  private readonly maxMessageBytes: number;
  private readonly confirmTimeoutMs: number;
  private connection: ChannelModel | null = null;
  private channel: ConfirmChannel | null = null;
  private connecting: Promise<ConfirmChannel> | null = null;
  /** messageIds the broker returned as unroutable, until their confirm arrives. */
  private readonly returned = new Set<string>();

  constructor(options: AmqpTargetOptions) {
    const base = describeAmqpUrl(options?.url, "AmqpTarget");
    this.url = options.url;
    this.exchange = options.exchange ?? "conveyor.outbox";
    this.topology = options.declare ?? null;
    this.maxMessageBytes = options.maxMessageBytes ?? 16 * 1024 * 1024;
    this.confirmTimeoutMs = options.confirmTimeoutMs ?? 30_000;
    this.description = `${base}#${this.exchange}`;
  }

  /** Connects (and declares) now rather than at the first publish. */
  async connect(): Promise<void> {
    await this.open();
  }

  private async open(): Promise<ConfirmChannel> {
    if (this.channel !== null) return this.channel;
    this.connecting ??= this.doOpen().finally(() => {
      this.connecting = null;
    });
    return this.connecting;
  }

  private async doOpen(): Promise<ConfirmChannel> {
    const connection = await openAmqpConnection(this.url);
    try {
      connection.on("close", () => {
        if (this.connection === connection) this.reset();
      });
      const channel = await connection.createConfirmChannel();
      channel.on("error", () => undefined);
      channel.on("close", () => {
        if (this.channel === channel) this.reset();
      });
      channel.on("return", (message: ConsumeMessage) => {
        const id = message.properties.messageId as unknown;
        if (typeof id === "string") this.returned.add(id);
      });
      await channel.assertExchange(this.exchange, "topic", { durable: true });
      if (this.topology) await declareTopology(channel, this.exchange, this.topology);
      this.connection = connection;
      this.channel = channel;
      return channel;
    } catch (error) {
      await connection.close().catch(() => undefined);
      throw error;
    }
  }

  private reset(): void {
    const connection = this.connection;
    this.connection = null;
    this.channel = null;
    connection?.close().catch(() => undefined);
  }

  async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
    const channel = await this.open();
    const outcomes: PublishOutcome[] = new Array<PublishOutcome>(events.length);
    const confirms: Array<Promise<void>> = [];
    const positions: number[] = [];
    for (const [i, event] of events.entries()) {
      const content = Buffer.from(event.payloadText);
      if (content.length > this.maxMessageBytes) {
        outcomes[i] = {
          status: "rejected",
          error: new RejectedEventError(`event is ${content.length} bytes, over the AMQP target's maxMessageBytes of ${this.maxMessageBytes}`),
        };
        continue;
      }
      this.returned.delete(event.id);
      positions.push(i);
      confirms.push(
        publishConfirmed(channel, this.exchange, event.topic, content, {
          persistent: true,
          mandatory: true,
          messageId: event.id,
          type: event.topic,
          contentType: "application/json",
          timestamp: Math.floor(event.createdAt / 1000),
          headers: outboxHeaders(event),
        }),
      );
    }
    if (confirms.length === 0) return outcomes;
    const settled = await withTimeout(Promise.allSettled(confirms), this.confirmTimeoutMs, () => {
      // A confirm that never comes: the channel is suspect; the next round opens a fresh one.
      this.reset();
      return new Error(`no broker confirm within ${this.confirmTimeoutMs} ms`);
    });
    settled.forEach((result, n) => {
      const i = positions[n]!;
      const event = events[i]!;
      if (result.status === "rejected") {
        outcomes[i] = { status: "retry", error: result.reason as Error };
      } else if (this.returned.delete(event.id)) {
        outcomes[i] = {
          status: "rejected",
          error: new RejectedEventError(`no queue is bound to exchange "${this.exchange}" for routing key "${event.topic}" (returned unroutable)`),
        };
      } else {
        outcomes[i] = { status: "published" };
      }
    });
    return outcomes;
  }

  async close(): Promise<void> {
    const connection = this.connection;
    this.connection = null;
    this.channel = null;
    await connection?.close().catch(() => undefined);
  }
}

async function declareTopology(channel: ConfirmChannel, exchange: string, topology: AmqpTopology): Promise<void> {
  const dlx = `${topology.queue}.dlx`;
  const dead = `${topology.queue}.dead`;
  await channel.assertExchange(dlx, "fanout", { durable: true });
  await channel.assertQueue(dead, { durable: true, arguments: { "x-queue-type": "quorum" } });
  await channel.bindQueue(dead, dlx, "");
  await channel.assertQueue(topology.queue, {
    durable: true,
    arguments: {
      "x-queue-type": "quorum",
      "x-dead-letter-exchange": dlx,
      "x-delivery-limit": topology.deliveryLimit ?? 20,
    },
  });
  await channel.bindQueue(topology.queue, exchange, topology.bindingKey ?? "#");
}
