/**
 * Reading the store's event log as a live stream: `queue.events()` and `GET /v1/events` both go
 * through `followEvents`, so they agree on filtering, resuming and stopping.
 */
import type { Backend } from "../backend/contract.js";
import { positiveMs } from "../core/checks.js";
import { ConveyorError } from "../core/errors.js";
import { EVENT_READ_LIMIT, matchesEventFilter, type QueueEvent, type QueueEventFilter } from "../core/queue-events.js";

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
  const log = requireEventLog(backend);
  const pollIntervalMs = positiveMs("pollIntervalMs", options.pollIntervalMs ?? DEFAULT_EVENT_POLL_INTERVAL_MS);
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
