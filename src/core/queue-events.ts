/**
 * The queue event stream: what happened to jobs, across processes, read back from the store's
 * event log (`queue.events()`, `GET /v1/events`). Like BullMQ's QueueEvents, but durable: each
 * event is written by the store in the same transaction as the change it reports, so no event
 * is lost and none is reported for a change that rolled back.
 *
 * Stores: SQLite and PostgreSQL keep the log (triggers of migration 0004), Redis one stream per
 * queue (src/backend/redis/event-log.ts). RabbitMQ has none (`capabilities.eventLog` false):
 * `queue.events()` and `/v1/events` refuse it with a clear error; a worker's own
 * `worker.on(...)` events work everywhere.
 */
import { nonNegativeInt, positiveInt, positiveMs } from "./checks.js";
import { InvalidInputError } from "./errors.js";
import type { Json } from "./json.js";

/** Every event type, in the order a job usually meets them. */
export const QUEUE_EVENT_TYPES = [
  /** Enqueued (data: state "waiting" or "scheduled", runAt, priority). */
  "added",
  /** A scheduled job became due and was relabelled waiting by the promoter. */
  "waiting",
  /** Claimed by a worker; an attempt started (data: workerId). */
  "active",
  /** The handler reported progress (data: progress). */
  "progress",
  /** Completed (data: result). */
  "completed",
  /** An attempt failed and the job will run again (data: error, runAt). */
  "retrying",
  /** Dead-lettered: attempts exhausted, unrecoverable, or quarantined (data: error). */
  "dead",
  /** Handed back unstarted by a worker shutting down; no attempt used. */
  "released",
  /** Its worker's lease expired (the worker died or stalled) and the rescuer made it wait again. */
  "stalled",
  /** Cancelled (data: previousState). */
  "cancelled",
  /** Replayed out of the dead-letter state. */
  "replayed",
] as const;

export type QueueEventType = (typeof QUEUE_EVENT_TYPES)[number];

/** One event of the stream. */
export interface QueueEvent {
  /**
   * Opaque, increasing within one store: give it back as `after` (or SSE `Last-Event-ID`) to
   * resume right after this event.
   */
  id: string;
  type: QueueEventType;
  queue: string;
  name: string;
  jobId: string;
  /** The job's attempt count when it happened (1 during the first attempt). */
  attempt: number;
  /** When it happened, ms since epoch (store clock where the store records it). */
  at: number;
  /** Details by type (see QUEUE_EVENT_TYPES), or null. */
  data: { [key: string]: Json } | null;
}

/** A window of the log, as a backend returns it. */
export interface EventLogPage {
  /** Events after the cursor, oldest first (at most the limit asked for). */
  events: QueueEvent[];
  /** Resume here next time: past the last event returned, or unchanged when none. */
  cursor: string;
}

/** Which events a reader wants; every field narrows, and omitted means all. */
export interface QueueEventFilter {
  queues?: readonly string[];
  names?: readonly string[];
  jobId?: string;
  types?: readonly QueueEventType[];
}

export function matchesEventFilter(event: QueueEvent, filter: QueueEventFilter): boolean {
  return (
    (filter.queues === undefined || filter.queues.includes(event.queue)) &&
    (filter.names === undefined || filter.names.includes(event.name)) &&
    (filter.jobId === undefined || filter.jobId === event.jobId) &&
    (filter.types === undefined || filter.types.includes(event.type))
  );
}

/** Events read from the log per call, at most. */
export const EVENT_READ_LIMIT = 500;
/** `pruneEvents` default: events older than this are deleted, ms (24 h). */
export const DEFAULT_EVENT_RETENTION_MS = 24 * 60 * 60 * 1000;
/** `pruneEvents` default: at most this many events are kept per store. */
export const DEFAULT_MAX_EVENTS = 100_000;
/** `pruneEvents` default: rows one call deletes at most. */
export const DEFAULT_EVENT_PRUNE_LIMIT = 10_000;

export interface EventPrunePolicy {
  /** Delete events older than this, ms. Default 86 400 000 (24 h). */
  maxAgeMs?: number;
  /** Keep at most this many events (the newest). Default 100 000. */
  maxEvents?: number;
  /** Rows deleted in one call, at most. Default 10 000. */
  limit?: number;
}

/** An event row as both SQL stores' `events` tables hold it (migration 0003). */
export interface EventLogRow {
  seq: number;
  at: number;
  type: string;
  queue: string;
  name: string;
  job_id: string;
  attempt: number;
  /** JSON text (SQLite) or parsed JSON (PostgreSQL), or null. */
  data: unknown;
}

/** A stored event row as a QueueEvent. */
export function eventFromRow(id: string, row: EventLogRow): QueueEvent {
  const data = typeof row.data === "string" ? (JSON.parse(row.data) as QueueEvent["data"]) : ((row.data ?? null) as QueueEvent["data"]);
  return { id, type: row.type as QueueEventType, queue: row.queue, name: row.name, jobId: row.job_id, attempt: row.attempt, at: Number(row.at), data };
}

/** The policy with defaults filled in and checked. */
export function eventPrunePolicy(policy: EventPrunePolicy = {}): Required<EventPrunePolicy> {
  return {
    maxAgeMs: positiveMs("maxAgeMs", policy.maxAgeMs ?? DEFAULT_EVENT_RETENTION_MS),
    maxEvents: nonNegativeInt("maxEvents", policy.maxEvents ?? DEFAULT_MAX_EVENTS),
    limit: positiveInt("limit", policy.limit ?? DEFAULT_EVENT_PRUNE_LIMIT),
  };
}

/** A cursor that is not one this store hands out. */
export function badEventCursor(cursor: string): InvalidInputError {
  return new InvalidInputError(
    `event cursor ${JSON.stringify(cursor.slice(0, 64))} is not one this store issued; resume with an event id it sent, or start from now without one`,
  );
}
