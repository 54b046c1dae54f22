/**
 * Translation between job hashes (see keys.ts) and the contract's records. Field names are one
 * or two letters and default values are left out because every byte of a waiting job is paid
 * once per job in the backlog.
 */
import { withCompletedAttempt } from "../history.js";
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
import { JOB_ID_DIGITS, workerIdHostAndPid } from "../../core/ids.js";
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

/** A digit's value by its character code, -1 for any other character below 128. */
const DIGIT_VALUE = new Int8Array(128).fill(-1);
for (let i = 0; i < 32; i++) DIGIT_VALUE[JOB_ID_DIGITS.charCodeAt(i)] = i;

/**
 * A job id as the scripts keep it in fast lanes, bucket fields and "added" event entries (layout
 * 6): 16 bytes for an id made by newJobId, any other id as it is. The rule and its reasons:
 * id_store in lua/_common.lua, which makes the same form for lookups by id; the backend sends this
 * one with every job it enqueues (a fraction of a µs here, ~3 in Redis' Lua).
 */
export function storedJobId(id: string): string {
  if (id.length !== 22) return id;
  const first = digitAt(id, 0);
  const a = groupAt(id, 1);
  const b = groupAt(id, 8);
  const c = groupAt(id, 15);
  if (first < 0 || a < 0 || b < 0 || c < 0) return id;
  // Each group's 35 bits as five 7-bit bytes, most significant first (exact in a double).
  return String.fromCharCode(
    first,
    byteOf(a, 2 ** 28),
    byteOf(a, 2 ** 21),
    byteOf(a, 2 ** 14),
    byteOf(a, 2 ** 7),
    a % 128,
    byteOf(b, 2 ** 28),
    byteOf(b, 2 ** 21),
    byteOf(b, 2 ** 14),
    byteOf(b, 2 ** 7),
    b % 128,
    byteOf(c, 2 ** 28),
    byteOf(c, 2 ** 21),
    byteOf(c, 2 ** 14),
    byteOf(c, 2 ** 7),
    c % 128,
  );
}

function digitAt(id: string, k: number): number {
  const code = id.charCodeAt(k);
  return code < 128 ? DIGIT_VALUE[code]! : -1;
}

/** The 7 digits from `from` as one number (35 bits), or -1 when one is not a digit. */
function groupAt(id: string, from: number): number {
  let v = 0;
  for (let k = from; k < from + 7; k++) {
    const d = digitAt(id, k);
    if (d < 0) return -1;
    v = v * 32 + d;
  }
  return v;
}

function byteOf(v: number, unit: number): number {
  return Math.floor(v / unit) % 128;
}

/** The job id a stored form (storedJobId) stands for. */
export function jobIdFromStored(stored: string): string {
  if (stored.length !== 16 || stored.charCodeAt(0) >= 32) return stored;
  let out = JOB_ID_DIGITS[stored.charCodeAt(0)]!;
  for (let g = 1; g < 16; g += 5) {
    let v = 0;
    for (let k = g; k < g + 5; k++) v = v * 128 + stored.charCodeAt(k);
    let digits = "";
    for (let k = 0; k < 7; k++) {
      digits = JOB_ID_DIGITS[v % 32]! + digits;
      v = Math.floor(v / 32);
    }
    out += digits;
  }
  return out;
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

/** A history record as the scripts append it (`w`: the claim's worker text as it is, see encodeWorker). */
interface StoredAttempt {
  a: number;
  w: StoredWorker | null;
  s: number | null;
  f: number;
  o: AttemptOutcome;
  e: ErrorInfo | null;
}

function toAttempt(stored: StoredAttempt): AttemptRecord {
  const worker = stored.w === null ? null : workerFromStored(stored.w);
  return {
    attempt: stored.a,
    workerId: worker?.id ?? "",
    host: worker?.host ?? "",
    pid: worker?.pid ?? 0,
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

/** A worker as stored: host and pid left out when the id holds them (encodeWorker). */
interface StoredWorker {
  id: string;
  host?: string;
  pid?: number;
}

/**
 * The worker identity a claim stores in the job's hash (`w`) and the scripts copy into its
 * history records, as JSON. A worker id made by newWorkerId, `<host>:<pid>:<suffix>`, holds the
 * host and pid already: then only `{"id": …}` is stored and they are read back from the id
 * (workerFromStored). With a pod-length host name the whole identity is past Redis' 64-byte
 * listpack value (hash-max-listpack-value), which made every claimed job's hash, and every
 * completed one retained, a hash table (docs/performance-redis.md, "Session 25"). A Conveyor of an
 * earlier version reads such a worker without its host and pid (it only shows them: the scripts
 * and the fencing use the id alone).
 */
export function encodeWorker(worker: WorkerIdentity): string {
  const held = workerIdHostAndPid(worker.id);
  const holdsHostAndPid = held !== null && held.host === worker.host && held.pid === worker.pid;
  return JSON.stringify(holdsHostAndPid ? { id: worker.id } : { id: worker.id, host: worker.host, pid: worker.pid });
}

/** The identity of a stored worker (encodeWorker): host and pid from the id when they were left out. */
function workerFromStored(stored: StoredWorker): WorkerIdentity {
  if (stored.host !== undefined) return { id: stored.id, host: stored.host, pid: stored.pid ?? 0 };
  const held = workerIdHostAndPid(stored.id);
  return { id: stored.id, host: held?.host ?? "", pid: held?.pid ?? 0 };
}

/** The identity in a job hash's `w` (encodeWorker), or null. */
export function decodeWorker(text: string | undefined): WorkerIdentity | null {
  const stored = JSON.parse(text ?? "null") as StoredWorker | null;
  return stored === null ? null : workerFromStored(stored);
}

/** Id of the worker in a stored worker JSON, or null. */
export function workerIdOf(text: string | null | undefined): string | null {
  if (!text) return null;
  return (JSON.parse(text) as StoredWorker).id;
}

/**
 * The attempts of a job hash. The complete script does not append the completed attempt
 * (lua/complete-4.lua): it is the hash's own attempt, worker, start and finish (history.ts).
 */
function historyOf(state: JobState, f: JobFields): AttemptRecord[] {
  const history = f.h === undefined ? [] : (JSON.parse(f.h) as StoredAttempt[]).map(toAttempt);
  if (state !== "completed") return history;
  const worker = decodeWorker(f.w);
  const finishedAt = Number(f.f);
  return withCompletedAttempt(history, {
    attempt: Number(f.a ?? 0),
    workerId: worker?.id ?? "",
    host: worker?.host ?? "",
    pid: worker?.pid ?? 0,
    startedAt: f.sa === undefined ? finishedAt : Number(f.sa),
    finishedAt,
  });
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
            worker: decodeWorker(f.w)!,
          }
        : null,
    progress: optionalJson(f.pg),
    result: optionalJson(f.rs),
    error: f.e === undefined ? null : (JSON.parse(f.e) as ErrorInfo),
    history: historyOf(stored, f),
    stalls: Number(f.sl ?? 0),
    replays: Number(f.rp ?? 0),
    meta: f.m === undefined ? null : (JSON.parse(f.m) as { [key: string]: Json }),
    ...(f.pi === undefined ? {} : { parent: { id: f.pi, queue: f.pq ?? "" } }),
  };
}
