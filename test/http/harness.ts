/**
 * A real server on 127.0.0.1 over a SQLite file in a temp dir, a fetch helper, and a real
 * Server-Sent Events client (spec parsing over a streamed HTTP response).
 */
import type { FastifyInstance } from "fastify";
import { afterAll, afterEach } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { createServer, type ServerOptions } from "../../src/http/index.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

export interface Harness {
  url: string;
  backend: SqliteBackend;
  dbPath: string;
  app: FastifyInstance;
  request<T = Obj>(method: string, path: string, init?: RequestInit): Promise<Reply<T>>;
  close(): Promise<void>;
}

/** A JSON object as tests read it; narrow fields with a type parameter or `as`. */
export type Obj = { [key: string]: unknown };

export interface Reply<T = Obj> {
  status: number;
  headers: Headers;
  text: string;
  /** Parsed JSON body (not checked against T), or undefined when the body is not JSON. */
  json: T;
}

export interface StartOptions {
  /** Database file; default a fresh one. */
  dbPath?: string;
  /** Wraps the backend the server uses (the harness keeps the SQLite one). */
  wrap?: (backend: SqliteBackend) => Backend;
  /** More server options that need the backend (a WebhookDispatcher). */
  configure?: (backend: SqliteBackend) => Partial<ServerOptions>;
}

/**
 * One server per test for a whole test file: `const { temp, startTestServer } = serverPerTest();`
 * at the top, then `h = await startTestServer(options)` in a test. The server a test started is
 * closed after it; the file's temp directories are removed after the file.
 */
export function serverPerTest(): { temp: TempDirs; startTestServer: (options?: Partial<ServerOptions>, start?: StartOptions) => Promise<Harness> } {
  const temp = new TempDirs();
  let current: Harness | null = null;
  afterEach(async () => {
    await current?.close();
    current = null;
  });
  afterAll(() => temp.removeAll());
  return {
    temp,
    startTestServer: async (options = {}, start = {}) => (current = await startServer(temp, options, start)),
  };
}

export async function startServer(temp: TempDirs, options: Partial<ServerOptions> = {}, start: StartOptions = {}): Promise<Harness> {
  const path = start.dbPath ?? (await temp.file("jobs.db"));
  const backend = new SqliteBackend({ path });
  const app = await createServer({
    backend: start.wrap ? start.wrap(backend) : backend,
    apiKeys: false,
    logger: false,
    ...options,
    ...start.configure?.(backend),
  });
  await app.listen({ port: 0, host: "127.0.0.1" });
  const { port } = app.server.address() as { port: number };
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    backend,
    dbPath: path,
    app,
    request: <T = Obj>(method: string, p: string, init: RequestInit = {}) => send<T>(url, method, p, init),
    close: async () => {
      await app.close();
      await backend.close();
    },
  };
}

export interface RequestInit {
  /** Sent as JSON with Content-Type: application/json. */
  body?: unknown;
  headers?: Record<string, string>;
  /** Sent as is (no Content-Type added). */
  raw?: string;
  /**
   * An event stream that may never end (GET /v1/events runs until the client leaves): answer
   * with its status and headers once they arrive, without reading the body. Default false.
   */
  headersOnly?: boolean;
}

export async function send<T = Obj>(base: string, method: string, path: string, init: RequestInit = {}): Promise<Reply<T>> {
  const headers: Record<string, string> = { ...init.headers };
  let body: string | undefined;
  if (init.raw !== undefined) body = init.raw;
  else if (init.body !== undefined) {
    body = JSON.stringify(init.body);
    headers["content-type"] ??= "application/json";
  }
  const res = await fetch(base + path, { method, headers, body });
  if (init.headersOnly === true) {
    await res.body?.cancel();
    return { status: res.status, headers: res.headers, text: "", json: undefined as T };
  }
  const text = await res.text();
  let json: unknown;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json: json as T };
}

export interface SseEvent {
  id: string | null;
  event: string;
  data: Obj;
}

export interface SseClient {
  status: number;
  headers: Headers;
  events: SseEvent[];
  comments: string[];
  retry: number | null;
  /**
   * Resolves when the server ends the stream or `close()` aborts it; rejects on anything else (a
   * connection torn down mid-stream, an event whose data is not JSON), so no error passes as an end.
   */
  ended: Promise<void>;
  isEnded(): boolean;
  waitForEvent(predicate: (e: SseEvent) => boolean, timeoutMs?: number): Promise<SseEvent>;
  close(): void;
}

/** Opens an event stream and parses it as the EventSource spec does (id, event, data, retry, comments). */
export async function openStream(url: string, headers: Record<string, string> = {}): Promise<SseClient> {
  const controller = new AbortController();
  const res = await fetch(url, { headers: { accept: "text/event-stream", ...headers }, signal: controller.signal });
  const client: SseClient = {
    status: res.status,
    headers: res.headers,
    events: [],
    comments: [],
    retry: null,
    ended: Promise.resolve(),
    isEnded: () => ended,
    waitForEvent: async (predicate, timeoutMs = 10_000) => waitFor(() => client.events.find(predicate), { timeoutMs, description: "an SSE event" }),
    close: () => controller.abort(),
  };
  let ended = false;
  if (res.status !== 200 || !res.body) {
    ended = true;
    await res.body?.cancel().catch(() => undefined);
    return client;
  }
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  client.ended = (async () => {
    let buffer = "";
    let id: string | null = null;
    let event = "";
    let data: string[] = [];
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let nl: number;
        while ((nl = buffer.search(/\r\n|\n|\r/)) >= 0) {
          const line = buffer.slice(0, nl);
          buffer = buffer.slice(nl + (buffer.startsWith("\r\n", nl) ? 2 : 1));
          if (line === "") {
            if (data.length > 0) client.events.push({ id, event: event || "message", data: JSON.parse(data.join("\n")) as Obj });
            event = "";
            data = [];
            id = null;
            continue;
          }
          if (line.startsWith(":")) {
            client.comments.push(line.slice(1).trim());
            continue;
          }
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "id") id = val;
          else if (field === "event") event = val;
          else if (field === "data") data.push(val);
          else if (field === "retry") client.retry = Number(val);
        }
      }
    } catch (error) {
      // Only our own close() ends a stream quietly; anything else is the test's business.
      if (!controller.signal.aborted) throw error;
    } finally {
      ended = true;
    }
  })();
  return client;
}
