import { InvalidInputError } from "./errors.js";
import { shown } from "./shown.js";

export { shown };

/** The longest delay, timeout, lease, backoff or retention anything takes: ten years, in ms. */
export const MAX_DELAY = 10 * 365 * 24 * 3600 * 1000;

/** Checks of numeric options, shared by the backends and the runtime so their errors read alike. */

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

/** Anything thrown, as an Error; a non-Error value is described in the message. */
export function toError(value: unknown): Error {
  if (value instanceof Error) return value;
  return new Error(typeof value === "string" ? value : `non-Error thrown: ${shown(value)}`);
}
