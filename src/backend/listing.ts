/**
 * The rules of `Backend.list` arguments, checked once for every backend: page size, offset,
 * state, creation-time bounds, and the keyset cursor (which needs a queue: stores number jobs
 * per queue, so "after this job" only means something within one).
 */
import { nonNegativeInt, positiveInt } from "../core/checks.js";
import { InvalidInputError } from "../core/errors.js";
import { JOB_STATES } from "../core/job.js";
import { DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT, type ListFilter, type Page } from "./contract.js";

export interface ListArgs {
  limit: number;
  offset: number;
  /** The cursor job's id, when paging by keyset. */
  after: string | null;
  createdFrom: number | null;
  createdUntil: number | null;
}

function time(field: string, value: number | undefined): number | null {
  if (value === undefined) return null;
  if (!Number.isSafeInteger(value) || value < 0) throw new InvalidInputError(`${field} must be a time in ms since the epoch (a non-negative integer); got ${JSON.stringify(value)}`);
  return value;
}

export function checkListArgs(filter: ListFilter, page: Page): ListArgs {
  const limit = Math.min(MAX_PAGE_LIMIT, positiveInt("page.limit", page.limit ?? DEFAULT_PAGE_LIMIT));
  const offset = nonNegativeInt("page.offset", page.offset ?? 0);
  if (filter.state !== undefined && !JOB_STATES.includes(filter.state)) {
    throw new InvalidInputError(`unknown job state ${JSON.stringify(filter.state)}; known: ${JOB_STATES.join(", ")}`);
  }
  const after = page.after ?? null;
  if (after !== null && (typeof after !== "string" || after === "")) throw new InvalidInputError("page.after must be the id of the last job of the previous page");
  if (after !== null && filter.queue === undefined) throw new InvalidInputError("page.after needs filter.queue: pages by cursor stay within one queue");
  return { limit, offset, after, createdFrom: time("filter.createdFrom", filter.createdFrom), createdUntil: time("filter.createdUntil", filter.createdUntil) };
}

/** Why a cursor job cannot be used, for `InvalidInputError`. */
export function staleCursor(after: string, queue: string): InvalidInputError {
  return new InvalidInputError(`page.after: job ${JSON.stringify(after)} is not in queue ${JSON.stringify(queue)} (deleted since, or never there); start again from the first page`);
}
