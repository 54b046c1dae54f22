/**
 * The dashboard's live updates: one Server-Sent Events stream per page.
 *
 * A page subscribes to one topic (the queue overview, one queue, one job). The hub polls the
 * store once per interval for each topic that has at least one open stream — however many
 * browsers watch it — and sends a `snapshot` event only when the answer changed. So ten people
 * looking at one queue cost one store read a second, and an idle page costs nothing but a
 * heartbeat comment every 15 s.
 */
import type { IncomingMessage, ServerResponse } from "node:http";

export interface LiveSettings {
  /** How often a watched topic is read from the store, ms. Default 1 000. */
  intervalMs: number;
  /** Comment lines this often keep proxies from closing idle streams, ms. Default 15 000. */
  heartbeatMs: number;
  /** Streams open at once; more are refused with 503. Default 500. */
  maxStreams: number;
}

interface Topic {
  key: string;
  read: () => Promise<unknown>;
  streams: Set<ServerResponse>;
  timer: NodeJS.Timeout | null;
  last: string | null;
  busy: boolean;
}

export class LiveHub {
  private readonly topics = new Map<string, Topic>();
  private streamCount = 0;

  constructor(
    private readonly settings: LiveSettings,
    private readonly onError: (error: unknown) => void,
  ) {}

  get full(): boolean {
    return this.streamCount >= this.settings.maxStreams;
  }

  /**
   * Streams `topic` to `res` until the client goes away. `read` is called for the first
   * subscriber of a key and reused by the next ones: the key must capture everything `read`
   * depends on (including what the principal may see).
   */
  open(req: IncomingMessage, res: ServerResponse, key: string, read: () => Promise<unknown>, headers: Record<string, string>): void {
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
      topic = { key, read, streams: new Set(), timer: null, last: null, busy: false };
      this.topics.set(key, topic);
    }
    topic.streams.add(res);
    this.streamCount++;
    const current = topic;
    if (current.last !== null) res.write(current.last);
    if (current.timer === null) {
      current.timer = setInterval(() => void this.poll(current), this.settings.intervalMs);
      void this.poll(current);
    }
    const heartbeat = setInterval(() => res.write(": keep-alive\n\n"), this.settings.heartbeatMs);
    const close = () => {
      clearInterval(heartbeat);
      if (!current.streams.delete(res)) return;
      this.streamCount--;
      if (current.streams.size === 0) {
        if (current.timer) clearInterval(current.timer);
        this.topics.delete(current.key);
      }
    };
    req.on("close", close);
    res.on("close", close);
  }

  /** Ends every stream (server shutdown). */
  close(): void {
    for (const topic of this.topics.values()) {
      if (topic.timer) clearInterval(topic.timer);
      for (const res of topic.streams) res.end();
    }
    this.topics.clear();
    this.streamCount = 0;
  }

  private async poll(topic: Topic): Promise<void> {
    // A slow store must not pile reads up: skip a beat instead.
    if (topic.busy) return;
    topic.busy = true;
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
    }
  }
}
