/**
 * Cron schedules: what a schedule is, how its input is checked, and the tick arithmetic every
 * backend and every scheduler process shares (written once here, so no two places can disagree
 * about which tick is due).
 *
 * Glossary.
 * - tick: an instant a schedule's cron pattern names, in its time zone (croner does the calendar
 *   and DST work, see docs/scheduling.md).
 * - cursor: the latest instant already dealt with: the last fired tick, or the schedule's anchor
 *   (when it was created or its pattern last changed), whichever is later. Only ticks after the
 *   cursor can fire, so a tick is never fired twice and a pattern change never replays the past.
 * - firing: one atomic store step that moves the cursor from the value the scheduler read to the
 *   newest due tick (compare-and-set) and enqueues the jobs the misfire policy asks for, each with
 *   an id derived from (queue, schedule, tick). Two schedulers racing for one tick: one wins, the
 *   other's compare-and-set finds the cursor moved and writes nothing.
 */
import { createHash } from "node:crypto";
import { Cron } from "croner";
import { InvalidInputError } from "./errors.js";
import type { JobSpec } from "./job.js";
import type { Json } from "./json.js";
import { buildJobSpec, checkName, type JobOptions } from "./spec.js";
import { MAX_DELAY, presentKeys, shown } from "./checks.js";

/**
 * What happens to ticks that passed while no scheduler ran (downtime, every worker stopped):
 * - `"skip"`: they are dropped; only a tick at most `graceMs` old still fires, then the schedule
 *   waits for its next tick.
 * - `"once"` (default): one job stands for all of them (the newest tick's), so work that must
 *   happen "after every period" catches up once, not N times.
 * - `"all"`: one job per missed tick, oldest first, at most `limit` (the newest `limit` ticks).
 */
export type MisfirePolicy = "skip" | "once" | "all";

/** The `misfire` option: a policy name, or the policy with its parameter. */
export type MisfireOption = MisfirePolicy | { policy: "skip"; graceMs?: number } | { policy: "once" } | { policy: "all"; limit?: number };

/** A misfire policy with its parameters filled in. */
export interface Misfire {
  policy: MisfirePolicy;
  /** `skip` only: how late a tick may still fire, in ms. Default 60 000. */
  graceMs: number;
  /** `all` only: the most missed ticks one firing enqueues. Default 100, at most 1000. */
  limit: number;
}

export const DEFAULT_MISFIRE_POLICY: MisfirePolicy = "once";
/** `misfire.graceMs`: a tick up to a minute late is on time, not missed. */
export const DEFAULT_MISFIRE_GRACE_MS = 60_000;
/** `misfire.limit`. */
export const DEFAULT_MISFIRE_LIMIT = 100;
export const MAX_MISFIRE_LIMIT = 1_000;
/** Time zone of a schedule that names none. */
export const DEFAULT_TIME_ZONE = "UTC";
/** The longest cron pattern accepted, in characters. */
const MAX_CRON_LENGTH = 256;

/** Job options a schedule's jobs may carry: every option but the ones the tick decides. */
export type ScheduleJobOptions = Omit<JobOptions, "jobId" | "delayMs" | "runAt">;

/** What `queue.schedule(id, …)` takes. */
export interface ScheduleOptions {
  /**
   * The cron pattern: 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds
   * first; names (`MON`, `JAN`), ranges, steps, `L`, `#` and nicknames (`@daily`) as croner reads
   * them. Required.
   */
  cron: string;
  /** IANA time zone the pattern's wall-clock times are in, e.g. "Europe/Berlin". Default "UTC". */
  tz?: string;
  /** The job name every tick enqueues. Required. */
  name: string;
  /** The payload of every tick's job (JSON). Default `{}`. */
  data?: Json;
  /** Options of every tick's job (attempts, priority, backoff, retention, meta …). Default none. */
  options?: ScheduleJobOptions;
  /** Ticks missed during downtime: "skip", "once" (default) or "all" (see MisfirePolicy). */
  misfire?: MisfireOption;
}

/** A schedule's definition after checks, as stored (JSON) and returned. */
export interface ScheduleDefinition {
  cron: string;
  tz: string;
  name: string;
  data: Json;
  options: ScheduleJobOptions;
  misfire: Misfire;
}

/** What a backend stores for one upsert. */
export interface ScheduleWrite {
  queue: string;
  id: string;
  /** The definition as JSON text. */
  definition: string;
  /**
   * The part of the definition that decides when ticks fall (pattern and time zone). When an
   * upsert changes it, the store moves the schedule's anchor to now: the new pattern takes
   * effect from its next tick, and ticks of the old pattern are not replayed.
   */
  timing: string;
}

/** One schedule as the store holds it. Times are ms since the epoch on the store clock. */
export interface StoredSchedule {
  queue: string;
  id: string;
  definition: ScheduleDefinition;
  /** Ticks at or before this instant never fire: creation, or the last change of the pattern. */
  anchorAt: number;
  /** The newest tick fired (or dropped by the misfire policy), or null before the first. */
  lastTickAt: number | null;
  /** Bumped by every upsert; a firing computed from an older version is refused. */
  version: number;
  createdAt: number;
  updatedAt: number;
}

/** A schedule with its next run time, as `queue.schedules()`, the CLI and the HTTP API show it. */
export interface ScheduleInfo extends StoredSchedule {
  /** The next tick that will fire, ms since the epoch; null when the pattern names no future time. */
  nextRunAt: number | null;
}

/** The store step that fires a schedule: move the cursor, enqueue the jobs, atomically. */
export interface ScheduleFiring {
  queue: string;
  id: string;
  /** The version the firing was computed from; another version refuses it. */
  version: number;
  /** The `lastTickAt` the firing was computed from (compare-and-set); null for none yet. */
  expectedTickAt: number | null;
  /** The new `lastTickAt`: the newest due tick. */
  tickAt: number;
  /** The jobs to enqueue (zero when the misfire policy drops every due tick). */
  jobs: JobSpec[];
}

/** A schedule id: the same alphabet as queue and job names (1-128 characters). */
export function checkScheduleId(value: unknown): string {
  return checkName("schedule", value);
}

/** The parsed pattern, or an InvalidInputError that says what is wrong with it. */
export function parseCron(cron: unknown, tz: string): Cron {
  if (typeof cron !== "string" || cron.trim() === "" || cron.length > MAX_CRON_LENGTH) {
    throw new InvalidInputError(
      `cron must be a pattern of 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, e.g. "0 8 * * MON"; got ${shown(cron)}`,
      { field: "cron" },
    );
  }
  try {
    return new Cron(cron, { timezone: tz, mode: "5-or-6-parts" });
  } catch (error) {
    throw new InvalidInputError(
      `cron pattern ${JSON.stringify(cron)} is not valid: ${(error as Error).message}. Use 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first`,
      { field: "cron", cause: error },
    );
  }
}

/** An IANA time zone name known to this Node.js, or an InvalidInputError. */
export function checkTimeZone(tz: unknown): string {
  if (tz === undefined) return DEFAULT_TIME_ZONE;
  if (typeof tz === "string" && tz !== "") {
    try {
      new Intl.DateTimeFormat("en-US", { timeZone: tz });
      return tz;
    } catch {
      // falls through to the error below
    }
  }
  throw new InvalidInputError(`tz must be an IANA time zone name such as "Europe/Berlin" or "UTC"; got ${shown(tz)}`, { field: "tz" });
}

export function normalizeMisfire(value: unknown): Misfire {
  const bad = () =>
    new InvalidInputError(
      `misfire must be "skip", "once" or "all", or { policy: "skip", graceMs } (graceMs 0-${MAX_DELAY} ms) / { policy: "all", limit } (limit 1-${MAX_MISFIRE_LIMIT}); got ${shown(value)}`,
      { field: "misfire" },
    );
  const base: Misfire = { policy: DEFAULT_MISFIRE_POLICY, graceMs: DEFAULT_MISFIRE_GRACE_MS, limit: DEFAULT_MISFIRE_LIMIT };
  if (value === undefined) return base;
  if (value === "skip" || value === "once" || value === "all") return { ...base, policy: value };
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw bad();
  const o = value as { policy?: unknown; graceMs?: unknown; limit?: unknown };
  for (const key of presentKeys(o)) if (key !== "policy" && key !== "graceMs" && key !== "limit") throw bad();
  if (o.policy !== "skip" && o.policy !== "once" && o.policy !== "all") throw bad();
  if (o.graceMs !== undefined && (o.policy !== "skip" || !Number.isInteger(o.graceMs) || (o.graceMs as number) < 0 || (o.graceMs as number) > MAX_DELAY))
    throw bad();
  if (o.limit !== undefined && (o.policy !== "all" || !Number.isInteger(o.limit) || (o.limit as number) < 1 || (o.limit as number) > MAX_MISFIRE_LIMIT))
    throw bad();
  return { policy: o.policy, graceMs: (o.graceMs as number | undefined) ?? base.graceMs, limit: (o.limit as number | undefined) ?? base.limit };
}

const KNOWN_SCHEDULE_FIELDS = new Set(["cron", "tz", "name", "data", "options", "misfire"]);
const TICK_DECIDED_OPTIONS = ["jobId", "delayMs", "runAt"] as const;

/** Checks `queue.schedule(id, input)` and turns it into what the store keeps. */
export function buildScheduleWrite(queue: string, id: string, input: ScheduleOptions, maxPayloadBytes?: number): ScheduleWrite {
  checkName("queue", queue);
  checkScheduleId(id);
  if (typeof input !== "object" || input === null) {
    throw new InvalidInputError(`a schedule needs { cron, name }, e.g. { cron: "0 8 * * MON", name: "digest" }; got ${shown(input)}`);
  }
  for (const key of presentKeys(input)) {
    if (!KNOWN_SCHEDULE_FIELDS.has(key)) {
      throw new InvalidInputError(`unknown schedule field "${key}"; known fields: ${[...KNOWN_SCHEDULE_FIELDS].join(", ")}`, { field: key });
    }
  }
  const tz = checkTimeZone(input.tz);
  const cron = parseCron(input.cron, tz);
  // A pattern naming no future instant (31 February) would never fire: refuse it now.
  if (cron.nextRun(new Date(0)) === null) {
    throw new InvalidInputError(`cron pattern ${JSON.stringify(input.cron)} never fires (no such date); check day-of-month and month`, { field: "cron" });
  }
  const options = input.options ?? {};
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    throw new InvalidInputError(`schedule options must be an object of job options; got ${shown(options)}`, { field: "options" });
  }
  for (const key of TICK_DECIDED_OPTIONS) {
    if (key in options) {
      throw new InvalidInputError(`schedule options cannot set ${key}: each tick decides its job's id and run time`, { field: `options.${key}` });
    }
  }
  const data = input.data === undefined ? {} : input.data;
  // A dry run of the job every tick will enqueue: a bad name, payload or option fails here, at
  // upsert time, not later in a scheduler nobody watches.
  buildJobSpec({ queue, name: input.name, data, options, maxPayloadBytes });
  const definition: ScheduleDefinition = { cron: input.cron.trim(), tz, name: input.name, data, options, misfire: normalizeMisfire(input.misfire) };
  return { queue, id, definition: JSON.stringify(definition), timing: timingOf(definition) };
}

/** The pattern and time zone as one string: equal timing, equal ticks. */
function timingOf(definition: Pick<ScheduleDefinition, "cron" | "tz">): string {
  return `${definition.tz} ${definition.cron}`;
}

/** A stored definition read back (the store keeps JSON text). */
export function parseScheduleDefinition(text: string): ScheduleDefinition {
  return JSON.parse(text) as ScheduleDefinition;
}

/** The pattern of a stored schedule, parsed once per definition text. */
const patternCache = new Map<string, Cron>();
function patternOf(definition: ScheduleDefinition): Cron {
  const key = timingOf(definition);
  let cron = patternCache.get(key);
  if (cron === undefined) {
    cron = new Cron(definition.cron, { timezone: definition.tz, mode: "5-or-6-parts" });
    if (patternCache.size >= 1_000) patternCache.clear();
    patternCache.set(key, cron);
  }
  return cron;
}

/** The first tick strictly after `after`, or null when the pattern names none. */
export function nextTickAfter(definition: ScheduleDefinition, after: number): number | null {
  return patternOf(definition).nextRun(new Date(after))?.getTime() ?? null;
}

/**
 * The newest `count` ticks at or before `at`, oldest first. croner's previousRuns() works at
 * whole seconds and leaves out a tick in the second before its reference, so it is asked from a
 * second later, and the answer is completed forwards with nextRun(), which is exact.
 */
function ticksUpTo(definition: ScheduleDefinition, at: number, count: number): number[] {
  const pattern = patternOf(definition);
  const ticks = pattern
    .previousRuns(count + 1, new Date(at + 1_000))
    .map((d) => d.getTime())
    .filter((t) => t <= at)
    .sort((a, b) => a - b);
  for (let last = ticks.at(-1); last !== undefined;) {
    const next = pattern.nextRun(new Date(last))?.getTime();
    if (next === undefined || next > at) break;
    ticks.push(next);
    last = next;
  }
  return ticks.slice(-count);
}

/** Only ticks after this instant may fire. */
export function scheduleCursor(s: Pick<StoredSchedule, "anchorAt" | "lastTickAt">): number {
  return s.lastTickAt === null ? s.anchorAt : Math.max(s.lastTickAt, s.anchorAt);
}

/** When the schedule fires next, seen at `now`: its first tick after the cursor (which may be due already). */
export function nextRunAt(s: StoredSchedule, now: number): number | null {
  const next = nextTickAfter(s.definition, scheduleCursor(s));
  if (next === null) return null;
  if (next > now) return next;
  // Overdue: with "skip" past its grace it will not run; the next tick after now will.
  if (s.definition.misfire.policy === "skip") {
    const latest = ticksUpTo(s.definition, now, 1)[0] ?? next;
    if (now - latest > s.definition.misfire.graceMs) return nextTickAfter(s.definition, now);
  }
  return next;
}

/** The ticks a firing at `now` enqueues, and the cursor it moves to; null when nothing is due. */
export interface DueTicks {
  /** The newest due tick: the new `lastTickAt`. */
  tickAt: number;
  /** Ticks that get a job, oldest first (empty: every due tick is dropped by the policy). */
  ticks: number[];
  /** The cursor the firing starts from: the job of `tickAt` stands for the ticks in (since, tickAt]. */
  since: number;
}

/** Applies the schedule's misfire policy to the ticks in (cursor, now]. */
export function dueTicks(s: StoredSchedule, now: number): DueTicks | null {
  const since = scheduleCursor(s);
  const first = nextTickAfter(s.definition, since);
  if (first === null || first > now) return null;
  const { misfire } = s.definition;
  // The newest due ticks, oldest first (only ones after the cursor: `first` is one of them).
  const due = ticksUpTo(s.definition, now, misfire.policy === "all" ? misfire.limit : 1).filter((t) => t > since);
  const latest = due.at(-1) ?? first;
  switch (misfire.policy) {
    case "skip":
      return { tickAt: latest, ticks: now - latest <= misfire.graceMs ? [latest] : [], since };
    case "once":
      return { tickAt: latest, ticks: [latest], since };
    case "all":
      return { tickAt: latest, ticks: due.length > 0 ? due : [first], since };
  }
}

/** Job ids the scheduler derives start with this; the HTTP service reserves it. */
export const SCHEDULE_JOB_ID_PREFIX = "cron_";

/**
 * The id of a schedule's job for one tick: the same in every process, so the store's dedup by id
 * backs up the compare-and-set. `~` separates the parts because names cannot contain it.
 */
export function tickJobId(queue: string, scheduleId: string, tick: number): string {
  const iso = new Date(tick).toISOString();
  const plain = `${SCHEDULE_JOB_ID_PREFIX}${queue}~${scheduleId}~${iso}`;
  if (plain.length <= 255) return plain;
  const digest = createHash("sha256").update(`${queue}\u0000${scheduleId}`).digest("base64url").slice(0, 32);
  return `${SCHEDULE_JOB_ID_PREFIX}${digest}~${iso}`;
}

/**
 * What a tick's job carries in `meta.schedule`: which schedule and tick it is, and `since`, the
 * cursor before this firing (with misfire "once", the job stands for every tick in (since, tick]).
 */
export interface TickMeta {
  id: string;
  tick: string;
  since: string;
}

/** The firing for `due`: the jobs of its ticks, built from the stored definition. */
export function firingFor(s: StoredSchedule, due: DueTicks): ScheduleFiring {
  const { definition } = s;
  const jobs = due.ticks.map((tick, i) => {
    const schedule: TickMeta = {
      id: s.id,
      tick: new Date(tick).toISOString(),
      since: new Date(i === 0 ? due.since : due.ticks[i - 1]!).toISOString(),
    };
    return buildJobSpec({
      queue: s.queue,
      name: definition.name,
      data: definition.data,
      options: { ...definition.options, jobId: tickJobId(s.queue, s.id, tick), runAt: tick, meta: { ...definition.options.meta, schedule: { ...schedule } } },
    });
  });
  return { queue: s.queue, id: s.id, version: s.version, expectedTickAt: s.lastTickAt, tickAt: due.tickAt, jobs };
}

/**
 * Schedulers of this process listening per backend object, so a change made through a Queue here
 * wakes them at once instead of at their next refresh.
 */
const changeListeners = new WeakMap<object, Set<() => void>>();

export function onSchedulesChanged(backend: object, listener: () => void): () => void {
  let set = changeListeners.get(backend);
  if (set === undefined) {
    set = new Set();
    changeListeners.set(backend, set);
  }
  set.add(listener);
  return () => set.delete(listener);
}

export function notifySchedulesChanged(backend: object): void {
  for (const listener of changeListeners.get(backend) ?? []) listener();
}

/** The schedule and tick a job was enqueued for (its `meta.schedule`), or null for a job no schedule made. */
export function tickMetaOf(job: { meta: { [key: string]: Json } | null }): TickMeta | null {
  const value = job.meta?.schedule;
  if (typeof value !== "object" || value === null || Array.isArray(value)) return null;
  const { id, tick, since } = value;
  return typeof id === "string" && typeof tick === "string" && typeof since === "string" ? { id, tick, since } : null;
}

/** Every schedule (of `queue`) with its next run time, read from a store at its own clock's now. */
export async function scheduleInfos(
  store: { scheduleList(queue?: string): Promise<StoredSchedule[]>; now(): Promise<number> },
  queue?: string,
): Promise<ScheduleInfo[]> {
  const [list, now] = await Promise.all([store.scheduleList(queue), store.now()]);
  return list.map((s) => ({ ...s, nextRunAt: nextRunAt(s, now) }));
}
