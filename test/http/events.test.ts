/**
 * The cross-process event stream: `queue.events()` and `GET /v1/events`, read from the store's
 * event log while another connection (as another process would) runs the jobs. The SSE side is
 * read with the `eventsource` npm client, which reconnects with Last-Event-ID by itself.
 */
import { EventSource } from "eventsource";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { createServer } from "../../src/http/index.js";
import { hashApiKey } from "../../src/http/auth.js";
import { Queue, silentLogger, Worker, type QueueEvent } from "../../src/index.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";
import { openStream, type SseEvent } from "./harness.js";

const temp = new TempDirs();
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
afterAll(() => temp.removeAll());

async function store(path?: string): Promise<{ path: string; backend: SqliteBackend }> {
  const file = path ?? (await temp.file("events.db"));
  const backend = new SqliteBackend({ path: file });
  cleanups.push(() => backend.close());
  return { path: file, backend };
}

function runWorker(backend: Backend, queues: string[]): Worker {
  const worker = new Worker({
    backend,
    queues,
    logger: silentLogger,
    pollIntervalMs: 20,
    handlers: {
      ok: async (job, ctx) => {
        await ctx.progress({ half: true });
        return { echo: job.data };
      },
      bad: () => {
        throw new Error("always fails");
      },
    },
  });
  cleanups.push(() => worker.close({ force: true }).then(() => undefined));
  return worker;
}

describe("queue.events()", () => {
  it("yields the events of jobs another connection runs, filtered, and resumes after an id", async () => {
    const producer = await store();
    const consumer = await store(producer.path);
    const queue = new Queue("mail", { backend: producer.backend });
    const seen: QueueEvent[] = [];
    const abort = new AbortController();
    const iterating = (async () => {
      for await (const e of queue.events({ signal: abort.signal, pollIntervalMs: 20 })) seen.push(e);
    })();
    // Events of another queue are not this queue's.
    await new Queue("other", { backend: producer.backend }).add("ok", {});
    const { id: okId } = await queue.add("ok", { n: 1 });
    const { id: badId } = await queue.add("bad", {}, { attempts: 2, backoff: { type: "fixed", delayMs: 0 } });
    runWorker(consumer.backend, ["mail"]);
    const done = (id: string, type: string) => seen.some((e) => e.jobId === id && e.type === type);
    await waitFor(() => done(okId, "completed") && done(badId, "dead"), { timeoutMs: 15_000 });
    abort.abort();
    await iterating;

    const ofJob = (id: string) =>
      seen
        .filter((e) => e.jobId === id)
        .map((e) => e.type)
        .filter((t) => t !== "waiting");
    expect(ofJob(okId)).toEqual(["added", "active", "progress", "completed"]);
    expect(ofJob(badId)).toEqual(["added", "active", "retrying", "active", "dead"]);
    expect(seen.every((e) => e.queue === "mail")).toBe(true);
    expect(seen.find((e) => e.jobId === okId && e.type === "completed")?.data).toEqual({ result: { echo: { n: 1 } } });
    expect(seen.find((e) => e.jobId === badId && e.type === "dead")?.data).toMatchObject({ error: { message: "always fails" } });

    // Resuming after the first event replays the rest, here only the dead ones of one name.
    const resumed: QueueEvent[] = [];
    const again = new AbortController();
    const first = seen[0]!;
    const reading = (async () => {
      for await (const e of queue.events({ after: first.id, types: ["dead", "completed"], names: ["bad"], signal: again.signal, pollIntervalMs: 20 }))
        resumed.push(e);
    })();
    await waitFor(() => resumed.length === 1, { timeoutMs: 10_000 });
    again.abort();
    await reading;
    expect(resumed.map((e) => [e.jobId, e.type])).toEqual([[badId, "dead"]]);
  });

  it("is refused, saying why, on a store without an event log", async () => {
    const { backend } = await store();
    const noLog = new Proxy(backend, {
      get: (target, key) => (key === "capabilities" ? { ...target.capabilities, eventLog: false } : (Reflect.get(target, key) as unknown)),
    });
    await expect(new Queue("q", { backend: noLog }).events().next()).rejects.toThrow(/keeps no event log/);
  });
});

describe("GET /v1/events", () => {
  const KEY = "read-key-0123456789abcdef";

  async function serve(backend: Backend, port = 0): Promise<{ url: string; port: number; close: () => Promise<void> }> {
    const app = await createServer({ backend, logger: false, apiKeys: [{ id: "reader", sha256: hashApiKey(KEY), scopes: ["read", "enqueue"] }] });
    await app.listen({ port, host: "127.0.0.1" });
    const bound = (app.server.address() as { port: number }).port;
    let closed = false;
    const close = async () => {
      if (closed) return;
      closed = true;
      await app.close();
    };
    cleanups.push(close);
    return { url: `http://127.0.0.1:${bound}`, port: bound, close };
  }

  it("streams filtered events to an EventSource, which resumes with Last-Event-ID after the server restarts", { timeout: 60_000 }, async () => {
    const { path, backend } = await store();
    const worker = await store(path);
    let server = await serve(backend);
    const received: Array<{ id: string; type: string; jobId: string }> = [];
    const source = new EventSource(`${server.url}/v1/events?queue=mail&type=added,completed`, {
      fetch: (input, init) => fetch(input, { ...init, headers: { ...init.headers, authorization: `Bearer ${KEY}` } }),
    });
    cleanups.push(() => source.close());
    for (const type of ["added", "completed", "active"]) {
      source.addEventListener(type, (e) => {
        const data = JSON.parse(e.data as string) as { jobId: string; type: string; queue: string };
        expect(data.queue).toBe("mail");
        received.push({ id: e.lastEventId, type: data.type, jobId: data.jobId });
      });
    }
    await new Promise<void>((resolve, reject) => {
      source.onopen = () => resolve();
      source.onerror = (e) => reject(new Error(`EventSource failed: ${String(e.message)}`));
    });
    source.onerror = null;

    const queue = new Queue("mail", { backend });
    await new Queue("other", { backend }).add("ok", {});
    const { id: first } = await queue.add("ok", { n: 1 });
    runWorker(worker.backend, ["mail", "other"]);
    await waitFor(() => received.some((e) => e.jobId === first && e.type === "completed"), { timeoutMs: 15_000 });
    expect(received.map((e) => `${e.jobId}:${e.type}`)).toEqual([`${first}:added`, `${first}:completed`]);

    // The server goes away; jobs go on meanwhile; a new server on the same port takes over and
    // the client's reconnect (Last-Event-ID: the last id it got) misses nothing.
    await server.close();
    const { id: second } = await queue.add("ok", { n: 2 });
    await waitFor(async () => (await backend.get(second))?.state === "completed", { timeoutMs: 15_000 });
    server = await serve(backend, server.port);
    await waitFor(() => received.some((e) => e.jobId === second && e.type === "completed"), { timeoutMs: 20_000 });
    expect(received.map((e) => `${e.jobId}:${e.type}`)).toEqual([`${first}:added`, `${first}:completed`, `${second}:added`, `${second}:completed`]);
    expect(new Set(received.map((e) => e.id)).size).toBe(4);
  });

  it("carries error stacks to admin keys only, as the job views do (a read key's status view has none)", async () => {
    const ADMIN = "admin-key-0123456789abcdef";
    const { backend } = await store();
    const app = await createServer({
      backend,
      logger: false,
      apiKeys: [
        { id: "reader", sha256: hashApiKey(KEY), scopes: ["read"] },
        { id: "admin", sha256: hashApiKey(ADMIN), scopes: ["admin"] },
      ],
    });
    await app.listen({ port: 0, host: "127.0.0.1" });
    cleanups.push(() => app.close());
    const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}/v1/events?type=retrying,dead`;
    const [asReader, asAdmin] = await Promise.all([KEY, ADMIN].map((key) => openStream(url, { authorization: `Bearer ${key}` })));
    cleanups.push(
      () => asReader!.close(),
      () => asAdmin!.close(),
    );
    const { id } = await new Queue("mail", { backend }).add("bad", {}, { attempts: 2, backoff: { type: "fixed", delayMs: 0 } });
    runWorker(backend, ["mail"]);
    for (const type of ["retrying", "dead"]) {
      const [read, admin] = await Promise.all([asReader!, asAdmin!].map((s) => s.waitForEvent((e) => e.event === type && e.data.jobId === id)));
      const errorOf = (e: SseEvent) => (e.data.data as { error: { message: string; stack: string | null } }).error;
      expect(errorOf(read!)).toMatchObject({ message: "always fails", stack: null });
      expect(errorOf(admin!).message).toBe("always fails");
      expect(errorOf(admin!).stack).toMatch(/always fails\n\s+at /);
    }
  });

  it("answers bad filters and resume ids with 400, no key with 401, a store without a log with 501", async () => {
    const { backend } = await store();
    const server = await serve(backend);
    const get = (path: string, headers: Record<string, string> = { authorization: `Bearer ${KEY}` }) => fetch(`${server.url}${path}`, { headers });
    for (const path of ["/v1/events?type=finished", "/v1/events?queue=bad%20name", "/v1/events?lastEventId=nope", "/v1/events?type=,"]) {
      const res = await get(path);
      expect(res.status, path).toBe(400);
      expect(((await res.json()) as { detail: string }).detail.length).toBeGreaterThan(10);
    }
    const badHeader = await get("/v1/events", { authorization: `Bearer ${KEY}`, "last-event-id": "x" });
    expect(badHeader.status).toBe(400);
    await badHeader.body?.cancel();
    expect((await get("/v1/events", {})).status).toBe(401);

    const noLog = new Proxy(backend, {
      get: (target, key) => (key === "capabilities" ? { ...target.capabilities, eventLog: false } : (Reflect.get(target, key) as unknown)),
    });
    const other = await serve(noLog);
    const res = await fetch(`${other.url}/v1/events`, { headers: { authorization: `Bearer ${KEY}` } });
    expect(res.status).toBe(501);
    expect(((await res.json()) as { detail: string }).detail).toMatch(/keeps no event log/);
  });
});
