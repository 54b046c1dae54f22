/**
 * Reading the store's event log as a live stream: `queue.events()` and `GET /v1/events` both go
 * through `followEvents`, so they agree on filtering, resuming and stopping.
 */
import type { Backend } from "../backend/contract.js";
import { checkOptionKeys, shown, timerMs } from "../core/checks.js";
import { ConveyorError, InvalidInputError } from "../core/errors.js";
import { EVENT_READ_LIMIT, matchesEventFilter, QUEUE_EVENT_TYPES, type QueueEvent, type QueueEventFilter } from "../core/queue-events.js";

export interface FollowEventsOptions extends QueueEventFilter {
  /**
   * Resume after this event id (a `QueueEvent.id` seen before). Default: from now on, events
   * that happen after the call. An id older than the log's retention (24 h and 100 000 events by
   * default, see `pruneEvents`) resumes at the oldest event still kept.
   */
  after?: string;
  /** How often the log is read while nothing new arrives, ms. Default 250. */
  pollIntervalMs?: number;
  /** Ends the stream (the iterator finishes) when aborted. Default: none (break out of the loop instead). */
  signal?: AbortSignal;
}

/** `pollIntervalMs`'s default. */
export const DEFAULT_EVENT_POLL_INTERVAL_MS = 250;

const FOLLOW_EVENTS_OPTION_KEYS: Record<keyof FollowEventsOptions, true> = {
  queues: true,
  names: true,
  jobId: true,
  types: true,
  after: true,
  pollIntervalMs: true,
  signal: true,
};

/**
 * The options of an event stream, checked when it is asked for (a generator's body runs only at
 * its first `next()`): a filter that can match nothing (a misspelt type) would otherwise wait
 * forever without a word.
 */
export function checkFollowEventsOptions(options: FollowEventsOptions): void {
  checkOptionKeys("events() option", options, FOLLOW_EVENTS_OPTION_KEYS);
  const strings = (field: string, value: unknown): void => {
    if (value !== undefined && (!Array.isArray(value) || value.some((v) => typeof v !== "string"))) {
      throw new InvalidInputError(`events() option ${field} must be an array of strings; got ${shown(value)}`);
    }
  };
  strings("queues", options.queues);
  strings("names", options.names);
  strings("types", options.types);
  const unknownType = options.types?.find((type) => !(QUEUE_EVENT_TYPES as readonly string[]).includes(type));
  if (unknownType !== undefined) {
    throw new InvalidInputError(`events() option types: unknown event type ${shown(unknownType)}; the types are ${QUEUE_EVENT_TYPES.join(", ")}`);
  }
  if (options.jobId !== undefined && typeof options.jobId !== "string")
    throw new InvalidInputError(`events() option jobId must be a job id; got ${shown(options.jobId)}`);
  if (options.after !== undefined && typeof options.after !== "string") {
    throw new InvalidInputError(`events() option after must be an event id (a QueueEvent's id, a string); got ${shown(options.after)}`);
  }
  if (options.pollIntervalMs !== undefined) timerMs("events() option pollIntervalMs", options.pollIntervalMs);
}

/** Refuses a backend without an event log, saying which ones have one. */
export function requireEventLog(backend: Backend): Required<Pick<Backend, "readEvents" | "latestEventCursor">> {
  if (backend.capabilities.eventLog !== true || !backend.readEvents || !backend.latestEventCursor) {
    throw new ConveyorError(
      `${backend.description} keeps no event log, so there is no cross-process event stream on it (SQLite, PostgreSQL and Redis have one, ` +
        `unless their table prefix's, schema's or key prefix's log is turned off with eventLog: false); use worker.on(…) events in the worker process instead`,
    );
  }
  return {
    readEvents: (cursor, limit) => backend.readEvents!(cursor, limit),
    latestEventCursor: () => backend.latestEventCursor!(),
  };
}

/**
 * The events matching `options` from the log, oldest first, for as long as the caller iterates.
 * Reads pages of up to 500 events back to back while the log has more, then every
 * `pollIntervalMs`; a store wake-up (a job became claimable) reads at once. A store error ends
 * the iteration with that error (the last event's id resumes it).
 */
export async function* followEvents(backend: Backend, options: FollowEventsOptions = {}): AsyncGenerator<QueueEvent, void, undefined> {
  checkFollowEventsOptions(options);
  const log = requireEventLog(backend);
  const pollIntervalMs = options.pollIntervalMs ?? DEFAULT_EVENT_POLL_INTERVAL_MS;
  const filter: QueueEventFilter = { queues: options.queues, names: options.names, jobId: options.jobId, types: options.types };
  const { signal } = options;
  let cursor = options.after ?? (await log.latestEventCursor());
  let wake: (() => void) | null = null;
  const unsubscribe = backend.subscribe(() => wake?.());
  const onAbort = () => wake?.();
  signal?.addEventListener("abort", onAbort);
  try {
    while (!signal?.aborted) {
      const page = await log.readEvents(cursor, EVENT_READ_LIMIT);
      cursor = page.cursor;
      for (const event of page.events) {
        if (signal?.aborted) return;
        if (matchesEventFilter(event, filter)) yield event;
      }
      if (page.events.length === EVENT_READ_LIMIT) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, pollIntervalMs);
        function done() {
          clearTimeout(timer);
          wake = null;
          resolve();
        }
        wake = done;
      });
    }
  } finally {
    signal?.removeEventListener("abort", onAbort);
    unsubscribe();
  }
}
