import { MAX_TIMER_MS } from "./clock.js";
import { InvalidInputError } from "./errors.js";
import { shown } from "./shown.js";

export { shown };

/** The longest delay, timeout, lease, backoff or retention anything takes: ten years, in ms. */
export const MAX_DELAY = 10 * 365 * 24 * 3600 * 1000;

export { MAX_TIMER_MS };

/** Ceiling of the counts and limits of maintenance calls (they land in 32-bit columns and script arguments). */
export const MAX_COUNT = 1_000_000_000;

/** Checks of numeric options, shared by the backends and the runtime so their errors read alike. */

/** A period or wait the runtime runs on a timer, ms: a whole number from `min` to MAX_TIMER_MS. */
export function timerMs(field: string, value: unknown, min = 1): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > MAX_TIMER_MS) {
    throw new InvalidInputError(
      `${field} must be a whole number of milliseconds from ${min} to ${MAX_TIMER_MS} (about 24.8 days, the longest timer Node.js runs); got ${shown(value)}`,
    );
  }
  return value;
}

/**
 * The keys of an options object whose value is not undefined: a key set to undefined is a key
 * left out (`{ ...base, delayMs: undefined }`), for every check of unknown keys.
 */
export function presentKeys(value: object): string[] {
  return Object.keys(withoutUndefined(value));
}

/** `value` without its keys set to undefined: for merging options over defaults, where such a key is left out. */
export function withoutUndefined<T extends object>(value: T | undefined): Partial<T> {
  if (value === undefined) return {};
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/**
 * An options object (`what` names it in errors), or undefined. Anything else, and any key it does
 * not know, is refused: a misspelt option (`concurency`) would otherwise be ignored and its
 * default used without a word. `known` is a record of every key, so the compiler keeps it
 * complete when an option is added.
 */
export function checkOptionKeys<T extends object>(what: string, value: T | undefined, known: Record<keyof T, true>): T | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new InvalidInputError(`${what} must be an object; got ${shown(value)}`);
  }
  for (const key of presentKeys(value)) {
    if (!Object.hasOwn(known, key)) throw new InvalidInputError(`unknown ${what} key "${key}"; known keys: ${Object.keys(known).join(", ")}`);
  }
  return value;
}

export function positiveInt(field: string, value: number): number {
  if (!Number.isInteger(value) || value < 1) {
    throw new InvalidInputError(`${field} must be an integer >= 1; got ${shown(value)}`);
  }
  return value;
}

/** An integer from `min` to `max`, for counts and limits a store keeps in a 32-bit column. */
export function intInRange(field: string, value: number, min: number, max: number): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new InvalidInputError(`${field} must be an integer from ${min} to ${max}; got ${shown(value)}`);
  }
  return value;
}

export function nonNegativeInt(field: string, value: number): number {
  if (!Number.isInteger(value) || value < 0) {
    throw new InvalidInputError(`${field} must be an integer >= 0; got ${shown(value)}`);
  }
  return value;
}

/**
 * `Failure.retryDelayMs`, checked once for every backend (by the facade, src/backend/checked.ts):
 * a number of ms from 0 to `MAX_DELAY` (ten years; fractions dropped), or null for "dead". NaN,
 * Infinity, negatives and larger delays are refused, never clamped or stored.
 */
export function retryDelayMs(value: unknown): number | null {
  if (value === null) return null;
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0 || value > MAX_DELAY) {
    throw new InvalidInputError(`retryDelayMs must be a number of milliseconds from 0 to ${MAX_DELAY}, or null; got ${shown(value)}`);
  }
  return Math.floor(value);
}

/**
 * A duration in ms: from 1 to `MAX_DELAY` (ten years); fractions are dropped (time columns hold
 * integers).
 */
export function positiveMs(field: string, value: number): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 1 || value > MAX_DELAY) {
    throw new InvalidInputError(`${field} must be a number of milliseconds from 1 to ${MAX_DELAY}; got ${shown(value)}`);
  }
  return Math.floor(value);
}

/**
 * `text` cut to at most `max` UTF-16 code units, ending with `mark` when it was cut, and never
 * between the two halves of a surrogate pair (half of one is not text).
 */
export function cutText(text: string, max: number, mark: string): string {
  if (text.length <= max) return text;
  let end = max - mark.length;
  const last = text.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--;
  return text.slice(0, end) + mark;
}

/** Anything thrown, as an Error; a non-Error value is described in the message. */
export function toError(value: unknown): Error {
  if (value instanceof Error) return value;
  return new Error(typeof value === "string" ? value : `non-Error thrown: ${shown(value)}`);
}
