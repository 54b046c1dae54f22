/**
 * The per-job flow options (`group`, `limiter`), checked, and the lane a job waits in: the unit
 * claims take turns over (docs/flow-control.md). Shared by every backend that stores them.
 */
import { InvalidInputError } from "./errors.js";
import type { JobFlow } from "./job.js";
import { MAX_RATE_DURATION_MS, MAX_RATE_MAX, MAX_RUNNING_LIMIT } from "./flow.js";
import { isKeyText } from "./key-text.js";
import { presentKeys, shown } from "./checks.js";

function checkKey(field: string, value: unknown): string {
  if (!isKeyText(value)) {
    throw new InvalidInputError(`option ${field} must be a string of 1-255 characters without control characters; got ${shown(value)}`, {
      field: `options.${field}`,
    });
  }
  return value;
}

function checkInt(field: string, value: unknown, max: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1 || value > max) {
    throw new InvalidInputError(`option ${field} must be an integer from 1 to ${max}; got ${shown(value)}`, { field: `options.${field}` });
  }
  return value;
}

function checkObject(field: string, value: unknown, keys: readonly string[]): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new InvalidInputError(`option ${field} must be { ${keys.join(", ")} }; got ${shown(value)}`, { field: `options.${field}` });
  }
  for (const key of presentKeys(value)) {
    if (!keys.includes(key))
      throw new InvalidInputError(`unknown field ${field}.${key}; ${field} is { ${keys.join(", ")} }`, { field: `options.${field}.${key}` });
  }
  return value as Record<string, unknown>;
}

/** `{ flow }` for a spec when the options give a group or a limiter, else `{}`. */
export function jobFlowOf(options: { group?: unknown; limiter?: unknown }): { flow?: JobFlow } {
  if (options.group === undefined && options.limiter === undefined) return {};
  let group: JobFlow["group"] = null;
  if (options.group !== undefined) {
    const g = checkObject("group", options.group, ["key", "concurrency"]);
    group = { key: checkKey("group.key", g.key), concurrency: checkInt("group.concurrency", g.concurrency, MAX_RUNNING_LIMIT) };
  }
  let limiter: JobFlow["limiter"] = null;
  if (options.limiter !== undefined) {
    const l = checkObject("limiter", options.limiter, ["key", "max", "durationMs"]);
    limiter = {
      key: checkKey("limiter.key", l.key),
      max: checkInt("limiter.max", l.max, MAX_RATE_MAX),
      durationMs: checkInt("limiter.durationMs", l.durationMs, MAX_RATE_DURATION_MS),
    };
  }
  return { flow: { group, limiter } };
}

/**
 * The lane of a job: its group, else its limiter key (prefixed apart, so a group and a limiter
 * key of the same text are different lanes). Claims take turns across lanes.
 */
export function laneOf(flow: JobFlow): string {
  return flow.group !== null ? `g:${flow.group.key}` : `k:${flow.limiter!.key}`;
}

/** Where a limiter key's starts are recorded: the queue's own rate window has the bare queue name. */
export function limiterBucket(queue: string, key: string): string {
  return `${limiterBucketPrefix(queue)}${key}`;
}

/** What every limiter bucket of `queue` starts with (a store that names buckets in SQL appends the key). */
export function limiterBucketPrefix(queue: string): string {
  // Queue names cannot hold a newline (checkName), so no key can collide with a queue.
  return `${queue}\nk:`;
}

/** A job's flow as the SQL stores keep it: one column per field, NULL when absent. */
export interface JobFlowColumns {
  group_key: string | null;
  group_concurrency: number | null;
  limiter_key: string | null;
  limiter_max: number | null;
  limiter_duration_ms: number | null;
}

/** The JobFlow of a row's flow columns (every column of a part is set together, by setJobFlow / enqueue.sql). */
export function jobFlowFromColumns(row: JobFlowColumns): JobFlow {
  return {
    group: row.group_key === null ? null : { key: row.group_key, concurrency: row.group_concurrency! },
    limiter: row.limiter_key === null ? null : { key: row.limiter_key, max: row.limiter_max!, durationMs: row.limiter_duration_ms! },
  };
}

/** Lanes one claim of `total` jobs visits: a few more than it can take, since some may be at their limits. */
export function lanesToVisit(total: number): number {
  return total + 2;
}

/** Head jobs read per lane: all `total` when few lanes share the claim, else an even share and some. */
export function headsPerLane(total: number, lanes: number): number {
  return lanes <= 4 ? total : Math.ceil(total / lanes) + 2;
}
