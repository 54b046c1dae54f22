/**
 * Errors are values with names. Handlers throw the first three to steer what happens next; the
 * runtime raises the others. Every message says what to do about it.
 */
import { shown } from "./shown.js";

/** Base class of every error Conveyor raises itself. */
export class ConveyorError extends Error {
  override name = "ConveyorError";
}

/**
 * Throw from a handler when retrying cannot help (validation failure, "user not found", a 4xx):
 * the job goes straight to the dead-letter state with this error, whatever attempts remain.
 */
export class UnrecoverableError extends ConveyorError {
  override name = "UnrecoverableError";
}

/**
 * Throw from a handler to retry after a delay you choose (a rate limit's Retry-After, say) instead
 * of the job's backoff. The attempt still counts, so a job cannot postpone itself forever.
 *
 * With `{ pause: "queue" }` the whole queue is held for the delay as well: no job of it starts on
 * any worker until then (a 429 from downstream says the service is saturated, not this job). With
 * `{ pause: "key" }` only the jobs sharing this job's limiter key are held (job option `limiter`;
 * a job without one holds nothing). The hold lives in the store (`backend.holdQueue`); it ends on
 * its own.
 */
export class RetryLater extends ConveyorError {
  override name = "RetryLater";
  /** What else waits out the delay: "queue" (the job's whole queue) or "key" (its limiter key). Default: only this job. */
  readonly pause: "queue" | "key" | undefined;
  /** Delay before the next attempt (and of the hold, with `pause`), in milliseconds; a negative one is 0. */
  readonly delayMs: number;
  constructor(
    /**
     * Delay before the next attempt (and of the hold, with `pause`), in milliseconds. A negative
     * delay (a deadline just passed, `until - Date.now()`) means at once.
     */
    delayMs: number,
    messageOrOptions?: string | RetryLaterOptions,
  ) {
    // NaN (a Retry-After in its HTTP-date form read as a number) or an infinite delay would
    // otherwise become a retry at once (decideRetry's floor), hammering what asked to wait.
    if (typeof delayMs !== "number" || !Number.isFinite(delayMs)) {
      throw new InvalidInputError(`RetryLater takes a delay in milliseconds, a finite number; got ${shown(delayMs)}`);
    }
    const delay = Math.max(0, delayMs);
    const options = typeof messageOrOptions === "string" ? { message: messageOrOptions } : (messageOrOptions ?? {});
    super(options.message ?? `retry requested in ${delay} ms${options.pause ? ` (${options.pause} held)` : ""}`);
    this.delayMs = delay;
    if (options.pause !== undefined && options.pause !== "queue" && options.pause !== "key") {
      throw new InvalidInputError(`RetryLater option pause must be "queue", "key" or left out; got ${shown(options.pause)}`);
    }
    this.pause = options.pause;
  }
}

/** The options form of RetryLater's second argument. */
export interface RetryLaterOptions {
  /**
   * Hold, fleet-wide for the delay, the job's whole queue ("queue") or every job sharing its
   * limiter key ("key"). Default: only this job waits.
   */
  pause?: "queue" | "key";
  /** The error message stored with the attempt. Default "retry requested in <delayMs> ms". */
  message?: string;
}

/** The handler ran longer than the job's `timeoutMs`. Counts as a failed attempt and is retried. */
export class JobTimeoutError extends ConveyorError {
  override name = "JobTimeoutError";
  constructor(readonly timeoutMs: number) {
    super(
      `the handler ran longer than its timeout of ${timeoutMs} ms; raise timeoutMs for this job ` + `or make the handler honour ctx.signal and finish sooner`,
    );
  }
}

/**
 * This worker no longer holds the job's lease (it expired, the job was cancelled, or another
 * worker took it over). The handler's signal is aborted with it and its result is discarded.
 */
export class LeaseLostError extends ConveyorError {
  override name = "LeaseLostError";
  constructor(
    readonly jobId: string,
    readonly reason: LeaseLossReason,
  ) {
    super(
      reason === "cancelled"
        ? `job ${jobId} was cancelled while running; its result will be discarded`
        : `lost the lease on job ${jobId} (${reason}); another worker may run it — keep handlers ` + `idempotent and heartbeats faster than leaseMs`,
    );
  }
}

export type LeaseLossReason = "cancelled" | "expired" | "gone";

/** The lease of a job that was still running when its worker shut down and was released. */
export class ShutdownError extends ConveyorError {
  override name = "ShutdownError";
  constructor() {
    super("the worker is shutting down; the job is released back to waiting without using an attempt");
  }
}

/** A job's payload failed its schema, at enqueue (thrown to the caller) or at run time (dead). */
export class PayloadValidationError extends UnrecoverableError {
  override name = "PayloadValidationError";
  constructor(
    readonly jobName: string,
    readonly issues: readonly ValidationIssue[],
  ) {
    super(`invalid payload for job "${jobName}": ` + issues.map((i) => `${i.path.length ? i.path.join(".") : "(root)"}: ${i.message}`).join("; "));
  }
}

export interface ValidationIssue {
  path: (string | number)[];
  message: string;
}

/** Bad input to the producer or the CLI: an unknown option, a wrong type, an oversize payload. */
export class InvalidInputError extends ConveyorError {
  override name = "InvalidInputError";
  /**
   * Which input was wrong, as a dotted path into the job a producer gives (`name`, `data`,
   * `options.runAt`, `options.backoff.delayMs` …), when the check knows it. The HTTP service
   * turns it into a JSON Pointer.
   */
  readonly field: string | undefined;
  constructor(message: string, options: { field?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.field = options.field;
  }
}

/**
 * A job id without a queue matched jobs in several queues (Redis keeps ids unique per queue).
 * Nothing was read or changed: name the queue.
 */
export class AmbiguousJobIdError extends ConveyorError {
  override name = "AmbiguousJobIdError";
  constructor(readonly jobId: string) {
    super(`job id ${JSON.stringify(jobId)} exists in several queues (job ids are unique per queue on this store); name the job's queue`);
  }
}

/**
 * The store cannot be reached or is too busy right now (connection refused or dropped, server
 * starting or shutting down, database locked). Nothing was decided: retrying later may work. The
 * backends throw it at their driver boundary, with the driver's error as `cause`; the HTTP
 * service answers 503 with Retry-After, and `conveyor worker` waits for the store.
 */
export class StoreUnavailableError extends ConveyorError {
  override name = "StoreUnavailableError";
  readonly retryable = true;
  constructor(
    /** The store, as `backend.description` names it. */
    readonly store: string,
    options: { cause: unknown },
  ) {
    super(`the job store ${store} is unreachable or busy (${describeCause(options.cause)}); retry shortly`, options);
  }
}

function describeCause(cause: unknown): string {
  if (cause instanceof Error) return cause.message.split("\n")[0]!.slice(0, 200) || cause.name;
  return String(cause).slice(0, 200);
}

/**
 * The error message of a job quarantined in `dead` after `stalls` lease expiries in a row. Backends
 * that build it inside the store pass a placeholder ("{stalls}", "__STALLS__") and substitute there.
 */
export function quarantineMessage(stalls: number | string): string {
  return (
    `quarantined after ${stalls} lease expiries in a row: the job keeps crashing or stalling its workers. ` +
    `Inspect its payload and history, fix the handler, then replay it`
  );
}

/** The job was quarantined: its lease expired too many times in a row (it keeps killing workers). */
export class LeaseExpiredError extends ConveyorError {
  override name = "LeaseExpiredError";
  constructor(message = "the lease expired before the worker settled the job (worker crashed, stalled or was partitioned)") {
    super(message);
  }
}

/**
 * The store cannot do this at all (a capability it lacks, e.g. looking up a waiting job by id on
 * RabbitMQ, which keeps no index). Not a fault and not retryable: the message says what the store
 * can do instead. The HTTP service answers 501 with the message.
 */
export class UnsupportedByStoreError extends ConveyorError {
  override name = "UnsupportedByStoreError";
  constructor(
    /** The store, as `backend.description` names it. */
    readonly store: string,
    /** The capability it lacks (a `Capabilities` field). */
    readonly capability: string,
    message: string,
  ) {
    super(`${store} cannot ${message}`);
  }
}
