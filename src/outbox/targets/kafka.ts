/**
 * Target: Kafka, through kafkajs (an optional peer dependency). Each event becomes one record on
 * the topic `topicPrefix + event.topic` (or the one `topic` given): the outbox key is the record
 * key, so the default partitioner sends one key's events to one partition, where Kafka keeps them
 * in the order the relay sends them (commit order). The outbox id travels in the `outbox-id`
 * header (with the other outbox headers and the event's own), the creation time as the record
 * timestamp. A batch counts as published only when every partition leader answered with
 * `acks = -1` (all in-sync replicas have it); until then the relay keeps the events and sends them
 * again. One request per broker is in flight at a time, so a retried request cannot overtake the
 * next one and reorder a key.
 *
 * Tested against librdkafka's mock cluster (a test broker, not Kafka): see docs/kafka.md.
 */
import type { Kafka, Producer, TopicMessages } from "kafkajs";
import { InvalidInputError } from "../../core/errors.js";
import type { Logger } from "../../core/logger.js";
import { loadKafkajs, openKafka, parseKafkaUrl } from "../../kafka/client.js";
import type { OutboxEvent } from "../event.js";
import { outboxHeaders, RejectedEventError, type PublishOutcome, type Target } from "../target.js";
import { shown } from "../../core/checks.js";

/** Options of {@link KafkaTarget}. Give `url` or `brokers` (or your own `kafka` client). */
export interface KafkaTargetOptions {
  /** `kafka://host:9092[,host2:9092][/topic]`; a path sends every event to that one topic. */
  url?: string;
  /** Seed brokers, `host:port`. */
  brokers?: string[];
  /** Your own kafkajs client (the target still creates and closes its own producer). */
  kafka?: Kafka;
  /** Send every event to this topic instead of `topicPrefix + event.topic`. Default: none. */
  topic?: string;
  /** Topic = prefix + the event's topic. Default `""`. */
  topicPrefix?: string;
  /**
   * kafkajs's idempotent producer (a broker-side sequence per partition drops a retried duplicate).
   * Default `false`: kafkajs marks it experimental, and librdkafka's mock cluster, the only broker
   * here, answers its producer-id request with a controller that does not exist (docs/kafka.md).
   * Without it a retry after a lost answer can write a record twice: consumers dedup on `outbox-id`.
   */
  idempotent?: boolean;
  /** Largest record (payload + headers + key) accepted, in bytes; larger events are set aside. Default 1000000 (Kafka's default `max.message.bytes` is 1048588). */
  maxMessageBytes?: number;
  /** How long a broker may take to confirm a batch, in ms (then the batch is retried). Default 30000. */
  ackTimeoutMs?: number;
  /** Client id the brokers see. Default `"conveyor-relay"`. */
  clientId?: string;
  /** kafkajs's warnings and errors. Default: dropped (the relay reports publish failures itself). */
  logger?: Logger;
}

/** Errors no resend can cure: the record or the topic is wrong for this cluster. */
const PERMANENT = new Set([
  "MESSAGE_TOO_LARGE",
  "RECORD_LIST_TOO_LARGE",
  "INVALID_TOPIC_EXCEPTION",
  "INVALID_RECORD",
  "TOPIC_AUTHORIZATION_FAILED",
  "CORRUPT_MESSAGE",
]);

/** The kafkajs protocol error type behind `error` (kafkajs wraps the broker's error in retries). */
export function kafkaErrorType(error: unknown): string | null {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 5; depth++) {
    const type = (e as { type?: unknown }).type;
    if (typeof type === "string") return type;
    const next = (e as { cause?: unknown; originalError?: unknown }).originalError ?? e.cause;
    e = next;
  }
  return null;
}

export class KafkaTarget implements Target {
  readonly description: string;
  private readonly brokers: string[];
  private readonly ownKafka: Kafka | null;
  private readonly topic: string | null;
  private readonly topicPrefix: string;
  private readonly idempotent: boolean;
  private readonly maxMessageBytes: number;
  private readonly ackTimeoutMs: number;
  private readonly clientId: string;
  private readonly logger: Logger | undefined;
  private producer: Producer | null = null;
  private connecting: Promise<Producer> | null = null;

  constructor(options: KafkaTargetOptions) {
    const location = options.url !== undefined ? parseKafkaUrl(options.url) : null;
    this.brokers = location?.brokers ?? options.brokers ?? [];
    this.ownKafka = options.kafka ?? null;
    if (this.brokers.length === 0 && this.ownKafka === null)
      throw new InvalidInputError("KafkaTarget needs { url: 'kafka://host:9092' }, { brokers } or { kafka }");
    this.topic = options.topic ?? (location?.topic || null);
    this.topicPrefix = options.topicPrefix ?? "";
    this.idempotent = options.idempotent ?? false;
    this.maxMessageBytes = options.maxMessageBytes ?? 1_000_000;
    this.ackTimeoutMs = options.ackTimeoutMs ?? 30_000;
    if (!Number.isInteger(this.maxMessageBytes) || this.maxMessageBytes < 1)
      throw new InvalidInputError(`maxMessageBytes must be an integer >= 1; got ${shown(options.maxMessageBytes)}`);
    if (!Number.isInteger(this.ackTimeoutMs) || this.ackTimeoutMs < 1)
      throw new InvalidInputError(`ackTimeoutMs must be an integer >= 1; got ${shown(options.ackTimeoutMs)}`);
    this.clientId = options.clientId ?? "conveyor-relay";
    this.logger = options.logger;
    const where = this.topic !== null ? this.topic : `${this.topicPrefix}*`;
    this.description = `kafka://${this.brokers.join(",") || "(client)"}/${where}`;
  }

  /** Connects now rather than at the first publish. */
  async connect(): Promise<void> {
    await this.open();
  }

  private open(): Promise<Producer> {
    if (this.producer !== null) return Promise.resolve(this.producer);
    this.connecting ??= (async () => {
      const kafka = this.ownKafka ?? (await openKafka({ brokers: this.brokers, clientId: this.clientId, ...(this.logger ? { logger: this.logger } : {}) }));
      // Named explicitly: kafkajs's default (murmur2, as the Java client) warns when left implicit.
      const { Partitioners } = await loadKafkajs();
      const producer = kafka.producer({
        idempotent: this.idempotent,
        maxInFlightRequests: 1,
        allowAutoTopicCreation: true,
        createPartitioner: Partitioners.DefaultPartitioner,
      });
      try {
        await producer.connect();
      } catch (error) {
        await producer.disconnect().catch(() => undefined);
        throw error;
      }
      this.producer = producer;
      return producer;
    })().finally(() => {
      this.connecting = null;
    });
    return this.connecting;
  }

  async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
    const outcomes = new Array<PublishOutcome>(events.length);
    const byTopic = new Map<string, { indexes: number[]; messages: TopicMessages["messages"] }>();
    events.forEach((event, i) => {
      const headers = outboxHeaders(event);
      const bytes =
        Buffer.byteLength(event.payloadText) +
        Buffer.byteLength(event.key ?? "") +
        Object.entries(headers).reduce((n, [k, v]) => n + Buffer.byteLength(k) + Buffer.byteLength(v), 0);
      if (bytes > this.maxMessageBytes) {
        outcomes[i] = {
          status: "rejected",
          error: new RejectedEventError(`event is ${bytes} bytes, over the Kafka target's maxMessageBytes of ${this.maxMessageBytes}`),
        };
        return;
      }
      const topic = this.topic ?? this.topicPrefix + event.topic;
      let entry = byTopic.get(topic);
      if (!entry) byTopic.set(topic, (entry = { indexes: [], messages: [] }));
      entry.indexes.push(i);
      entry.messages.push({ key: event.key, value: event.payloadText, headers, timestamp: String(event.createdAt) });
    });
    if (byTopic.size === 0) return outcomes;
    const producer = await this.open();
    try {
      await producer.sendBatch({ acks: -1, timeout: this.ackTimeoutMs, topicMessages: [...byTopic].map(([topic, { messages }]) => ({ topic, messages })) });
      for (const { indexes } of byTopic.values()) for (const i of indexes) outcomes[i] = { status: "published" };
      return outcomes;
    } catch (error) {
      if (!PERMANENT.has(kafkaErrorType(error) ?? "")) throw error;
    }
    // One topic refused the batch for good: send topic by topic to set aside only what it refused.
    for (const [topic, { indexes, messages }] of byTopic) {
      try {
        await producer.send({ topic, acks: -1, timeout: this.ackTimeoutMs, messages });
        for (const i of indexes) outcomes[i] = { status: "published" };
      } catch (error) {
        const type = kafkaErrorType(error);
        const permanent = PERMANENT.has(type ?? "");
        const reason = new RejectedEventError(`Kafka refused topic ${JSON.stringify(topic)}: ${type ?? (error as Error).message}`, { cause: error });
        for (const i of indexes) outcomes[i] = permanent ? { status: "rejected", error: reason } : { status: "retry", error: error as Error };
      }
    }
    return outcomes;
  }

  async close(): Promise<void> {
    const producer = this.producer ?? (await this.connecting?.catch(() => null)) ?? null;
    this.producer = null;
    await producer?.disconnect();
  }
}
