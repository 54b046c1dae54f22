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

/** A duration in ms: positive and finite; fractions are dropped (time columns hold integers). */
export function positiveMs(field: string, value: number): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 1) {
    throw new InvalidInputError(`${field} must be a number of milliseconds >= 1; got ${JSON.stringify(value)}`);
  }
  return Math.floor(value);
}

/** Anything thrown, as an Error. */
export function toError(value: unknown): Error {
  return value instanceof Error ? value : new Error(String(value));
}
