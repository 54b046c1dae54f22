/**
 * The dashboard's live updates: one Server-Sent Events stream per page.
 *
 * A page subscribes to one topic (the queue overview, one queue, one job). The hub reads the
 * store for each topic that has at least one open stream — however many browsers watch it — and
 * sends a `snapshot` event only when the answer changed.
 *
 * When it reads. With a store event log (`capabilities.eventLog`), the hub follows the log
 * through the process's one EventTail (shared with the HTTP job streams) and reads a topic when
 * an event concerns it, at most once per `intervalMs`; a topic with no events is still re-read
 * every `idleRefreshMs`, for what changes without a job event (waiting age, a pause, the charts).
 * Without one (RabbitMQ) it reads each topic once per `intervalMs`. So ten people looking at one
 * queue cost one store read per change (or per second at most), and an idle page costs nothing
 * but a heartbeat comment every 15 s and the idle refresh.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { QueueEvent } from "../core/queue-events.js";
import type { EventTail } from "../producer/event-tail.js";

export interface LiveSettings {
  /**
   * How often a watched topic is read from the store, ms; with a store event log, at most this
   * often, when events concern it. Default 1 000.
   */
  intervalMs: number;
  /** With a store event log: a watched topic is re-read at least this often, ms. Default 15 000. */
  idleRefreshMs: number;
  /** Comment lines this often keep proxies from closing idle streams, ms. Default 15 000. */
  heartbeatMs: number;
  /** Streams open at once; more are refused with 503. Default 500. */
  maxStreams: number;
}

interface Topic {
  key: string;
  read: () => Promise<unknown>;
  /** Whether an event may change this topic's snapshot; null when no job event tells (it is read every `intervalMs`). */
  concerns: ((event: QueueEvent) => boolean) | null;
  streams: Set<ServerResponse>;
  timer: NodeJS.Timeout | null;
  last: string | null;
  busy: boolean;
  /** An event arrived while a read was running or too soon after one: read again. */
  again: boolean;
  /** The delayed read of `again`, when one is set. */
  soon: NodeJS.Timeout | null;
  lastReadAt: number;
}

export class LiveHub {
  private readonly topics = new Map<string, Topic>();
  private streamCount = 0;
  private unsubscribe: Promise<() => void> | null = null;

  /** `tail`: the process's reader of the store's event log, or null when the store has none. */
  constructor(
    private readonly settings: LiveSettings,
    private readonly onError: (error: unknown) => void,
    private readonly tail: EventTail | null = null,
  ) {}

  get full(): boolean {
    return this.streamCount >= this.settings.maxStreams;
  }

  /**
   * Streams `topic` to `res` until the client goes away. `read` is called for the first
   * subscriber of a key and reused by the next ones: the key must capture everything `read`
   * depends on (including what the principal may see). `concerns` tells which events may change
   * what `read` answers; null for a topic no job event tells about (the relay's outbox), which is
   * then read every `intervalMs` as without an event log.
   */
  open(
    req: IncomingMessage,
    res: ServerResponse,
    key: string,
    read: () => Promise<unknown>,
    headers: Record<string, string>,
    concerns: ((event: QueueEvent) => boolean) | null = () => true,
  ): void {
    res.writeHead(200, {
      ...headers,
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-store",
      connection: "keep-alive",
      "x-accel-buffering": "no",
    });
    res.write(`retry: 2000\n\n`);
    let topic = this.topics.get(key);
    if (!topic) {
      topic = { key, read, concerns, streams: new Set(), timer: null, last: null, busy: false, again: false, soon: null, lastReadAt: 0 };
      this.topics.set(key, topic);
    }
    topic.streams.add(res);
    this.streamCount++;
    const current = topic;
    if (current.last !== null) res.write(current.last);
    if (current.timer === null) {
      const eventDriven = this.tail !== null && current.concerns !== null;
      current.timer = setInterval(() => void this.poll(current), eventDriven ? this.settings.idleRefreshMs : this.settings.intervalMs);
      void this.poll(current);
    }
    if (this.tail) this.unsubscribe ??= this.listen(this.tail);
    const heartbeat = setInterval(() => res.write(": keep-alive\n\n"), this.settings.heartbeatMs);
    const close = () => {
      clearInterval(heartbeat);
      if (!current.streams.delete(res)) return;
      this.streamCount--;
      if (current.streams.size === 0) {
        this.stopTopic(current);
        this.topics.delete(current.key);
        if (this.topics.size === 0) this.stopListening();
      }
    };
    req.on("close", close);
    res.on("close", close);
  }

  /** Ends every stream (server shutdown). */
  close(): void {
    for (const topic of this.topics.values()) {
      this.stopTopic(topic);
      for (const res of topic.streams) res.end();
    }
    this.topics.clear();
    this.streamCount = 0;
    this.stopListening();
  }

  private stopTopic(topic: Topic): void {
    if (topic.timer) clearInterval(topic.timer);
    if (topic.soon) clearTimeout(topic.soon);
    topic.timer = topic.soon = null;
  }

  private listen(tail: EventTail): Promise<() => void> {
    const subscribed = tail.subscribe((event) => {
      for (const topic of this.topics.values()) if (topic.concerns?.(event)) this.readSoon(topic);
    });
    subscribed.then(
      // Whatever changed between a topic's first read and the tail's start: read once more.
      () => {
        for (const topic of this.topics.values()) this.readSoon(topic);
      },
      (error: unknown) => {
        this.onError(error);
        this.unsubscribe = null;
      },
    );
    return subscribed;
  }

  private stopListening(): void {
    const unsubscribe = this.unsubscribe;
    this.unsubscribe = null;
    void unsubscribe?.then(
      (stop) => stop(),
      () => {},
    );
  }

  /** Reads `topic` now, or once `intervalMs` has passed since its last read, or after the running one. */
  private readSoon(topic: Topic): void {
    if (topic.timer === null) return; // closed
    const wait = topic.lastReadAt + this.settings.intervalMs - Date.now();
    if (topic.busy || wait > 0) {
      topic.again = true;
      if (!topic.busy && topic.soon === null) {
        topic.soon = setTimeout(() => {
          topic.soon = null;
          void this.poll(topic);
        }, wait);
      }
      return;
    }
    void this.poll(topic);
  }

  private async poll(topic: Topic): Promise<void> {
    // A slow store must not pile reads up: skip a beat instead.
    if (topic.busy) return;
    if (topic.soon) clearTimeout(topic.soon);
    topic.soon = null;
    topic.busy = true;
    topic.again = false;
    topic.lastReadAt = Date.now();
    try {
      const value = await topic.read();
      const frame = `event: snapshot\ndata: ${JSON.stringify(value)}\n\n`;
      if (frame === topic.last) return;
      topic.last = frame;
      for (const res of topic.streams) res.write(frame);
    } catch (error) {
      this.onError(error);
    } finally {
      topic.busy = false;
      if (topic.again) this.readSoon(topic);
    }
  }
}
