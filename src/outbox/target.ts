/**
 * Where a relay publishes: one small interface, one file per target under targets/ (RabbitMQ,
 * Redis Streams, Kafka, webhook, a Conveyor queue).
 */
import type { OutboxEvent } from "./event.js";

/** What became of one event. */
export type PublishOutcome =
  /** The target confirmed it (broker confirm, XADD reply, 2xx, job stored or already there). */
  | { status: "published" }
  /** Not confirmed; the relay backs off and publishes it again. */
  | { status: "retry"; error: Error }
  /** The target refuses it for good (too large, malformed for it): set aside, never retried. */
  | { status: "rejected"; error: Error };

export interface Target {
  /** Says where events go, for logs, stats and the set-aside record; never a password. */
  readonly description: string;
  /**
   * Publishes `events` (in order; one key's events are in commit order) and answers one outcome
   * per event, in the same order. Throwing means every event is to be retried (target down).
   * Resolving means each `published` outcome is durable on the target's side.
   */
  publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]>;
  /** Releases connections. */
  close(): Promise<void>;
}

/** An error a target raises for an event it can never accept. */
export class RejectedEventError extends Error {
  override name = "RejectedEventError";
}

/** Every event published. */
export function allPublished(events: readonly OutboxEvent[]): PublishOutcome[] {
  return events.map(() => ({ status: "published" }));
}

/** Headers every target sends with an event, beside the event's own. */
export function outboxHeaders(event: OutboxEvent): Record<string, string> {
  const headers: Record<string, string> = {
    ...event.headers,
    "outbox-id": event.id,
    "outbox-topic": event.topic,
    "outbox-created-at": String(event.createdAt),
  };
  if (event.key !== null) headers["outbox-key"] = event.key;
  return headers;
}
