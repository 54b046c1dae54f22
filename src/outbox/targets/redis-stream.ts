/**
 * Target: Redis Streams. One XADD per event, pipelined per batch, to the stream
 * `streamPrefix + topic`. Fields: `id` (the outbox id, for consumers' dedup), `topic`, `key`
 * (empty when none), `payload` (JSON text), `headers` (JSON object) and `created_at` (ms).
 *
 * Redis acknowledges an XADD once it is in memory; what survives a Redis crash is what its
 * persistence (appendonly + appendfsync) keeps: run it with `appendonly yes` when the stream
 * must not lose confirmed events.
 */
import { Redis } from "ioredis";
import { InvalidInputError } from "../../core/errors.js";
import type { OutboxEvent } from "../event.js";
import { outboxHeaders, RejectedEventError, type PublishOutcome, type Target } from "../target.js";
import { shown } from "../../core/checks.js";

/** Options of {@link RedisStreamTarget}. Give `url` or `redis`. */
export interface RedisStreamTargetOptions {
  /** `redis://host:port/db`. The target opens and closes its own connection. */
  url?: string;
  /** Your own ioredis client (never closed by the target). */
  redis?: Redis;
  /** Stream name = prefix + topic. Default `"outbox:"`. */
  streamPrefix?: string;
  /** Trim each stream to about this many entries (`MAXLEN ~ n`). Default: no trimming. */
  maxLen?: number;
  /** Largest payload + headers accepted, in bytes; larger events are set aside. Default 1048576 (1 MiB). */
  maxMessageBytes?: number;
}

export class RedisStreamTarget implements Target {
  readonly description: string;
  private readonly redis: Redis;
  private readonly ownsClient: boolean;
  private readonly streamPrefix: string;
  private readonly maxLen: number | null;
  private readonly maxMessageBytes: number;

  constructor(options: RedisStreamTargetOptions) {
    if (options.redis) {
      this.redis = options.redis;
      this.ownsClient = false;
    } else if (options.url) {
      // No offline queue: while Redis is down a publish fails at once and the relay backs off,
      // instead of piling commands up in memory.
      this.redis = new Redis(options.url, { enableOfflineQueue: false, maxRetriesPerRequest: 1, lazyConnect: true });
      this.redis.on("error", () => undefined);
      this.ownsClient = true;
    } else {
      throw new InvalidInputError("RedisStreamTarget needs { url } or { redis }");
    }
    this.streamPrefix = options.streamPrefix ?? "outbox:";
    if (options.maxLen !== undefined && (!Number.isInteger(options.maxLen) || options.maxLen < 1)) {
      throw new InvalidInputError(`maxLen must be an integer >= 1; got ${shown(options.maxLen)}`);
    }
    this.maxLen = options.maxLen ?? null;
    this.maxMessageBytes = options.maxMessageBytes ?? 1024 * 1024;
    const o = this.redis.options;
    this.description = `redis-stream:${o.host ?? "localhost"}:${o.port ?? 6379}/${o.db ?? 0}/${this.streamPrefix}*`;
  }

  async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
    if (this.ownsClient && this.redis.status === "wait") await this.redis.connect();
    const outcomes: PublishOutcome[] = new Array<PublishOutcome>(events.length);
    const pipeline = this.redis.pipeline();
    const sent: number[] = [];
    events.forEach((event, i) => {
      const headers = JSON.stringify(outboxHeaders(event));
      const bytes = Buffer.byteLength(event.payloadText) + Buffer.byteLength(headers);
      if (bytes > this.maxMessageBytes) {
        outcomes[i] = {
          status: "rejected",
          error: new RejectedEventError(`event is ${bytes} bytes, over the stream target's maxMessageBytes of ${this.maxMessageBytes}`),
        };
        return;
      }
      const trim = this.maxLen === null ? [] : ["MAXLEN", "~", String(this.maxLen)];
      pipeline.xadd(
        this.streamPrefix + event.topic,
        ...trim,
        "*",
        "id",
        event.id,
        "topic",
        event.topic,
        "key",
        event.key ?? "",
        "payload",
        event.payloadText,
        "headers",
        headers,
        "created_at",
        String(event.createdAt),
      );
      sent.push(i);
    });
    if (sent.length === 0) return outcomes;
    const results = await pipeline.exec();
    if (results === null) throw new Error("the Redis pipeline was discarded");
    sent.forEach((i, n) => {
      const [error] = results[n] ?? [new Error("no reply")];
      if (error === null) outcomes[i] = { status: "published" };
      // WRONGTYPE: the stream's name is taken by another kind of key; retrying cannot help.
      else if (/WRONGTYPE/.test(error.message)) outcomes[i] = { status: "rejected", error };
      else outcomes[i] = { status: "retry", error };
    });
    return outcomes;
  }

  async close(): Promise<void> {
    if (this.ownsClient) this.redis.disconnect();
  }
}
