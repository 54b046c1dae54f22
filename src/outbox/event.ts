/**
 * What an outbox event is, before and after it is stored, and the one validation every writer and
 * the dead-letter replay share: a bad event is refused before anything is written.
 */
import { InvalidInputError } from "../core/errors.js";
import type { Json } from "../core/json.js";
import { presentKeys, shown } from "../core/checks.js";

/** An event to publish, as given to `outbox.publish(tx, event)`. */
export interface OutboxEventInput {
  /** Where it goes: the RabbitMQ routing key, the stream name suffix, the job name… 1–200 characters. */
  topic: string;
  /**
   * Ordering key (an aggregate id, say): events of one key reach the target in commit order.
   * Omit it for events that may be reordered for throughput. 1–200 characters.
   */
  key?: string;
  /** The event's body: any JSON value, at most `maxPayloadBytes` once serialised. */
  payload: Json;
  /** String headers carried to the target (AMQP headers, stream fields, HTTP headers). */
  headers?: Record<string, string>;
}

/** An event as stored and relayed. `id` is the message id every target carries. */
export interface OutboxEvent {
  /** Time-sortable, unique: consumers dedup on it. */
  id: string;
  /** Commit order of the event's key (its position in the outbox; cdc: its commit LSN order). */
  seq: number;
  topic: string;
  key: string | null;
  /** The payload exactly as the producer serialised it (JSON text). */
  payloadText: string;
  headers: Record<string, string>;
  /** ms since the epoch, on the database clock. */
  createdAt: number;
}

/** An event a target refused for good, set aside with the error. */
export interface DeadOutboxEvent extends Omit<OutboxEvent, "seq"> {
  /** When it was set aside, ms since the epoch. */
  failedAt: number;
  /** The target that refused it (its description, without credentials). */
  target: string;
  error: string;
}

/** Default `maxPayloadBytes`: 256 KiB, below every target's own limit (RabbitMQ's frame, Redis's proto-max-bulk-len). */
export const DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024;

const MAX_NAME_LENGTH = 200;
const MAX_HEADERS = 64;
const MAX_HEADER_LENGTH = 4096;
/** Header names a target uses itself; an event may not override them. */
const RESERVED_HEADER = /^(outbox-|content-type$|content-length$|webhook-)/i;
const HEADER_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** The event's stored form: JSON texts ready for the INSERT. */
export interface ValidatedEvent {
  topic: string;
  key: string | null;
  payloadText: string;
  headersText: string | null;
}

/** Checks `event` and serialises it; throws InvalidInputError saying what to fix. */
export function validateEvent(event: unknown, maxPayloadBytes: number): ValidatedEvent {
  if (typeof event !== "object" || event === null || Array.isArray(event)) {
    throw new InvalidInputError("outbox.publish(tx, event): event must be an object { topic, key?, payload, headers? }");
  }
  const { topic, key, payload, headers } = event as Record<string, unknown>;
  for (const field of presentKeys(event)) {
    if (!["topic", "key", "payload", "headers"].includes(field)) {
      throw new InvalidInputError(`outbox event: unknown field "${field}"; an event has topic, key, payload and headers`);
    }
  }
  checkName("topic", topic, true);
  checkName("key", key, false);
  if (payload === undefined) {
    throw new InvalidInputError("outbox event: payload is required (any JSON value; use null for an event without a body)");
  }
  let payloadText: string;
  try {
    payloadText = jsonText(payload);
  } catch (error) {
    throw new InvalidInputError(`outbox event: payload is not JSON-serialisable (${(error as Error).message})`);
  }
  const bytes = Buffer.byteLength(payloadText);
  if (bytes > maxPayloadBytes) {
    throw new InvalidInputError(
      `outbox event: payload is ${bytes} bytes, over the limit of ${maxPayloadBytes}; store the large data elsewhere ` +
        `(a blob store, a table) and put its id in the event, or raise maxPayloadBytes`,
    );
  }
  let headersText: string | null = null;
  if (headers !== undefined) {
    if (typeof headers !== "object" || headers === null || Array.isArray(headers)) {
      throw new InvalidInputError("outbox event: headers must be an object of string values");
    }
    const entries = Object.entries(headers);
    if (entries.length > MAX_HEADERS) throw new InvalidInputError(`outbox event: at most ${MAX_HEADERS} headers; got ${entries.length}`);
    for (const [name, value] of entries) {
      if (!HEADER_NAME.test(name)) {
        throw new InvalidInputError(`outbox event: header name ${JSON.stringify(name)} must be letters, digits, ".", "_" or "-" (at most 128)`);
      }
      if (RESERVED_HEADER.test(name)) {
        throw new InvalidInputError(`outbox event: header "${name}" is reserved (outbox-*, content-*, webhook-* are set by the relay)`);
      }
      if (typeof value !== "string" || value.length > MAX_HEADER_LENGTH || /[\r\n\0]/.test(value)) {
        throw new InvalidInputError(`outbox event: header "${name}" must be a string of at most ${MAX_HEADER_LENGTH} characters without CR, LF or NUL`);
      }
    }
    headersText = entries.length === 0 ? null : JSON.stringify(headers);
  }
  return { topic: topic as string, key: (key as string | undefined) ?? null, payloadText, headersText };
}

function checkName(field: string, value: unknown, required: boolean): void {
  if (value === undefined && !required) return;
  if (typeof value !== "string" || value.length === 0 || value.length > MAX_NAME_LENGTH || /[\0\r\n]/.test(value)) {
    throw new InvalidInputError(
      `outbox event: ${field} must be a non-empty string of at most ${MAX_NAME_LENGTH} characters without NUL, CR or LF` +
        `${required ? "" : " (or left out)"}; got ${shown(value)?.slice(0, 80) ?? String(value)}`,
    );
  }
}

/** JSON.stringify that refuses what would not round-trip (undefined, functions, NaN, BigInt, cycles). */
function jsonText(value: unknown): string {
  const text = JSON.stringify(value, (_key, v: unknown) => {
    if (typeof v === "number" && !Number.isFinite(v)) throw new Error(`${v} is not a JSON number`);
    if (typeof v === "function" || typeof v === "symbol") throw new Error(`a ${typeof v} is not JSON`);
    return v;
  });
  if (text === undefined) throw new Error("undefined is not JSON");
  return text;
}

/** Parses a stored headers column. */
export function parseHeaders(text: string | null | Record<string, string>): Record<string, string> {
  if (text === null) return {};
  if (typeof text === "object") return text;
  return JSON.parse(text) as Record<string, string>;
}
