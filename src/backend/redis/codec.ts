/**
 * Translation between job hashes (see keys.ts) and the contract's records. Field names are one
 * or two letters and default values are left out because every byte of a waiting job is paid
 * once per job in the backlog.
 */
import { ConveyorError } from "../../core/errors.js";
import {
  effectiveState,
  type AttemptOutcome,
  type AttemptRecord,
  type BackoffSpec,
  type ErrorInfo,
  type JobRecord,
  type JobSpec,
  type JobState,
  type WorkerIdentity,
} from "../../core/job.js";
import type { Json } from "../../core/json.js";

const STATES: Record<string, JobState> = {
  w: "waiting",
  s: "scheduled",
  wc: "waiting-children",
  a: "active",
  c: "completed",
  d: "dead",
  x: "cancelled",
};

/** A job hash as a field -> value map. */
export type JobFields = Record<string, string>;

/** A hash packed by a script as "field\0value\0field\0value…" (see claim-4.lua). */
export function fieldsFromPacked(packed: string): JobFields {
  const parts = packed.split("\0");
  const fields: JobFields = {};
  for (let i = 0; i + 1 < parts.length; i += 2) fields[parts[i]!] = parts[i + 1]!;
  return fields;
}

/** The `o` field: "maxAttempts|retainCompletedMs|retainDeadMs|timeoutMs|backoff", empty = null. */
export function encodeOptions(spec: JobSpec): string {
  return [spec.maxAttempts, spec.retainCompletedMs ?? "", spec.retainDeadMs ?? "", spec.timeoutMs ?? "", encodeBackoff(spec.backoff)].join("|");
}

/** "e<delayMs>,<maxDelayMs>" or "f<delayMs>": the default backoff costs 11 bytes, not 55. */
function encodeBackoff(backoff: BackoffSpec): string {
  return backoff.type === "fixed" ? `f${backoff.delayMs}` : `e${backoff.delayMs},${backoff.maxDelayMs}`;
}

function decodeBackoff(text: string): BackoffSpec {
  if (text.startsWith("f")) return { type: "fixed", delayMs: Number(text.slice(1)) };
  const [delayMs, maxDelayMs] = text.slice(1).split(",");
  return { type: "exponential", delayMs: Number(delayMs), maxDelayMs: Number(maxDelayMs) };
}

interface Options {
  maxAttempts: number;
  timeoutMs: number | null;
  backoff: BackoffSpec;
}

function decodeOptions(text: string): Options {
  const [maxAttempts, , , timeoutMs, backoff] = text.split("|");
  return {
    maxAttempts: Number(maxAttempts),
    timeoutMs: timeoutMs ? Number(timeoutMs) : null,
    backoff: decodeBackoff(backoff ?? ""),
  };
}

/** Exactly the ErrorInfo fields, whatever else the caller's object carries. */
export function encodeError(error: ErrorInfo): string {
  return JSON.stringify({ name: error.name, message: error.message, stack: error.stack ?? null });
}

/** A history record as the scripts append it. */
interface StoredAttempt {
  a: number;
  w: WorkerIdentity | null;
  s: number | null;
  f: number;
  o: AttemptOutcome;
  e: ErrorInfo | null;
}

function toAttempt(stored: StoredAttempt): AttemptRecord {
  return {
    attempt: stored.a,
    workerId: stored.w?.id ?? "",
    host: stored.w?.host ?? "",
    pid: stored.w?.pid ?? 0,
    startedAt: stored.s ?? stored.f,
    finishedAt: stored.f,
    outcome: stored.o,
    error: stored.e,
  };
}

function optionalNumber(value: string | undefined): number | null {
  return value === undefined ? null : Number(value);
}

function optionalJson(value: string | undefined): Json | null {
  return value === undefined ? null : (JSON.parse(value) as Json);
}

/** The worker identity stored with an attempt, as JSON. */
export function encodeWorker(worker: WorkerIdentity): string {
  return JSON.stringify({ id: worker.id, host: worker.host, pid: worker.pid });
}

/** Id of the worker in a stored worker JSON, or null. */
export function workerIdOf(text: string | null | undefined): string | null {
  if (!text) return null;
  return (JSON.parse(text) as WorkerIdentity).id;
}

/** The contract's record of a job hash. `now` decides whether a due scheduled job reads `waiting`. */
export function toRecord(id: string, queue: string, f: JobFields, now: number): JobRecord {
  const stored = STATES[f.st ?? ""];
  if (stored === undefined || f.o === undefined || f.d === undefined) {
    throw new ConveyorError(
      `job ${id} in queue ${queue} has an unreadable hash (state ${JSON.stringify(f.st)}); it was written by ` +
        `another program or another Conveyor version under the same key prefix`,
    );
  }
  const options = decodeOptions(f.o);
  const runAt = Number(f.r);
  return {
    id,
    queue,
    name: f.n ?? "",
    data: JSON.parse(f.d) as Json,
    state: effectiveState(stored, runAt, now),
    priority: Number(f.p ?? 0),
    attempt: Number(f.a ?? 0),
    maxAttempts: options.maxAttempts,
    backoff: options.backoff,
    timeoutMs: options.timeoutMs,
    runAt,
    createdAt: Number(f.c),
    startedAt: optionalNumber(f.sa),
    finishedAt: optionalNumber(f.f),
    lease:
      stored === "active"
        ? {
            jobId: id,
            token: Number(f.k ?? 0),
            expiresAt: Number(f.le),
            worker: JSON.parse(f.w ?? "null") as WorkerIdentity,
          }
        : null,
    progress: optionalJson(f.pg),
    result: optionalJson(f.rs),
    error: f.e === undefined ? null : (JSON.parse(f.e) as ErrorInfo),
    history: f.h === undefined ? [] : (JSON.parse(f.h) as StoredAttempt[]).map(toAttempt),
    stalls: Number(f.sl ?? 0),
    replays: Number(f.rp ?? 0),
    meta: f.m === undefined ? null : (JSON.parse(f.m) as { [key: string]: Json }),
    ...(f.pi === undefined ? {} : { parent: { id: f.pi, queue: f.pq ?? "" } }),
  };
}
