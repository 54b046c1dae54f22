/**
 * A job as a RabbitMQ message. The body carries the whole job (payload, options, attempt count,
 * history), so the copy a failed attempt publishes (to a delay queue or the dead queue) is the
 * job's state from then on: nothing else stores it. Headers repeat what an operator looks at
 * with RabbitMQ's own tools (the management UI, `rabbitmqadmin get`): the last error and stack,
 * attempts, the host that ran the last attempt and its timings.
 */
import type { Options } from "amqplib";
import type { AttemptRecord, ErrorInfo, JobRecord, JobSpec } from "../../core/job.js";
import type { Json } from "../../core/json.js";

/** Version of the body format, so a later Conveyor can read messages an older one wrote. */
const FORMAT = 1;

/**
 * The message body: everything about a job that outlives one delivery. The spec's fields as the
 * producer gave them (the payload stays JSON text, so it round-trips byte for byte), and its state.
 */
export interface Envelope extends Pick<
  JobSpec,
  "id" | "queue" | "name" | "payload" | "maxAttempts" | "backoff" | "timeoutMs" | "retainCompletedMs" | "retainDeadMs" | "meta"
> {
  v: typeof FORMAT;
  createdAt: number;
  /** When the job is due, ms since epoch. */
  runAt: number;
  /** Attempts finished so far (the next claim runs attempt + 1). */
  attempt: number;
  history: AttemptRecord[];
  error: ErrorInfo | null;
  replays: number;
  /** When it became dead, ms since epoch (dead copies only). */
  finishedAt: number | null;
}

export function envelopeOf(spec: JobSpec, now: number, runAt: number): Envelope {
  return {
    v: FORMAT,
    id: spec.id,
    queue: spec.queue,
    name: spec.name,
    payload: spec.payload,
    maxAttempts: spec.maxAttempts,
    backoff: spec.backoff,
    timeoutMs: spec.timeoutMs,
    retainCompletedMs: spec.retainCompletedMs,
    retainDeadMs: spec.retainDeadMs,
    meta: spec.meta,
    createdAt: now,
    runAt,
    attempt: 0,
    history: [],
    error: null,
    replays: 0,
    finishedAt: null,
  };
}

/** Prefix of every header Conveyor writes. */
export const HEADER = "x-conveyor-";

/**
 * Message properties of a job message: persistent, the job id as messageId, the name as type.
 * Headers only when given (the dead copies' forensics): encoding a header table costs more than
 * the rest of a small message, and the body already holds everything.
 */
export function propertiesOf(envelope: Envelope, headers?: Record<string, unknown>): Options.Publish {
  return {
    persistent: true,
    messageId: envelope.id,
    type: envelope.name,
    contentType: "application/json",
    timestamp: Math.floor(envelope.createdAt / 1000),
    ...(headers ? { headers } : {}),
  };
}

/** The forensic headers of a dead copy: the last error, where and when the last attempt ran. */
export function forensicHeaders(envelope: Envelope): Record<string, unknown> {
  const last = envelope.history.at(-1);
  const headers: Record<string, unknown> = {
    [`${HEADER}attempts`]: envelope.attempt,
    [`${HEADER}max-attempts`]: envelope.maxAttempts,
    [`${HEADER}error-name`]: envelope.error?.name ?? null,
    [`${HEADER}error-message`]: envelope.error?.message ?? null,
    [`${HEADER}error-stack`]: envelope.error?.stack ?? null,
    [`${HEADER}created-at`]: envelope.createdAt,
    [`${HEADER}dead-at`]: envelope.finishedAt,
  };
  if (last) {
    headers[`${HEADER}worker`] = last.workerId;
    headers[`${HEADER}host`] = last.host;
    headers[`${HEADER}pid`] = last.pid;
    headers[`${HEADER}started-at`] = last.startedAt;
    headers[`${HEADER}finished-at`] = last.finishedAt;
  }
  return headers;
}

export function encode(envelope: Envelope): Buffer {
  return Buffer.from(JSON.stringify(envelope));
}

/** The body as an envelope, or null when the message is not a Conveyor job (of this format). */
export function decode(content: Buffer): Envelope | null {
  let value: unknown;
  try {
    value = JSON.parse(content.toString("utf8"));
  } catch {
    return null;
  }
  if (typeof value !== "object" || value === null) return null;
  const e = value as Partial<Envelope>;
  if (e.v !== FORMAT || typeof e.id !== "string" || typeof e.queue !== "string" || typeof e.name !== "string" || typeof e.payload !== "string") return null;
  if (typeof e.attempt !== "number" || typeof e.maxAttempts !== "number" || !Array.isArray(e.history)) return null;
  return e as Envelope;
}

/** The record `claim`, `get` and `list` return for an envelope. */
export function recordOf(
  envelope: Envelope,
  state: JobRecord["state"],
  extra: { attempt?: number; startedAt?: number | null; lease?: JobRecord["lease"]; stalls?: number } = {},
): JobRecord {
  const last = envelope.history.at(-1);
  return {
    id: envelope.id,
    queue: envelope.queue,
    name: envelope.name,
    data: JSON.parse(envelope.payload) as Json,
    state,
    priority: 0,
    attempt: extra.attempt ?? envelope.attempt,
    maxAttempts: envelope.maxAttempts,
    backoff: envelope.backoff,
    timeoutMs: envelope.timeoutMs,
    runAt: envelope.runAt,
    createdAt: envelope.createdAt,
    startedAt: extra.startedAt !== undefined ? extra.startedAt : (last?.startedAt ?? null),
    finishedAt: envelope.finishedAt,
    lease: extra.lease ?? null,
    progress: null,
    result: null,
    error: envelope.error,
    history: envelope.history,
    stalls: extra.stalls ?? 0,
    replays: envelope.replays,
    meta: envelope.meta === null ? null : (JSON.parse(envelope.meta) as { [key: string]: Json }),
  };
}
