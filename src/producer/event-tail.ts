/**
 * One reader of the store's event log per process, shared by everything in the process that
 * reacts to job events as they happen (the HTTP job streams' JobWatcher, the dashboard's live
 * views): however many SSE clients are open, the log is read by one loop per backend, and each
 * event is handed to every subscriber in the process (fan-out).
 *
 * Stores without an event log (`capabilities.eventLog` false, e.g. RabbitMQ) have no tail:
 * `EventTail.of` answers null and callers fall back to polling the store.
 */
import type { Backend } from "../backend/contract.js";
import { toError } from "../core/checks.js";
import type { QueueEvent } from "../core/queue-events.js";
import { DEFAULT_EVENT_POLL_INTERVAL_MS, followEvents, requireEventLog } from "./events.js";

export type EventListener = (event: QueueEvent) => void;

/** After a store error the tail reads again this much later, ms (from where it stopped). */
const RETRY_AFTER_ERROR_MS = 1_000;

const tails = new WeakMap<Backend, EventTail>();

export class EventTail {
  /**
   * The process's tail of `backend`'s event log, or null when the store keeps none. The first
   * caller's `pollIntervalMs` (default 250) sets how often the log is read while idle (a store
   * wake-up reads it at once).
   */
  static of(backend: Backend, options: { pollIntervalMs?: number; onError?: (error: unknown) => void } = {}): EventTail | null {
    if (backend.capabilities.eventLog !== true || !backend.readEvents || !backend.latestEventCursor) return null;
    let tail = tails.get(backend);
    if (!tail) {
      tail = new EventTail(backend, options.pollIntervalMs ?? DEFAULT_EVENT_POLL_INTERVAL_MS, options.onError ?? (() => {}));
      tails.set(backend, tail);
    }
    return tail;
  }

  private readonly listeners = new Set<EventListener>();
  private abort: AbortController | null = null;
  /** Settles once the running loop has its starting position: events after it reach listeners. */
  private started: Promise<void> = Promise.resolve();

  private constructor(
    private readonly backend: Backend,
    private readonly pollIntervalMs: number,
    private readonly onError: (error: unknown) => void,
  ) {}

  /** Subscribers now (for tests and diagnostics). */
  get size(): number {
    return this.listeners.size;
  }

  /**
   * Calls `listener` with every event logged after the returned promise settles, until the
   * returned function is called. The loop runs while anyone listens.
   */
  async subscribe(listener: EventListener): Promise<() => void> {
    this.listeners.add(listener);
    if (this.abort === null) this.start();
    const unsubscribe = () => {
      if (!this.listeners.delete(listener) || this.listeners.size > 0) return;
      this.abort?.abort();
      this.abort = null;
    };
    try {
      await this.started;
    } catch (error) {
      unsubscribe();
      throw error;
    }
    return unsubscribe;
  }

  private start(): void {
    const abort = new AbortController();
    this.abort = abort;
    const log = requireEventLog(this.backend);
    const first = log.latestEventCursor();
    this.started = first.then(() => undefined);
    void (async () => {
      let after: string;
      try {
        after = await first;
      } catch (error) {
        if (this.abort === abort) this.abort = null;
        this.onError(error);
        return;
      }
      while (!abort.signal.aborted) {
        try {
          for await (const event of followEvents(this.backend, { after, pollIntervalMs: this.pollIntervalMs, signal: abort.signal })) {
            after = event.id;
            for (const listener of [...this.listeners]) {
              try {
                listener(event);
              } catch (error) {
                this.onError(error);
              }
            }
          }
        } catch (error) {
          this.onError(toError(error));
          await new Promise((resolve) => setTimeout(resolve, RETRY_AFTER_ERROR_MS));
        }
      }
    })();
  }
}
