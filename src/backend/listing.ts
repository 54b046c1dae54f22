/**
 * The rules of `Backend.list` arguments, checked once for every backend: page size, offset,
 * state, creation-time bounds, and the keyset cursor (which needs a queue: stores number jobs
 * per queue, so "after this job" only means something within one).
 */
import { intInRange, nonNegativeInt, positiveInt, shown } from "../core/checks.js";
import { InvalidInputError } from "../core/errors.js";
import { JOB_STATES, type JobRecord } from "../core/job.js";
import { checkName } from "../core/spec.js";
import { DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT, type ListFilter, type Page } from "./contract.js";

export interface ListArgs {
  limit: number;
  offset: number;
  /** The cursor job's id, when paging by keyset. */
  after: string | null;
  /** The reverse cursor job's id (the previous page: newer jobs), when paging back by keyset. */
  before: string | null;
  createdFrom: number | null;
  createdUntil: number | null;
}

function time(field: string, value: number | undefined): number | null {
  if (value === undefined) return null;
  if (!Number.isSafeInteger(value) || value < 0)
    throw new InvalidInputError(`${field} must be a time in ms since the epoch (a non-negative integer); got ${shown(value)}`);
  return value;
}

/** The deepest `page.offset`: far past any page an operator reads (keyset cursors page deeper), and an integer every store binds. */
export const MAX_PAGE_OFFSET = 1_000_000_000;

/**
 * `list`'s arguments checked (by the facade, ./checked.ts, once for every store), with the
 * defaults applied: a bad one is an InvalidInputError naming it.
 */
export function checkListArgs(filter: ListFilter, page: Page): ListArgs {
  if (typeof filter !== "object" || filter === null) throw new InvalidInputError(`the list filter must be an object; got ${shown(filter)}`);
  if (typeof page !== "object" || page === null) throw new InvalidInputError(`the list page must be an object; got ${shown(page)}`);
  const limit = Math.min(MAX_PAGE_LIMIT, positiveInt("page.limit", page.limit ?? DEFAULT_PAGE_LIMIT));
  const offset = intInRange("page.offset", page.offset ?? 0, 0, MAX_PAGE_OFFSET);
  if (filter.state !== undefined && !JOB_STATES.includes(filter.state)) {
    throw new InvalidInputError(`unknown job state ${JSON.stringify(filter.state)}; known: ${JOB_STATES.join(", ")}`);
  }
  for (const field of ["queue", "name"] as const) {
    const value: unknown = filter[field];
    if (value !== undefined && typeof value !== "string") throw new InvalidInputError(`filter.${field} must be a string; got ${shown(value)}`);
  }
  const after = page.after ?? null;
  if (after !== null && (typeof after !== "string" || after === ""))
    throw new InvalidInputError("page.after must be the id of the last job of the previous page");
  if (after !== null && filter.queue === undefined) throw new InvalidInputError("page.after needs filter.queue: pages by cursor stay within one queue");
  const before = page.before ?? null;
  if (before !== null && (typeof before !== "string" || before === ""))
    throw new InvalidInputError("page.before must be the id of the first job of the next page");
  if (before !== null && filter.queue === undefined) throw new InvalidInputError("page.before needs filter.queue: pages by cursor stay within one queue");
  if (before !== null && after !== null) throw new InvalidInputError("page.after and page.before exclude each other: give the cursor of the way you page");
  return {
    limit,
    offset,
    after,
    before,
    createdFrom: time("filter.createdFrom", filter.createdFrom),
    createdUntil: time("filter.createdUntil", filter.createdUntil),
  };
}

/** Why a cursor job cannot be used, for `InvalidInputError`. */
export function staleCursor(after: string, queue: string, field: "after" | "before" = "after"): InvalidInputError {
  return new InvalidInputError(
    `page.${field}: job ${JSON.stringify(after)} is not in queue ${JSON.stringify(queue)} (deleted since, or never there); start again from the first page`,
  );
}

/**
 * One page of `Backend.list` over dead letters read whole into memory (a broker's or a log's
 * dead-letter view keeps no index to page in: RabbitMQ, Kafka): those matching the filter's name
 * and creation window, newest finished first (ties by id, descending, as the SQL stores order
 * them), then the keyset cursor (`after`: older than that job; `before`: newer, the page just
 * before it), the offset and the limit. A cursor job that is gone is refused (staleCursor).
 */
export function pageDeadLetters(jobs: readonly JobRecord[], filter: ListFilter, args: ListArgs): JobRecord[] {
  const matching = jobs.filter(
    (job) =>
      (filter.name === undefined || job.name === filter.name) &&
      (args.createdFrom === null || job.createdAt >= args.createdFrom) &&
      (args.createdUntil === null || job.createdAt < args.createdUntil),
  );
  matching.sort((a, b) => (b.finishedAt ?? 0) - (a.finishedAt ?? 0) || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
  const cursor = (id: string, field: "after" | "before"): number => {
    const i = matching.findIndex((j) => j.id === id);
    if (i < 0) throw staleCursor(id, filter.queue!, field);
    return i;
  };
  if (args.before !== null) {
    const end = cursor(args.before, "before") - args.offset;
    return matching.slice(Math.max(0, end - args.limit), Math.max(0, end));
  }
  const from = (args.after === null ? 0 : cursor(args.after, "after") + 1) + args.offset;
  return matching.slice(from, from + args.limit);
}

/** The most jobs per state one `finishedWindow` call samples. */
export const MAX_FINISHED_SAMPLES = 1_000;

export interface FinishedWindowArgs {
  queue: string;
  fromMs: number;
  untilMs: number;
  sampleLimit: number;
}

/** The rules of `Backend.finishedWindow` arguments, checked once for every backend. */
export function checkFinishedWindowArgs(queue: string, fromMs: number, untilMs: number, sampleLimit: number): FinishedWindowArgs {
  const from = time("fromMs", fromMs)!;
  const until = time("untilMs", untilMs)!;
  if (fromMs === undefined || untilMs === undefined || until < from) {
    throw new InvalidInputError(`finishedWindow needs fromMs <= untilMs (ms since the epoch); got ${shown(fromMs)} and ${JSON.stringify(untilMs)}`);
  }
  const limit = nonNegativeInt("sampleLimit", sampleLimit);
  if (limit > MAX_FINISHED_SAMPLES) throw new InvalidInputError(`sampleLimit must be at most ${MAX_FINISHED_SAMPLES}; got ${limit}`);
  return { queue: checkName("queue", queue), fromMs: from, untilMs: until, sampleLimit: limit };
}

/**
 * `list`'s arguments as a store reads them: the defaults applied, nothing checked. The checking
 * facade (./checked.ts) has refused bad ones with {@link checkListArgs} before a store sees them.
 */
export function listArgsOf(filter: ListFilter, page: Page): ListArgs {
  return {
    limit: Math.min(MAX_PAGE_LIMIT, page.limit ?? DEFAULT_PAGE_LIMIT),
    offset: page.offset ?? 0,
    after: page.after ?? null,
    before: page.before ?? null,
    createdFrom: filter.createdFrom ?? null,
    createdUntil: filter.createdUntil ?? null,
  };
}
