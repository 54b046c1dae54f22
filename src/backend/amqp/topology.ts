/**
 * The queues Conveyor declares on RabbitMQ for one Conveyor queue `Q` (prefix `P`, default
 * "conveyor"; `~` cannot occur in a Conveyor queue name, so no two queues' names can meet):
 *
 * - `P~Q` (work): durable quorum queue. `x-delivery-limit` dead-letters a message its consumers
 *   keep returning without settling it (a poison pill that crashes workers) into `P~Q~dead`,
 *   at-least-once (`x-dead-letter-strategy`, which needs `x-overflow: reject-publish`).
 * - `P~Q~dead` (dead letters): durable quorum queue, no consumer. Failed jobs land here with their
 *   forensics; replay publishes them back to the work queue.
 * - `P~Q~delay~K` (K = 0…MAX_BUCKET): durable quorum queues without consumers. A delayed message
 *   (a retry's backoff, a job enqueued with a delay) carries its delay as per-message
 *   `expiration`; when it expires the queue dead-letters it, at-least-once, into the work queue.
 *   Bucket K holds delays in [2^(K-1), 2^K) seconds (bucket 0: under one second). RabbitMQ expires
 *   messages only at the head of a queue, so a message can wait behind an earlier one of the same
 *   bucket with a longer delay: with buckets a factor of 2 wide it becomes due at most its own delay
 *   late (a 10 s retry runs after 10 to 20 s), typically on time when delays are spread out.
 *
 * No delayed-message plugin and no exchange are needed: everything goes through the default
 * exchange, routing key = queue name.
 */
import type { Channel } from "amqplib";
import { InvalidInputError } from "../../core/errors.js";
import { shown } from "../../core/checks.js";

/** Highest delay bucket: delays up to 2^MAX_BUCKET s (about 48 days) in one hop; longer ones hop again. */
export const MAX_BUCKET = 22;
/** Longest delay one hop through a delay queue takes, ms. A longer delay is re-delayed on arrival. */
export const MAX_HOP_MS = 2 ** (MAX_BUCKET - 1) * 1000;

const PREFIX_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

export function checkPrefix(prefix: unknown): string {
  if (typeof prefix !== "string" || !PREFIX_PATTERN.test(prefix)) {
    throw new InvalidInputError(`AmqpBackend prefix must be 1-64 letters, digits and . _ - starting with a letter or digit; got ${shown(prefix)}`);
  }
  return prefix;
}

export class Names {
  constructor(readonly prefix: string) {}
  work(queue: string): string {
    return `${this.prefix}~${queue}`;
  }
  dead(queue: string): string {
    return `${this.prefix}~${queue}~dead`;
  }
  delay(queue: string, bucket: number): string {
    return `${this.prefix}~${queue}~delay~${bucket}`;
  }
}

/** The delay bucket of a delay in ms (> 0). */
export function bucketOf(delayMs: number): number {
  if (delayMs < 1000) return 0;
  return Math.min(MAX_BUCKET, Math.floor(Math.log2(delayMs / 1000)) + 1);
}

export interface TopologyOptions {
  deliveryLimit: number;
}

/** Declares the work and dead queues of `queue` (idempotent: same arguments every time). */
export async function declareQueue(channel: Channel, names: Names, queue: string, options: TopologyOptions): Promise<void> {
  await channel.assertQueue(names.dead(queue), { durable: true, arguments: { "x-queue-type": "quorum" } });
  await channel.assertQueue(names.work(queue), {
    durable: true,
    arguments: {
      "x-queue-type": "quorum",
      "x-delivery-limit": options.deliveryLimit,
      "x-dead-letter-exchange": "",
      "x-dead-letter-routing-key": names.dead(queue),
      "x-dead-letter-strategy": "at-least-once",
      "x-overflow": "reject-publish",
    },
  });
}

/** Declares one delay bucket of `queue`. */
export async function declareDelay(channel: Channel, names: Names, queue: string, bucket: number): Promise<void> {
  await channel.assertQueue(names.delay(queue, bucket), {
    durable: true,
    arguments: {
      "x-queue-type": "quorum",
      "x-dead-letter-exchange": "",
      "x-dead-letter-routing-key": names.work(queue),
      "x-dead-letter-strategy": "at-least-once",
      "x-overflow": "reject-publish",
    },
  });
}
