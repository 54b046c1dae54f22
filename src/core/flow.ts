/**
 * Flow control: the per-queue limits the store enforces on every claim, whichever worker makes
 * it (rate of starts, jobs running at once, jobs of one name running at once, a timed hold), and
 * the arithmetic that turns a queue's recorded state into "how many may start now, and when may
 * the next one". The SQL backends run `claimBudget` inside their claim transaction; the Redis
 * backend runs the same rules in its claim script (lua/claim-4.lua, the `flow` part).
 */
import { InvalidInputError } from "./errors.js";
import { checkName } from "./spec.js";
import type { JobFlow } from "./job.js";
import { presentKeys, shown } from "./checks.js";

/** At most `max` jobs of the queue start in any window of `durationMs` milliseconds. */
export interface RateLimit {
  /** Jobs started per window, fleet-wide. Integer, 1 to 1 000 000. */
  max: number;
  /** The window, in milliseconds. Integer, 1 to 86 400 000 (one day). */
  durationMs: number;
}

/**
 * Limits of one queue, as `queue.setLimits` takes them. Every field is optional; an omitted
 * (or null) field is no limit. The object replaces the queue's previous limits as a whole.
 */
export interface QueueLimits {
  /** Rate of starts across every worker (a sliding window). Default: none. */
  rate?: RateLimit | null;
  /** Jobs of the queue active at once, fleet-wide (counted from active leases). Integer >= 1. Default: none. */
  maxRunning?: number | null;
  /**
   * Jobs of one name active at once, fleet-wide: `{ "export-report": 3 }`. Names not listed are
   * not limited this way. Integers >= 1. Default: none.
   */
  maxRunningPerName?: Record<string, number> | null;
}

/** Limits as stored: every field present. */
export interface StoredQueueLimits {
  rate: RateLimit | null;
  maxRunning: number | null;
  /** Name -> cap; empty when no name is capped. */
  maxRunningPerName: Record<string, number>;
}

/** A queue's flow control as the store holds it: its limits and any hold (RetryLater with pause). */
export interface QueueFlow {
  limits: StoredQueueLimits;
  /** No job of the queue starts before this time, ms since epoch (store clock); null when not held. */
  heldUntil: number | null;
}

export const MAX_RATE_MAX = 1_000_000;
export const MAX_RATE_DURATION_MS = 86_400_000;
export const MAX_RUNNING_LIMIT = 1_000_000;
/** Longest hold `holdQueue` accepts, in ms (one day). */
export const MAX_HOLD_MS = 86_400_000;

export const NO_LIMITS: StoredQueueLimits = Object.freeze({ rate: null, maxRunning: null, maxRunningPerName: Object.freeze({}) });

function limitInt(field: string, value: unknown, max: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1 || value > max) {
    throw new InvalidInputError(`limit ${field} must be an integer from 1 to ${max}; got ${shown(value)}`, { field: `limits.${field}` });
  }
  return value;
}

const KNOWN_LIMITS = new Set(["rate", "maxRunning", "maxRunningPerName"]);

/** Validates `queue.setLimits` input. Throws InvalidInputError naming the field. */
export function normalizeQueueLimits(input: unknown): StoredQueueLimits {
  if (typeof input !== "object" || input === null || Array.isArray(input)) {
    throw new InvalidInputError(`limits must be an object such as { rate: { max, durationMs }, maxRunning, maxRunningPerName }; got ${shown(input)}`, {
      field: "limits",
    });
  }
  const given = input as Record<string, unknown>;
  for (const key of presentKeys(given)) {
    if (!KNOWN_LIMITS.has(key)) {
      throw new InvalidInputError(`unknown limit "${key}"; known limits: ${[...KNOWN_LIMITS].join(", ")}`, { field: `limits.${key}` });
    }
  }
  let rate: RateLimit | null = null;
  if (given.rate !== undefined && given.rate !== null) {
    if (typeof given.rate !== "object" || Array.isArray(given.rate)) {
      throw new InvalidInputError(`limit rate must be { max, durationMs }; got ${shown(given.rate)}`, { field: "limits.rate" });
    }
    const r = given.rate as Record<string, unknown>;
    for (const key of presentKeys(r)) {
      if (key !== "max" && key !== "durationMs")
        throw new InvalidInputError(`unknown field rate.${key}; rate is { max, durationMs }`, { field: `limits.rate.${key}` });
    }
    rate = { max: limitInt("rate.max", r.max, MAX_RATE_MAX), durationMs: limitInt("rate.durationMs", r.durationMs, MAX_RATE_DURATION_MS) };
  }
  const maxRunning = given.maxRunning === undefined || given.maxRunning === null ? null : limitInt("maxRunning", given.maxRunning, MAX_RUNNING_LIMIT);
  const maxRunningPerName: Record<string, number> = {};
  if (given.maxRunningPerName !== undefined && given.maxRunningPerName !== null) {
    const m = given.maxRunningPerName;
    if (typeof m !== "object" || Array.isArray(m)) {
      throw new InvalidInputError(`limit maxRunningPerName must be an object of job name -> cap; got ${shown(m)}`, {
        field: "limits.maxRunningPerName",
      });
    }
    for (const [name, cap] of Object.entries(m as Record<string, unknown>)) {
      if (cap === undefined) continue;
      checkName("job", name);
      maxRunningPerName[name] = limitInt(`maxRunningPerName.${name}`, cap, MAX_RUNNING_LIMIT);
    }
  }
  return { rate, maxRunning, maxRunningPerName };
}

/** True when the limits limit nothing (the queue's flow row can go). */
export function isUnlimited(limits: StoredQueueLimits): boolean {
  return limits.rate === null && limits.maxRunning === null && Object.keys(limits.maxRunningPerName).length === 0;
}

/** A hold length in ms, checked (RetryLater with pause, `holdQueue`). */
export function holdMs(value: unknown): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 1 || value > MAX_HOLD_MS) {
    throw new InvalidInputError(`a queue hold must be a number of milliseconds from 1 to ${MAX_HOLD_MS}; got ${shown(value)}`);
  }
  return Math.ceil(value);
}

/** What a store knows about one flow-controlled queue at the start of a claim. */
export interface FlowSnapshot {
  now: number;
  limits: StoredQueueLimits;
  heldUntil: number | null;
  /** Active jobs of the queue (expired leases not yet rescued included: they hold their slot). */
  active: number;
  /** Active jobs per name, for the capped names. */
  activeByName: ReadonlyMap<string, number>;
  /** Starts recorded in the current rate window (`(now - durationMs, now]`). */
  startsInWindow: number;
  /** The oldest start in the window, or null when none. */
  oldestStart: number | null;
}

/** Whether `claimBudget` needs the queue's running counts (a store can skip reading them). */
export function needsRunningCounts(limits: StoredQueueLimits): boolean {
  return limits.maxRunning !== null || Object.keys(limits.maxRunningPerName).length > 0;
}

/** A FlowSnapshot from a store's answers: its rate window (null without a rate) and running counts per name. */
export function flowSnapshot(
  now: number,
  limits: StoredQueueLimits,
  heldUntil: number | null,
  window: { n: number; oldest: number | null } | null,
  running: Iterable<{ name: string; n: number }>,
): FlowSnapshot {
  let active = 0;
  const activeByName = new Map<string, number>();
  for (const { name, n } of running) {
    active += n;
    activeByName.set(name, n);
  }
  return { now, limits, heldUntil, active, activeByName, startsInWindow: window?.n ?? 0, oldestStart: window?.oldest ?? null };
}

/** How many may start now, which names at most how many, and when to look again when none may. */
export interface ClaimBudget {
  /** Jobs this claim may start, 0..limit. */
  total: number;
  /** Per capped name: how many of that name may start (names absent: no cap but `total`). */
  perName: Map<string, number>;
  /**
   * When `total` is 0 because of a rate limit or a hold: ms until a slot opens. Null when the
   * queue is full of running jobs (a slot opens when one finishes, which nobody can foresee) or
   * when something may start now.
   */
  retryInMs: number | null;
  /** With a rate limit: starts the rate allows now (before this claim); null without one. */
  rateRoom: number | null;
  /** With a rate limit: ms until a slot opens once `rateRoom` starts have been made; null without one. */
  rateSlotInMs: number | null;
}

/**
 * What a claim that started `started` jobs of a queue reports to its throttle listener: when it
 * took the rate's last open slot, ms until the next one opens, so workers leave the queue out
 * until then instead of claiming it once more only to hear that; null otherwise (nothing to say).
 */
export function throttleAfterStarts(budget: ClaimBudget, started: number): number | null {
  if (budget.rateRoom === null || started <= 0 || started < budget.rateRoom) return null;
  return budget.rateSlotInMs;
}

/**
 * Whether a claim that can start at most `claimSize` jobs must count a rate window exactly (the
 * queue's, or a limiter key's held to `max` starts): when `stored`, the starts recorded for it
 * with those that already left it (an upper bound of its count), and `claimSize` together reach
 * `max`. Otherwise every decision the claim makes with `stored` is the one the exact count gives
 * (room for all it can start, so never its last slot, and the window's oldest start never asked
 * for), and a store may skip forgetting the starts that left the window, and reading its oldest
 * start, for that claim. PostgreSQL's flow-read-lanes.sql (`exact`) and SQLite's SqliteFlow
 * both apply it.
 */
export function windowNeedsExactCount(stored: number, claimSize: number, max: number): boolean {
  return stored + claimSize >= max;
}

/** The claim budget of one queue: the single place the limits are turned into numbers. */
export function claimBudget(snapshot: FlowSnapshot, limit: number, names: readonly string[]): ClaimBudget {
  const { now, limits } = snapshot;
  const perName = new Map<string, number>();
  if (snapshot.heldUntil !== null && snapshot.heldUntil > now) {
    return { total: 0, perName, retryInMs: snapshot.heldUntil - now, rateRoom: null, rateSlotInMs: null };
  }
  let total = limit;
  let retryInMs: number | null = null;
  let rateRoom: number | null = null;
  let rateSlotInMs: number | null = null;
  if (limits.rate !== null) {
    const room = Math.max(0, limits.rate.max - snapshot.startsInWindow);
    // The oldest start in the window leaves it at oldest + durationMs: then one slot opens. With
    // none in it, the oldest once this claim's starts fill it is one of them, made now.
    rateSlotInMs = Math.max(1, (snapshot.oldestStart ?? now) + limits.rate.durationMs - now);
    rateRoom = room;
    if (room === 0) retryInMs = rateSlotInMs;
    total = Math.min(total, room);
  }
  if (limits.maxRunning !== null) total = Math.min(total, Math.max(0, limits.maxRunning - snapshot.active));
  // Names this worker handles that are capped; when every one it handles is full, nothing starts.
  let uncapped = false;
  let cappedRoom = 0;
  for (const name of names) {
    const cap = limits.maxRunningPerName[name];
    if (cap === undefined) {
      uncapped = true;
      continue;
    }
    const room = Math.max(0, cap - (snapshot.activeByName.get(name) ?? 0));
    perName.set(name, room);
    cappedRoom += room;
  }
  if (!uncapped) total = Math.min(total, cappedRoom);
  if (total > 0) retryInMs = null;
  return { total, perName, retryInMs, rateRoom, rateSlotInMs };
}

/**
 * Sends `retryInMs` to the claim's throttle listener, if any; a throwing listener must not fail
 * the claim (its jobs are already leased).
 */
export function reportThrottle(
  listener: ((throttle: { queue: string; retryInMs: number | null }) => void) | undefined,
  queue: string,
  retryInMs: number | null,
): void {
  if (listener === undefined) return;
  try {
    listener({ queue, retryInMs });
  } catch {
    // The listener's own business; the claim stands.
  }
}

/** One waiting job at the head of a lane, as the round-robin pick needs it. */
export interface LaneJob<K> {
  /** The store's handle of the job (a seq, an id). */
  ref: K;
  name: string;
  /** Null for a job without group or limiter (the queue's unkeyed lane). */
  flow: JobFlow | null;
}

/** A lane's first waiting jobs, in claim order. */
export interface LaneHead<K> {
  /** The lane (see laneOf); "" for the unkeyed jobs of the queue. */
  lane: string;
  jobs: readonly LaneJob<K>[];
}

/** A limiter key's window: starts in it, the oldest, and a hold (RetryLater with pause "key"). */
export interface LimiterWindow {
  n: number;
  oldest: number | null;
  heldUntil?: number | null;
}

/** Counts the lane pick limits by: active jobs per group key, starts in each limiter key's window. */
export interface LaneCounts {
  groupActive: ReadonlyMap<string, number>;
  /** Read only for the keys the pick reaches: a store may count a window when first asked. */
  limiterWindow: Pick<ReadonlyMap<string, LimiterWindow>, "get">;
}

export interface LanePick<K> {
  picked: LaneJob<K>[];
  /** The last lane a job was taken from: the next claim starts after it. Null when none. */
  lastLane: string | null;
  /** Nothing taken although jobs wait: every waiting lane is at a limit. */
  throttled: boolean;
  /** With `throttled`: ms until a limiter window opens, when only limiter windows hold lanes back. */
  retryInMs: number | null;
}

/**
 * Round robin across lanes: one job from each lane in turn (in the order given: the rotation
 * after the last claim's lane), then a second from each, until `total` are taken or every lane
 * is empty or at a limit. A lane whose head job is at a limit (its group's concurrency, its
 * limiter key's rate, its name's cap) takes no more in this claim: jobs within a lane keep their
 * claim order.
 */
export function pickAcrossLanes<K>(
  lanes: readonly LaneHead<K>[],
  total: number,
  perName: ReadonlyMap<string, number>,
  counts: LaneCounts,
  now: number,
): LanePick<K> {
  const nameRoom = new Map(perName);
  const groupTaken = new Map<string, number>();
  const limiterTaken = new Map<string, number>();
  const position = lanes.map(() => 0);
  const stopped = lanes.map(() => false);
  const picked: LaneJob<K>[] = [];
  let lastLane: string | null = null;
  let waitsOnRunning = false;
  let reopensIn: number | null = null;
  for (let progress = true; progress && picked.length < total;) {
    progress = false;
    for (let i = 0; i < lanes.length && picked.length < total; i++) {
      const job = stopped[i] ? undefined : lanes[i]!.jobs[position[i]!];
      if (job === undefined) continue;
      let blocked = false;
      const room = nameRoom.get(job.name);
      if (room !== undefined && room <= 0) {
        blocked = true;
        waitsOnRunning = true;
      }
      const group = job.flow?.group ?? null;
      if (!blocked && group !== null) {
        const running = (counts.groupActive.get(group.key) ?? 0) + (groupTaken.get(group.key) ?? 0);
        if (running >= group.concurrency) {
          blocked = true;
          waitsOnRunning = true;
        }
      }
      const limiter = job.flow?.limiter ?? null;
      if (!blocked && limiter !== null) {
        const window = counts.limiterWindow.get(limiter.key) ?? { n: 0, oldest: null };
        if (window.heldUntil != null && window.heldUntil > now) {
          blocked = true;
          reopensIn = reopensIn === null ? window.heldUntil - now : Math.min(reopensIn, window.heldUntil - now);
        } else if (window.n + (limiterTaken.get(limiter.key) ?? 0) >= limiter.max) {
          blocked = true;
          const opensIn = Math.max(1, (window.oldest ?? now) + limiter.durationMs - now);
          reopensIn = reopensIn === null ? opensIn : Math.min(reopensIn, opensIn);
        }
      }
      if (blocked) {
        stopped[i] = true;
        continue;
      }
      picked.push(job);
      position[i]!++;
      progress = true;
      lastLane = lanes[i]!.lane;
      if (room !== undefined) nameRoom.set(job.name, room - 1);
      if (group !== null) groupTaken.set(group.key, (groupTaken.get(group.key) ?? 0) + 1);
      if (limiter !== null) limiterTaken.set(limiter.key, (limiterTaken.get(limiter.key) ?? 0) + 1);
    }
  }
  const throttled = picked.length === 0 && stopped.some(Boolean);
  return { picked, lastLane, throttled, retryInMs: throttled && !waitsOnRunning ? reopensIn : null };
}
