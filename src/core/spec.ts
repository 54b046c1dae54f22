import { InvalidInputError } from "./errors.js";
import { MAX_DELAY, presentKeys, withoutUndefined } from "./checks.js";
import type { BackoffSpec, DedupMode, DedupWindow, JobSpec, RetentionMs } from "./job.js";
import { newJobId } from "./ids.js";
import { MAX_JSON_DEPTH, type Json } from "./json.js";
import { DEFAULT_BACKOFF } from "./retry.js";
import { jobFlowOf } from "./job-flow.js";
import { isKeyText } from "./key-text.js";
import { shown } from "./checks.js";

/** Retention of a finished job: `true` deletes it on finishing, `false` keeps it, or an age. */
export type RetentionOption = boolean | { ageMs: number };

/** Options of one job, as `queue.add` takes them. Every field is optional. */
export interface JobOptions {
  /**
   * Your id for the job. Also the dedup key: adding an id that still exists (in any state, until
   * pruned) adds nothing and is reported as a duplicate. Default: a generated, time-sortable id.
   */
  jobId?: string;
  /** Run no earlier than this many milliseconds from now (store clock). Default 0. */
  delayMs?: number;
  /** Run no earlier than this time (Date or ms since epoch). Overrides `delayMs`. */
  runAt?: Date | number;
  /** Lower numbers run first, like BullMQ and River. Integer, default 0. */
  priority?: number;
  /** Total attempts including the first. Default 3. */
  attempts?: number;
  /** Delay between attempts. Default exponential full jitter, 1 s base, 60 s cap. */
  backoff?: BackoffOption;
  /** Per-attempt time limit in milliseconds. Default: none (the lease still catches dead workers). */
  timeoutMs?: number;
  /** Retention once completed or cancelled. Default `{ ageMs: 86_400_000 }` (24 h), max 1000 per queue. */
  removeOnComplete?: RetentionOption;
  /** Retention once dead. Default `{ ageMs: 604_800_000 }` (7 days), max 10000 per queue. */
  removeOnFail?: RetentionOption;
  /**
   * Metadata kept with the job but not passed as its data: trace context, a callback URL, who
   * asked for it. A plain JSON object; counts towards the payload size limit. Default none.
   */
  meta?: { [key: string]: Json };
  /**
   * Fair share and fleet-wide concurrency (docs/flow-control.md): at most `concurrency` jobs of
   * the queue with this group `key` run at once, and claims take turns across the groups that
   * have waiting jobs. Key: 1-255 characters without control characters; concurrency: integer
   * >= 1. Default: no group. Needs `capabilities.jobFlowKeys` (SQLite, PostgreSQL, Redis).
   */
  group?: { key: string; concurrency: number };
  /**
   * Rate limit per key, fleet-wide: at most `max` jobs of the queue with this limiter `key` start
   * in any window of `durationMs` ms (an API account, a tenant). Default: none. Needs
   * `capabilities.jobFlowKeys`.
   */
  limiter?: { key: string; max: number; durationMs: number };
  /**
   * A dedup window, enforced by the store across processes: `{ key, ttlMs, mode }`. While a job
   * added with `key` (per queue) is inside its window of `ttlMs` ms (required, 1 ms to 10 years),
   * another add with the same key is handled by `mode` (default `"drop"`): `"drop"` stores nothing
   * and returns the window's job (`duplicate: true, dedup: "dropped"`); `"extend"` does the same
   * and restarts the window; `"replace"` (debounce) gives the window's job, while it still waits,
   * this add's data and run time (now + `delayMs`) and restarts the window. With `jobId` too, the
   * window is checked first; a job it lets through is then stored under its id as usual (an id that
   * exists is a duplicate, and the window is opened for that job). Default: no window.
   */
  dedup?: DedupOption;
}

/** `JobOptions.dedup`: key (per queue), window length in ms, and mode (default "drop"). */
export interface DedupOption {
  key: string;
  ttlMs: number;
  mode?: DedupMode;
}

/** `exponential` (full jitter) or `fixed`; `delayMs` in ms, `maxDelayMs` caps exponential (default 60 000). */
export type BackoffOption = { type: "exponential"; delayMs?: number; maxDelayMs?: number } | { type: "fixed"; delayMs: number };

export const DEFAULT_ATTEMPTS = 3;
export const DEFAULT_RETAIN_COMPLETED_MS = 24 * 60 * 60 * 1000;
export const DEFAULT_RETAIN_DEAD_MS = 7 * 24 * 60 * 60 * 1000;
/** Default payload limit: 256 KiB of JSON. Payloads should carry ids, not documents. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024;

const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:\-/]{0,127}$/;
const KNOWN_OPTIONS = new Set([
  "jobId",
  "delayMs",
  "runAt",
  "priority",
  "attempts",
  "backoff",
  "timeoutMs",
  "removeOnComplete",
  "removeOnFail",
  "meta",
  "dedup",
  "group",
  "limiter",
]);
const DEDUP_MODES: readonly DedupMode[] = ["drop", "replace", "extend"];
const DEDUP_FIELDS = new Set(["key", "ttlMs", "mode"]);

/** `options.dedup`, checked: a clear error for every way it can be wrong. */
function normalizeDedup(value: unknown): DedupWindow | undefined {
  if (value === undefined) return undefined;
  const shape = `{ key: string, ttlMs: integer ms, mode?: "drop" | "replace" | "extend" }`;
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new InvalidInputError(`option dedup must be ${shape}; got ${shown(value)}`, { field: "options.dedup" });
  }
  const d = value as Record<string, unknown>;
  for (const k of presentKeys(d)) {
    if (!DEDUP_FIELDS.has(k)) throw new InvalidInputError(`unknown field dedup.${k}; dedup is ${shape}`, { field: `options.dedup.${k}` });
  }
  if (!isKeyText(d.key)) {
    throw new InvalidInputError(`option dedup.key must be a non-empty string of at most 255 characters, without control characters; got ${shown(d.key)}`, {
      field: "options.dedup.key",
    });
  }
  if (d.ttlMs === undefined) {
    throw new InvalidInputError("option dedup.ttlMs is required: how long the window lasts, in ms (e.g. 60000)", { field: "options.dedup.ttlMs" });
  }
  const ttlMs = checkInt("dedup.ttlMs", d.ttlMs, 1, MAX_DELAY);
  const mode = d.mode === undefined ? "drop" : d.mode;
  if (!DEDUP_MODES.includes(mode as DedupMode)) {
    throw new InvalidInputError(`option dedup.mode must be "drop", "replace" or "extend"; got ${shown(d.mode)}`, { field: "options.dedup.mode" });
  }
  return { key: d.key, ttlMs, mode: mode as DedupMode };
}

export function checkName(kind: "queue" | "job" | "schedule", value: unknown): string {
  if (typeof value !== "string" || !NAME_PATTERN.test(value)) {
    throw new InvalidInputError(
      `${kind} name must be 1-128 characters of letters, digits and . _ : - / starting with a letter ` + `or digit; got ${shown(value)}`,
      { field: kind === "job" ? "name" : kind === "schedule" ? "id" : "queue" },
    );
  }
  return value;
}

/** A job id: 1-255 characters, none of them a control character or an unpaired surrogate. */
export function checkJobId(value: unknown): string {
  if (!isKeyText(value)) {
    throw new InvalidInputError(
      `option jobId must be a non-empty string of at most 255 characters, without control characters or unpaired surrogates; got ${shown(value)}`,
      { field: "options.jobId" },
    );
  }
  return value;
}

function checkInt(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidInputError(`option ${field} must be an integer from ${min} to ${max}; got ${shown(value)}`, { field: `options.${field}` });
  }
  return value;
}

export { MAX_DELAY };
/** `options.priority` bounds (lower runs first). */
export const MIN_PRIORITY = -1_000_000;
export const MAX_PRIORITY = 1_000_000;
/** `options.attempts` ceiling. */
export const MAX_ATTEMPTS = 1_000_000;

/**
 * The latest `runAt` accepted, 9999-12-31T23:59:59.999Z: the last instant RFC 3339 (four-digit
 * years) can write. Later times are valid numbers, but no view of the job could show them.
 */
export const LATEST_RUN_AT = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

const EXPONENTIAL_BACKOFF_FIELDS: readonly string[] = ["type", "delayMs", "maxDelayMs"];
const FIXED_BACKOFF_FIELDS: readonly string[] = ["type", "delayMs"];

function normalizeBackoff(value: unknown): BackoffSpec {
  if (value === undefined) return DEFAULT_BACKOFF;
  if (typeof value === "function") {
    throw new InvalidInputError(
      "option backoff cannot be a function on queue.add (functions cannot be stored with the job); " +
        "give the function to defineJob(..., { backoff }) or the worker's handler definition instead",
      { field: "options.backoff" },
    );
  }
  if (typeof value !== "object" || value === null) {
    throw new InvalidInputError(`option backoff must be { type: "exponential" | "fixed", delayMs }; got ${shown(value)}`, {
      field: "options.backoff",
    });
  }
  const b = value as Record<string, unknown>;
  const fields = b.type === "exponential" ? EXPONENTIAL_BACKOFF_FIELDS : b.type === "fixed" ? FIXED_BACKOFF_FIELDS : null;
  const extra = fields === null ? undefined : presentKeys(b).find((k) => !fields.includes(k));
  if (extra !== undefined) {
    throw new InvalidInputError(`unknown field backoff.${extra}; a ${String(b.type)} backoff takes ${fields!.join(", ")}`, {
      field: `options.backoff.${extra}`,
    });
  }
  if (b.type === "exponential") {
    const delayMs = b.delayMs === undefined ? DEFAULT_BACKOFF.delayMs : checkInt("backoff.delayMs", b.delayMs, 0, MAX_DELAY);
    const maxDelayMs = b.maxDelayMs === undefined ? Math.max(60_000, delayMs) : checkInt("backoff.maxDelayMs", b.maxDelayMs, 0, MAX_DELAY);
    return { type: "exponential", delayMs, maxDelayMs };
  }
  if (b.type === "fixed") {
    return { type: "fixed", delayMs: checkInt("backoff.delayMs", b.delayMs, 0, MAX_DELAY) };
  }
  throw new InvalidInputError(`option backoff.type must be "exponential" or "fixed"; got ${shown(b.type)}`, { field: "options.backoff.type" });
}

function normalizeRetention(field: string, value: unknown, fallback: number): RetentionMs {
  if (value === undefined) return fallback;
  if (value === true) return 0;
  if (value === false) return null;
  if (typeof value === "object" && value !== null && "ageMs" in value) {
    // BullMQ's { age, count } spelling: a count here would be ignored, so it is refused (counts are the pruner's retention policy).
    const extra = presentKeys(value).find((k) => k !== "ageMs");
    if (extra !== undefined) {
      throw new InvalidInputError(
        `unknown field ${field}.${extra}; ${field} is true, false or { ageMs } (count limits are the worker's maintenance.retention)`,
        {
          field: `options.${field}.${extra}`,
        },
      );
    }
    return checkInt(`${field}.ageMs`, value.ageMs, 0, MAX_DELAY);
  }
  throw new InvalidInputError(`option ${field} must be true, false or { ageMs }; got ${shown(value)}`, { field: `options.${field}` });
}

/**
 * Serialises a payload, refusing what JSON would silently change (undefined, functions, NaN,
 * Infinity, BigInt, cycles, class instances other than Date) and what exceeds `maxBytes`.
 */
export function serializePayload(jobName: string, data: unknown, maxBytes: number, field: "data" | "meta" = "data"): string {
  const what = field === "data" ? "payload" : "meta";
  const problem = findNonJson(data, field);
  if (problem) {
    throw new InvalidInputError(`${what} of job "${jobName}" is not JSON: ${problem}. Send plain JSON (ids, not objects).`, {
      field: field === "data" ? "data" : "options.meta",
    });
  }
  const text = JSON.stringify(data === undefined ? null : data);
  checkSize(jobName, Buffer.byteLength(text, "utf8"), maxBytes);
  return text;
}

/** Most bytes of JSON a handler's progress value takes (`ctx.progress`): a status, not a result store. */
export const MAX_PROGRESS_BYTES = 64 * 1024;

/**
 * A handler's progress value, checked as a payload is before any store sees it: JSON (a cycle or a
 * BigInt would otherwise fail inside the store's serialiser, NaN turn into null), at most
 * MAX_PROGRESS_BYTES of it.
 */
export function checkProgress(value: unknown): void {
  const problem = findNonJson(value, "progress");
  if (problem) throw new InvalidInputError(`ctx.progress takes JSON: ${problem}`, { field: "progress" });
  const bytes = Buffer.byteLength(JSON.stringify(value === undefined ? null : value), "utf8");
  if (bytes > MAX_PROGRESS_BYTES) {
    throw new InvalidInputError(
      `ctx.progress takes at most ${MAX_PROGRESS_BYTES} bytes of JSON; got ${bytes}. Report a status, and return results from the handler`,
      {
        field: "progress",
      },
    );
  }
}

function checkSize(jobName: string, bytes: number, maxBytes: number): void {
  if (bytes > maxBytes) {
    throw new InvalidInputError(
      `payload of job "${jobName}" (with its meta) is ${bytes} bytes, over the limit of ${maxBytes}; enqueue ids ` +
        `and load the data in the worker, or raise maxPayloadBytes on the Queue`,
      { field: "data" },
    );
  }
}

/** What {@link findNonJson} found: the steps from the root to the value, innermost first, and the message for its path. */
interface NonJson {
  readonly steps: string[];
  readonly describe: (path: string) => string;
}

/**
 * Why `value` is not JSON, naming the path from `root` ("data.items[3].price is NaN, …"), or null.
 * The path is assembled only for a value refused: building it for every property of every payload
 * was about half of this check's CPU in a bulk enqueue (docs/performance-sqlite.md, Session 11).
 */
function findNonJson(value: unknown, root: string): string | null {
  const found = nonJsonIn(value, [], 0);
  return found === null ? null : found.describe(root + found.steps.reverse().join(""));
}

const refused = (describe: (path: string) => string): NonJson => ({ steps: [], describe });

/** @param ancestors the objects and arrays enclosing `value` (a value among them is a cycle) */
function nonJsonIn(value: unknown, ancestors: object[], depth: number): NonJson | null {
  switch (typeof value) {
    case "string":
    case "boolean":
      return null;
    case "number":
      return Number.isFinite(value) ? null : refused((path) => `${path} is ${value}, which JSON cannot represent`);
    case "undefined":
      return depth === 0 ? null : refused((path) => `${path} is undefined`);
    case "bigint":
      return refused((path) => `${path} is a BigInt; send it as a string`);
    case "function":
    case "symbol":
      return refused((path) => `${path} is a ${typeof value}`);
  }
  if (value === null) return null;
  const obj = value as object;
  if (ancestors.includes(obj)) return refused((path) => `${path} contains a cycle`);
  // JSON.stringify writes an invalid Date as null: what arrives would not be what was sent.
  if (obj instanceof Date) return Number.isNaN(obj.getTime()) ? refused((path) => `${path} is an invalid Date`) : null;
  // Bounded here, before JSON.stringify's own recursion overflows the stack on a deep value.
  if (depth >= MAX_JSON_DEPTH) {
    return refused((path) => `${path.slice(0, 80)}… nests arrays or objects more than ${MAX_JSON_DEPTH} levels deep; flatten it`);
  }
  ancestors.push(obj);
  try {
    if (Array.isArray(obj)) {
      for (let i = 0; i < obj.length; i++) {
        const found = nonJsonIn(obj[i], ancestors, depth + 1);
        if (found) {
          found.steps.push(`[${i}]`);
          return found;
        }
      }
      return null;
    }
    const proto = Object.getPrototypeOf(obj) as unknown;
    if (proto !== Object.prototype && proto !== null) {
      return refused((path) => `${path} is an instance of ${(obj.constructor as { name?: string } | undefined)?.name ?? "a class"}; send plain objects`);
    }
    // Own enumerable keys in Object.entries' order, without its array of pairs per object.
    for (const key in obj) {
      if (!Object.hasOwn(obj, key)) continue;
      const v = (obj as Record<string, unknown>)[key];
      if (v === undefined) continue; // JSON drops undefined properties; that is what users expect
      const found = nonJsonIn(v, ancestors, depth + 1);
      if (found) {
        found.steps.push(`.${key}`);
        return found;
      }
    }
    return null;
  } finally {
    ancestors.pop();
  }
}

/** Defaults a Queue applies to every job it adds, overridden per job. */
export type JobDefaults = Omit<JobOptions, "jobId" | "runAt" | "dedup">;

/** Job options that name one job (its id, its time, its dedup key): as a default every job would share them. */
const PER_JOB_OPTIONS = new Set(["jobId", "runAt", "dedup"]);

/**
 * Default job options (a queue's `defaults`, a definition's, an outbox target's `jobDefaults`),
 * checked once where they are given: an object of known job options, none of them one that names a
 * single job (a default `jobId` would make every add after the first a duplicate, its data dropped),
 * each value checked as a job's own is. Else a bad or misspelt default would be ignored, or refuse
 * every add later.
 */
export function checkJobDefaults(what: string, value: unknown): JobDefaults {
  if (value === undefined) return {};
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new InvalidInputError(`${what} must be an object of job options; got ${shown(value)}`, { field: "defaults" });
  }
  for (const key of presentKeys(value)) {
    if (PER_JOB_OPTIONS.has(key)) {
      throw new InvalidInputError(`${what}: ${key} names one job and cannot be a default; give it to each add instead`, { field: `defaults.${key}` });
    }
    if (!KNOWN_OPTIONS.has(key)) {
      const known = [...KNOWN_OPTIONS].filter((k) => !PER_JOB_OPTIONS.has(k));
      throw new InvalidInputError(`${what}: unknown job option "${key}"; defaults take: ${known.join(", ")}`, { field: `defaults.${key}` });
    }
  }
  try {
    buildJobSpec({ queue: "defaults", name: "defaults", data: null, options: value });
  } catch (error) {
    if (error instanceof InvalidInputError) error.message = `${what}: ${error.message}`;
    throw error;
  }
  return value;
}

/** A payload limit, bytes of JSON: a whole number from 1 up (NaN would switch the check off). */
export function checkMaxPayloadBytes(value: unknown): number {
  if (value === undefined) return DEFAULT_MAX_PAYLOAD_BYTES;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
    throw new InvalidInputError(`option maxPayloadBytes must be a whole number of bytes from 1 up (default ${DEFAULT_MAX_PAYLOAD_BYTES}); got ${shown(value)}`);
  }
  return value;
}

/** Validates one job and turns it into a spec. Throws InvalidInputError naming the field. */
export function buildJobSpec(input: {
  queue: string;
  name: string;
  data: unknown;
  options?: JobOptions | undefined;
  defaults?: JobDefaults | undefined;
  maxPayloadBytes?: number | undefined;
}): JobSpec {
  const queue = checkName("queue", input.queue);
  const name = checkName("job", input.name);
  const given = input.options ?? {};
  if (typeof given !== "object" || given === null) throw new InvalidInputError(`job options must be an object; got ${shown(given)}`, { field: "options" });
  for (const key of presentKeys(given)) {
    if (!KNOWN_OPTIONS.has(key)) {
      throw new InvalidInputError(`unknown job option "${key}"; known options: ${[...KNOWN_OPTIONS].join(", ")}`, { field: `options.${key}` });
    }
  }
  const o: JobOptions = { ...withoutUndefined(input.defaults), ...withoutUndefined(given) };
  let id: string;
  if (o.jobId === undefined) id = newJobId();
  else id = checkJobId(o.jobId);

  let runAt: number | null = null;
  if (o.runAt !== undefined) {
    const t = o.runAt instanceof Date ? o.runAt.getTime() : o.runAt;
    if (typeof t !== "number" || !Number.isFinite(t) || t < 0 || t > LATEST_RUN_AT) {
      throw new InvalidInputError(
        `option runAt must be a Date or milliseconds since the epoch, no later than 9999-12-31T23:59:59.999Z (${LATEST_RUN_AT}); got ${shown(o.runAt)}`,
        { field: "options.runAt" },
      );
    }
    runAt = Math.floor(t);
  }
  const delayMs = o.delayMs === undefined ? 0 : checkInt("delayMs", o.delayMs, 0, MAX_DELAY);
  const maxBytes = input.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
  const payload = serializePayload(name, input.data, maxBytes);
  let meta: string | null = null;
  if (o.meta !== undefined) {
    if (typeof o.meta !== "object" || o.meta === null || Array.isArray(o.meta)) {
      throw new InvalidInputError(`option meta must be a plain JSON object; got ${shown(o.meta)}`, { field: "options.meta" });
    }
    meta = serializePayload(name, o.meta, maxBytes, "meta");
    checkSize(name, Buffer.byteLength(payload, "utf8") + Buffer.byteLength(meta, "utf8"), maxBytes);
  }
  return {
    id,
    idGenerated: o.jobId === undefined,
    queue,
    name,
    payload,
    priority: o.priority === undefined ? 0 : checkInt("priority", o.priority, MIN_PRIORITY, MAX_PRIORITY),
    runAt,
    delayMs,
    maxAttempts: o.attempts === undefined ? DEFAULT_ATTEMPTS : checkInt("attempts", o.attempts, 1, MAX_ATTEMPTS),
    backoff: normalizeBackoff(o.backoff),
    timeoutMs: o.timeoutMs === undefined ? null : checkInt("timeoutMs", o.timeoutMs, 1, MAX_DELAY),
    retainCompletedMs: normalizeRetention("removeOnComplete", o.removeOnComplete, DEFAULT_RETAIN_COMPLETED_MS),
    retainDeadMs: normalizeRetention("removeOnFail", o.removeOnFail, DEFAULT_RETAIN_DEAD_MS),
    meta,
    ...(o.dedup === undefined ? {} : { dedup: normalizeDedup(o.dedup)! }),
    ...jobFlowOf(o),
  };
}
