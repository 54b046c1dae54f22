import { InvalidInputError } from "./errors.js";

/** Checks of numeric options, shared by the backends and the runtime so their errors read alike. */

export function positiveInt(field: string, value: number): number {
  if (!Number.isInteger(value) || value < 1) {
    throw new InvalidInputError(`${field} must be an integer >= 1; got ${JSON.stringify(value)}`);
  }
  return value;
}

export function nonNegativeInt(field: string, value: number): number {
  if (!Number.isInteger(value) || value < 0) {
    throw new InvalidInputError(`${field} must be an integer >= 0; got ${JSON.stringify(value)}`);
  }
  return value;
}

/**
 * `Failure.retryDelayMs`, checked once for every backend: a finite number of ms >= 0 (fractions
 * dropped), or null for "dead". NaN, Infinity and negatives are refused, never clamped or stored.
 */
export function retryDelayMs(value: unknown): number | null {
  if (value === null) return null;
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw new InvalidInputError(`retryDelayMs must be a number of milliseconds >= 0, or null; got ${typeof value === "number" ? String(value) : JSON.stringify(value) ?? typeof value}`);
  }
  return Math.floor(value);
}

/** A duration in ms: positive and finite; fractions are dropped (time columns hold integers). */
export function positiveMs(field: string, value: number): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 1) {
    throw new InvalidInputError(`${field} must be a number of milliseconds >= 1; got ${JSON.stringify(value)}`);
  }
  return Math.floor(value);
}

/** Anything thrown, as an Error; a non-Error value is described in the message. */
export function toError(value: unknown): Error {
  if (value instanceof Error) return value;
  return new Error(typeof value === "string" ? value : `non-Error thrown: ${safeString(value)}`);
}

function safeString(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
