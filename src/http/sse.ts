/**
 * Server-Sent Events of one job: every state change and progress report, resumable.
 *
 * Where events come from. Backends keep a job's current state plus the history of its finished
 * attempts, not an event log. The stream therefore derives the job's sequence of state changes
 * from the record (`transitions`): created, then for every attempt "active" and its outcome,
 * replays in between, and the current state. The sequence only ever grows at its end, so the
 * n-th change is the same whenever it is computed, by whichever server: that is what makes
 * `Last-Event-ID` work across reconnects and instances. A job that goes waiting -> active ->
 * completed between two polls still yields all three events.
 *
 * Event ids: `<n>` for the n-th state change; `<n>.<k>.<hash>` for the k-th progress report seen
 * after it, where `<hash>` fingerprints the progress value so a resumed stream does not repeat
 * it. Ids grow monotonically per job in the order (n, k).
 *
 * What is sampled. Progress is a stored value, not a log: a stream sends the latest value at
 * each poll, so several reports between two polls arrive as the last of them. A retried job
 * that is promoted from `scheduled` to `waiting` when its delay ends is not reported as a change
 * of its own (stores do not record when it happened); its next event is `active`.
 *
 * Reading. One `JobWatcher` per server reads `backend.get(id)` for every job that has at least
 * one open stream, however many streams watch it: when the store's event log reports an event
 * of the job (stores with `capabilities.eventLog`), else once per interval (default 200 ms).
 * Heartbeat comments (default every 15 s) keep proxies from closing idle streams. The stream
 * ends after the terminal event (completed, dead, cancelled); a client that reconnects after
 * that gets 204 No Content, which tells `EventSource` to stop reconnecting.
 */
import { createHash } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Backend } from "../backend/contract.js";
import { TERMINAL_STATES, type AttemptRecord, type JobRecord, type JobState } from "../core/job.js";
import type { Json } from "../core/json.js";
import type { QueueEvent } from "../core/queue-events.js";
import { EventTail } from "../producer/event-tail.js";
import { iso } from "./views.js";

/** Why the job entered a state. */
export type TransitionReason = "created" | "started" | "completed" | "retry-scheduled" | "dead" | "released" | "lease-expired" | "cancelled" | "replayed";

/** One state change of a job, as sent in a `state` event. */
export interface Transition {
  /** Position in the job's sequence of state changes, from 1: the event id. */
  seq: number;
  state: JobState;
  reason: TransitionReason;
  /** The attempt this change belongs to (0 before the first). */
  attempt: number;
  /** When it happened (ISO 8601), or null when the store does not record it (replays). */
  at: string | null;
  error?: { name: string; message: string };
  result?: Json;
}

/** The job's state changes so far, oldest first, derived from its record. */
export function transitions(job: JobRecord): Transition[] {
  const out: Transition[] = [];
  const push = (t: Omit<Transition, "seq">) => {
    out.push({ seq: out.length + 1, ...t });
  };
  const initial: JobState = job.history.length === 0 && job.replays === 0 && job.state === "scheduled" ? "scheduled" : "waiting";
  push({ state: initial, reason: "created", attempt: 0, at: iso(job.createdAt) });

  const history = job.history;
  let current: JobState = initial;
  for (let i = 0; i < history.length; i++) {
    const h = history[i]!;
    push({ state: "active", reason: "started", attempt: h.attempt, at: iso(h.startedAt) });
    const next = history[i + 1];
    const { state, reason } = outcome(h, next, job);
    push({ state, reason, attempt: h.attempt, at: iso(h.finishedAt), ...(h.error ? { error: { name: h.error.name, message: h.error.message } } : {}) });
    current = state;
    // A dead job that ran again was replayed in between.
    if (state === "dead" && (next !== undefined || job.state !== "dead")) {
      push({ state: "waiting", reason: "replayed", attempt: 0, at: null });
      current = "waiting";
    }
  }

  if (job.state === "active") {
    push({ state: "active", reason: "started", attempt: job.attempt, at: iso(job.startedAt) });
  } else if (TERMINAL_STATES.includes(job.state) && current !== job.state) {
    // Cancelled while waiting (no attempt to record it), or a store that keeps no history.
    const reason: TransitionReason = job.state === "completed" ? "completed" : job.state === "dead" ? "dead" : "cancelled";
    push({ state: job.state, reason, attempt: job.attempt, at: iso(job.finishedAt) });
  }

  const last = out[out.length - 1]!;
  if (last.state === job.state && job.state === "completed") last.result = job.result;
  if (last.state === job.state && job.state === "dead" && job.error) last.error = { name: job.error.name, message: job.error.message };
  return out;
}

function outcome(h: AttemptRecord, next: AttemptRecord | undefined, job: JobRecord): { state: JobState; reason: TransitionReason } {
  switch (h.outcome) {
    case "completed":
      return { state: "completed", reason: "completed" };
    case "failed":
      return { state: "scheduled", reason: "retry-scheduled" };
    case "dead":
      return { state: "dead", reason: "dead" };
    case "released":
      return { state: "waiting", reason: "released" };
    case "cancelled":
      return { state: "cancelled", reason: "cancelled" };
    case "lease-expired": {
      // Rescued to waiting (the next attempt number is higher), or quarantined in dead (then a
      // later attempt can only follow a replay, which resets the attempt counter).
      const dead = next !== undefined ? next.attempt <= h.attempt : job.state === "dead" || job.attempt < h.attempt;
      return dead ? { state: "dead", reason: "dead" } : { state: "waiting", reason: "lease-expired" };
    }
  }
}

/** One event to write: `state`, `progress` or `gone`. */
export interface StreamEvent {
  id: string | null;
  event: "state" | "progress" | "gone";
  data: unknown;
}

function progressHash(value: Json): string {
  return createHash("sha256").update(JSON.stringify(value)).digest("base64url").slice(0, 10);
}

/** An event id this stream sends: `<n>`, or `<n>.<k>.<hash>` for progress. */
const EVENT_ID = /^(\d{1,9})(?:\.(\d{1,9})\.([A-Za-z0-9_-]{1,32}))?$/;

/**
 * Where one client is in a job's event sequence. Built from `Last-Event-ID` (or nothing), it
 * turns each new record into the events that client has not seen.
 */
export class EventCursor {
  private seq = 0;
  private progressBase = 0;
  private progressCount = 0;
  private progressFingerprint: string | null = null;

  /**
   * Why `lastEventId` cannot resume a stream of `job`, or null when it can. A cursor past the
   * job's newest state change would skip every change up to it, the terminal one included, and
   * one that is no id of this stream would silently replay everything: both are refused, as
   * `GET /v1/events` refuses a cursor its store never issued.
   */
  static problemWith(lastEventId: string, job: JobRecord): string | null {
    const shown = JSON.stringify(lastEventId.slice(0, 64));
    const m = EVENT_ID.exec(lastEventId.trim());
    if (!m) return `Last-Event-ID ${shown} is not an event id of this stream (they look like "3" or "3.1.<hash>"); reconnect without it to get every event`;
    const newest = transitions(job).length;
    if (Number(m[1]) > newest) {
      return `Last-Event-ID ${shown} is beyond this job's newest event (${newest}): it was not sent for this job; reconnect without it to get every event`;
    }
    return null;
  }

  constructor(lastEventId?: string | null) {
    const m = lastEventId ? EVENT_ID.exec(lastEventId.trim()) : null;
    if (!m) return;
    this.seq = Number(m[1]);
    if (m[2] !== undefined) {
      this.progressBase = this.seq;
      this.progressCount = Number(m[2]);
      this.progressFingerprint = m[3]!;
    }
  }

  /** Events of `job` after this cursor, in order; advances the cursor past them. */
  advance(job: JobRecord): { events: StreamEvent[]; finished: boolean } {
    const all = transitions(job);
    const events: StreamEvent[] = [];
    const emitState = (t: Transition) => {
      events.push({ id: String(t.seq), event: "state", data: { jobId: job.id, ...t } });
      this.seq = t.seq;
    };
    let lastActive = 0;
    for (const t of all) if (t.state === "active") lastActive = t.seq;

    // Progress belongs to the latest attempt: send it after that attempt's "active" event and
    // before its outcome, and only to a client that has not seen the outcome yet.
    let progress: StreamEvent | null = null;
    if (job.progress !== null && lastActive > 0 && this.seq <= lastActive) {
      const fingerprint = progressHash(job.progress);
      const sameBase = this.progressBase === lastActive;
      if (!(sameBase && fingerprint === this.progressFingerprint)) {
        const k = sameBase ? this.progressCount + 1 : 1;
        progress = { id: `${lastActive}.${k}.${fingerprint}`, event: "progress", data: { jobId: job.id, attempt: job.attempt, progress: job.progress } };
        this.progressBase = lastActive;
        this.progressCount = k;
        this.progressFingerprint = fingerprint;
      }
    }
    for (const t of all) {
      if (t.seq <= this.seq) continue;
      if (progress && t.seq > lastActive) {
        events.push(progress);
        progress = null;
      }
      emitState(t);
    }
    if (progress) events.push(progress);
    return { events, finished: TERMINAL_STATES.includes(job.state) };
  }
}

/**
 * Reads the jobs that have open streams, one `get` per job however many streams watch it.
 *
 * With a store event log (`capabilities.eventLog`), a job is read when the log reports an event
 * of it (through the process's one EventTail, shared with every other live view), and otherwise
 * only every `RECHECK_INTERVALS` poll periods, for changes that log no event (a job deleted by
 * retention, or at once by `removeOnComplete` on the SQL stores). Without one (RabbitMQ) every
 * watched job is read once per poll period.
 */
export class JobWatcher {
  /** With an event log, an idle watched job is re-read every this many poll periods. */
  static readonly RECHECK_INTERVALS = 25;

  private readonly watched = new Map<string, Set<(job: JobRecord | null) => void>>();
  private readonly tail: EventTail | null;
  private unsubscribe: Promise<() => void> | null = null;
  /** Jobs to read at the next flush (keys of `watched`). */
  private readonly due = new Set<string>();
  private reading = false;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(
    private readonly backend: Backend,
    /** Poll period in ms (with an event log: how often the log is read while idle). */
    private readonly intervalMs: number,
    private readonly onError: (error: unknown) => void,
  ) {
    this.tail = EventTail.of(backend, { pollIntervalMs: intervalMs, onError });
  }

  /** Calls `listener` with the record of `queue`'s job `jobId` whenever it may have changed (null once it no longer exists). */
  watch(queue: string, jobId: string, listener: (job: JobRecord | null) => void): () => void {
    const key = JSON.stringify([queue, jobId]);
    let set = this.watched.get(key);
    if (!set) this.watched.set(key, (set = new Set()));
    set.add(listener);
    if (this.tail) {
      this.unsubscribe ??= this.tail.subscribe((event) => this.onEvent(event));
      // One read once the tail is listening closes the gap between the caller's own read and
      // the first event the tail delivers.
      this.unsubscribe.then(
        () => this.read([key]),
        (error: unknown) => {
          this.onError(error);
          this.unsubscribe = null;
        },
      );
    }
    this.schedule();
    return () => {
      const s = this.watched.get(key);
      if (!s) return;
      s.delete(listener);
      if (s.size === 0) this.watched.delete(key);
      if (this.watched.size === 0) this.stopListening();
    };
  }

  get size(): number {
    return this.watched.size;
  }

  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.watched.clear();
    this.stopListening();
  }

  private stopListening(): void {
    const unsubscribe = this.unsubscribe;
    this.unsubscribe = null;
    void unsubscribe?.then(
      (stop) => stop(),
      () => {},
    );
  }

  private onEvent(event: QueueEvent): void {
    const key = JSON.stringify([event.queue, event.jobId]);
    if (this.watched.has(key)) void this.read([key]);
  }

  private schedule(): void {
    if (this.timer || this.closed || this.watched.size === 0) return;
    const period = this.tail ? this.intervalMs * JobWatcher.RECHECK_INTERVALS : this.intervalMs;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.read([...this.watched.keys()]).finally(() => this.schedule());
    }, period);
  }

  /** Reads the given jobs (and any asked for meanwhile) and hands each record to its listeners. */
  private async read(keys: readonly string[]): Promise<void> {
    for (const key of keys) this.due.add(key);
    if (this.reading) return;
    this.reading = true;
    try {
      while (this.due.size > 0 && !this.closed) {
        const batch = [...this.due].filter((key) => this.watched.has(key));
        this.due.clear();
        const records = await Promise.all(
          batch.map((key) => {
            const [queue, id] = JSON.parse(key) as [string, string];
            return this.backend.get(id, queue).then(
              (job) => ({ ok: true as const, job }),
              (error: unknown) => {
                this.onError(error);
                return { ok: false as const };
              },
            );
          }),
        );
        batch.forEach((key, i) => {
          const r = records[i]!;
          if (!r.ok) return; // the store hiccupped: keep the streams, the next read tries again
          for (const listener of [...(this.watched.get(key) ?? [])]) listener(r.job);
        });
      }
    } finally {
      this.reading = false;
    }
  }
}

export interface StreamSettings {
  /** Comment lines every this many ms keep proxies from closing an idle stream. */
  heartbeatMs: number;
  /** `retry:` sent to clients: how long EventSource waits before reconnecting, ms. */
  retryMs: number;
}

/** An open events stream; `close` ends it (server shutdown). */
export interface OpenStream {
  readonly ended: boolean;
  close(): void;
}

/**
 * Writes a job's events to a hijacked response until the job finishes, the client leaves, or
 * `close()`. `initial` are the events computed before the stream opened.
 */
export function runEventStream(args: {
  req: IncomingMessage;
  res: ServerResponse;
  headers: Record<string, string>;
  job: JobRecord;
  cursor: EventCursor;
  watcher: JobWatcher;
  settings: StreamSettings;
  onEnd: () => void;
}): OpenStream {
  const { req, res, cursor, watcher, settings } = args;
  res.writeHead(200, {
    ...args.headers,
    "content-type": "text/event-stream; charset=utf-8",
    // no-transform: compression proxies must not buffer the stream.
    "cache-control": "no-cache, no-transform",
    connection: "keep-alive",
    // nginx buffers proxied responses unless told not to.
    "x-accel-buffering": "no",
  });
  res.write(`retry: ${settings.retryMs}\n\n`);

  let ended = false;
  let unwatch: (() => void) | null = null;
  const heartbeat = setInterval(() => {
    if (!ended) res.write(`: keep-alive ${new Date().toISOString()}\n\n`);
  }, settings.heartbeatMs);

  const end = () => {
    if (ended) return;
    ended = true;
    clearInterval(heartbeat);
    unwatch?.();
    if (!res.writableEnded) res.end();
    args.onEnd();
  };
  const write = (e: StreamEvent) => {
    res.write(`${e.id !== null ? `id: ${e.id}\n` : ""}event: ${e.event}\ndata: ${JSON.stringify(e.data)}\n\n`);
  };
  const deliver = (job: JobRecord | null) => {
    if (ended) return;
    // A job created after this one was deleted, reusing its id, is another job: this one is gone.
    if (job === null || job.createdAt !== args.job.createdAt) {
      write({ id: null, event: "gone", data: { jobId: args.job.id, detail: "the job no longer exists (deleted after its retention period)" } });
      end();
      return;
    }
    const { events, finished } = cursor.advance(job);
    for (const e of events) write(e);
    if (finished) end();
  };

  req.on("close", end);
  res.on("error", end);
  deliver(args.job);
  if (!ended) unwatch = watcher.watch(args.job.queue, args.job.id, deliver);
  return {
    get ended() {
      return ended;
    },
    close: end,
  };
}
