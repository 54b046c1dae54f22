/**
 * The dead-letter view of the Kafka backend: the dead topics read from their start into memory,
 * so dead letters can be got, listed, replayed and removed by id. A log deletes nothing by id, so
 * replay and remove append a marker record (`conveyor-dead-op` header) to the dead topic; a
 * marker hides every dead letter of its id before it, in every view that reads the topic.
 *
 * Each view is a consumer of its own (a private group, nothing committed: it reads from the start
 * each time it starts) that gets every partition of the dead topics. Before an answer it catches
 * up: it waits until it has read up to the high watermarks the brokers report at that moment.
 */
import { randomBytes } from "node:crypto";
import type { Admin, Consumer, Kafka } from "kafkajs";
import type { Logger } from "../../core/logger.js";
import { decode, type Envelope } from "../amqp/envelope.js";
import { headerStrings } from "../../kafka/headers.js";
import type { TopicNames } from "./topics.js";

/** Header of the marker records replay and remove append to a dead topic: "replayed" or "removed". */
export const DEAD_MARKER = "conveyor-dead-op";

/** A dead letter, and where it is. */
export interface DeadLetter {
  readonly envelope: Envelope;
  readonly partition: number;
  readonly offset: number;
}

export class DeadLetterView {
  /** Dead letters by queue, then id (the newest dead letter of an id). */
  private readonly letters = new Map<string, Map<string, DeadLetter>>();
  /** Next offset to read, per `topic:partition`. */
  private readonly position = new Map<string, number>();
  private queues = new Set<string>();
  private consumer: Consumer | null = null;
  private starting: Promise<void> | null = null;
  private readonly progressWaiters = new Set<() => void>();
  private closed = false;

  constructor(private readonly deps: { kafka: Kafka; admin: Admin; topics: TopicNames; logger: Logger; groupPrefix: string }) {}

  /** Reads the dead topics of `queues` up to their current ends. */
  async catchUp(queues: readonly string[]): Promise<void> {
    if (queues.some((q) => !this.queues.has(q)) || !this.starting) await this.restart(queues);
    else await this.starting;
    const ends = new Map<string, number>();
    for (const q of queues) {
      const topic = this.deps.topics.dead(q);
      for (const p of await this.deps.admin.fetchTopicOffsets(topic)) if (Number(p.high) > Number(p.low)) ends.set(`${topic}:${p.partition}`, Number(p.high));
    }
    const behind = () => [...ends].some(([key, high]) => (this.position.get(key) ?? 0) < high);
    const deadline = performance.now() + 30_000;
    while (behind()) {
      if (performance.now() > deadline) throw new Error("the dead-letter view did not catch up with the dead topics within 30 s");
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, 200);
        const waiters = this.progressWaiters;
        waiters.add(done);
        function done() {
          clearTimeout(timer);
          waiters.delete(done);
          resolve();
        }
      });
    }
  }

  /** A new consumer for the union of the queues, reading from the start (a private group commits nothing). */
  private restart(queues: readonly string[]): Promise<void> {
    const previous = this.starting;
    this.starting = (async () => {
      await previous?.catch(() => undefined);
      await this.consumer?.disconnect().catch(() => undefined);
      this.consumer = null;
      for (const q of queues) this.queues.add(q);
      this.letters.clear();
      this.position.clear();
      const consumer = this.deps.kafka.consumer({
        groupId: `${this.deps.groupPrefix}.${randomBytes(6).toString("hex")}`,
        maxWaitTimeInMs: 200,
        allowAutoTopicCreation: true,
      });
      const joined = new Promise<void>((resolve) => consumer.on(consumer.events.GROUP_JOIN, () => resolve()));
      await consumer.connect();
      await consumer.subscribe({ topics: [...this.queues].map((q) => this.deps.topics.dead(q)), fromBeginning: true });
      await consumer.run({
        autoCommit: false,
        eachMessage: async ({ topic, partition, message }) => {
          const parsed = this.deps.topics.parse(topic);
          const offset = Number(message.offset);
          if (parsed) this.read(parsed.queue, partition, offset, message.value, headerStrings(message.headers));
          this.position.set(`${topic}:${partition}`, offset + 1);
          for (const waiter of [...this.progressWaiters]) waiter();
        },
      });
      this.consumer = consumer;
      await joined;
      if (this.closed) await consumer.disconnect().catch(() => undefined);
    })().catch((error: unknown) => {
      this.starting = null;
      throw error;
    });
    return this.starting;
  }

  private read(queue: string, partition: number, offset: number, value: Buffer | null, headers: Record<string, string>): void {
    const byId = this.letters.get(queue) ?? new Map<string, DeadLetter>();
    this.letters.set(queue, byId);
    if (headers[DEAD_MARKER] !== undefined) {
      const id = headers["conveyor-id"] ?? value?.toString() ?? "";
      byId.delete(id);
      return;
    }
    const envelope = value === null ? null : decode(value);
    if (envelope === null) {
      // A record set aside as foreign: shown with its raw value, so it can be read and removed.
      const id = headers["conveyor-id"] ?? `${this.deps.topics.dead(queue)}:${partition}:${offset}`;
      byId.set(id, { envelope: foreignEnvelope(id, queue, value, headers), partition, offset });
      return;
    }
    byId.set(envelope.id, { envelope, partition, offset });
  }

  find(queue: string, id: string): DeadLetter | null {
    return this.letters.get(queue)?.get(id) ?? null;
  }

  all(queue: string): DeadLetter[] {
    return [...(this.letters.get(queue)?.values() ?? [])];
  }

  /** Hides a dead letter at once (its marker is on its way to the topic). */
  forget(queue: string, id: string): void {
    this.letters.get(queue)?.delete(id);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.starting?.catch(() => undefined);
    await this.consumer?.disconnect().catch(() => undefined);
  }
}

function foreignEnvelope(id: string, queue: string, value: Buffer | null, headers: Record<string, string>): Envelope {
  const text = value?.toString("utf8") ?? "null";
  let payload: string;
  try {
    payload = JSON.stringify(JSON.parse(text));
  } catch {
    payload = JSON.stringify(text);
  }
  return {
    v: 1,
    id,
    queue,
    name: headers["conveyor-job"] ?? "(unknown)",
    payload,
    maxAttempts: 1,
    backoff: { type: "fixed", delayMs: 0 },
    timeoutMs: null,
    retainCompletedMs: null,
    retainDeadMs: null,
    meta: null,
    createdAt: 0,
    runAt: 0,
    attempt: 0,
    history: [],
    error: {
      name: headers["conveyor-error-name"] ?? "ForeignMessage",
      message: headers["conveyor-error-message"] ?? "not a Conveyor job record: set aside unprocessed",
      stack: null,
    },
    replays: 0,
    finishedAt: null,
  };
}
