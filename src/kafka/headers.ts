/**
 * The headers the Kafka transport writes on the copies it publishes: a retry copy (to the retry
 * topic) and a dead letter (to the dead-letter topic). They carry what a dead job keeps in the
 * other backends (its error with stack, the attempts made, the worker's host and pid, the timings)
 * plus where the message came from, so a dead letter can be read, understood and replayed on its
 * own. Every value is a string (Kafka headers are bytes; numbers are decimal, times are ms since
 * the epoch).
 */
import type { ErrorInfo, WorkerIdentity } from "../core/job.js";

export const HEADER = {
  /** The job name (which handler runs it). Set it when producing; default: the topic name. */
  job: "conveyor-job",
  /** The attempt this copy will run as (1-based). */
  attempt: "conveyor-attempt",
  maxAttempts: "conveyor-max-attempts",
  /** A retry copy runs no earlier than this (ms since the epoch). */
  notBefore: "conveyor-not-before",
  /** The topic, partition and offset of the original message. */
  sourceTopic: "conveyor-source-topic",
  sourcePartition: "conveyor-source-partition",
  sourceOffset: "conveyor-source-offset",
  /** When the first attempt started, and when the last one failed (ms since the epoch). */
  firstAttemptAt: "conveyor-first-attempt-at",
  lastStartedAt: "conveyor-last-started-at",
  failedAt: "conveyor-failed-at",
  /** The last attempt's error. */
  errorName: "conveyor-error-name",
  errorMessage: "conveyor-error-message",
  errorStack: "conveyor-error-stack",
  /** The worker that ran the last attempt. */
  workerId: "conveyor-worker-id",
  host: "conveyor-host",
  pid: "conveyor-pid",
  /** Dead letters only: `attempts-exhausted` or `unrecoverable`. */
  deadReason: "conveyor-dead-reason",
} as const;

/** Kafka headers as kafkajs hands them over: a value may be a Buffer, a string, an array or absent. */
export type RawHeaders = Record<string, Buffer | string | Array<Buffer | string> | undefined>;

/** Headers as strings (the last value of a repeated header). */
export function headerStrings(raw: RawHeaders | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(raw ?? {})) {
    const last = Array.isArray(value) ? value[value.length - 1] : value;
    if (last !== undefined) out[name] = last.toString();
  }
  return out;
}

/** The forensics of a failed attempt, as headers. */
export function failureHeaders(input: { error: ErrorInfo; worker: WorkerIdentity; startedAt: number; failedAt: number }): Record<string, string> {
  return {
    [HEADER.errorName]: input.error.name,
    [HEADER.errorMessage]: input.error.message,
    [HEADER.errorStack]: input.error.stack ?? "",
    [HEADER.workerId]: input.worker.id,
    [HEADER.host]: input.worker.host,
    [HEADER.pid]: String(input.worker.pid),
    [HEADER.lastStartedAt]: String(input.startedAt),
    [HEADER.failedAt]: String(input.failedAt),
  };
}
