/**
 * Typed store errors at the driver boundary. Each backend says which of its driver's errors mean
 * "unreachable or busy, try again" (by error codes, never by matching messages of other layers),
 * and rethrows those as `StoreUnavailableError`; every other error passes through unchanged.
 */
import { StoreUnavailableError } from "../core/errors.js";

/** Socket-level failures, as Node reports them for any TCP store. */
export const SOCKET_ERROR_CODES: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EAI_AGAIN",
  "EPIPE",
  "ENOTFOUND",
]);

/** The `code` of `error`, of its causes and of an AggregateError's errors (Node's happy-eyeballs connect). */
export function errorCodes(error: unknown): string[] {
  const codes: string[] = [];
  const visit = (e: unknown, depth: number): void => {
    if (e === null || typeof e !== "object" || depth > 5) return;
    const { code, cause, errors } = e as { code?: unknown; cause?: unknown; errors?: unknown };
    if (typeof code === "string") codes.push(code);
    if (Array.isArray(errors)) for (const x of errors) visit(x, depth + 1);
    visit(cause, depth + 1);
  };
  visit(error, 0);
  return codes;
}

/** `error` as a StoreUnavailableError when `unavailable` says so (already typed errors pass). */
export function asStoreError(error: unknown, store: string, unavailable: (error: unknown) => boolean): unknown {
  if (error instanceof StoreUnavailableError) return error;
  return unavailable(error) ? new StoreUnavailableError(store, { cause: error }) : error;
}
