/**
 * What every store with its event log switched off (eventLog: false) must still do, checked the
 * same way on each (test/backends/{postgres,redis}-event-log-off.test.ts): its readers refuse by
 * name, and a job's own event stream still ends with its completion, by polling.
 */
import { expect } from "vitest";
import { createServer } from "../../src/http/index.js";
import { EventTail } from "../../src/producer/event-tail.js";
import { Queue, silentLogger, UnsupportedByStoreError, Worker, type Backend } from "../../src/index.js";
import { waitFor } from "./wait-for.js";

/**
 * Runs every path that writes events on queue "q" of `b` through a real worker: `n` jobs (`n`
 * even) completed, every other one removed on completion, a job retried once before it dies, and
 * one removed as it dies. Resolves once every job finished; the worker is pushed onto `workers`
 * for the caller to close.
 */
export async function runEveryEventPath(b: Backend, n: number, workers: Worker[]): Promise<void> {
  const queue = new Queue("q", { backend: b });
  await queue.addBulk(Array.from({ length: n }, (_, i) => ({ name: "ok", data: { i }, options: { removeOnComplete: i % 2 === 0 } })));
  await queue.add("bad", {}, { attempts: 2, backoff: { type: "fixed", delayMs: 1 } });
  await queue.add("bad", {}, { attempts: 1, removeOnFail: true });
  const w = new Worker({
    backend: b,
    queues: "q",
    concurrency: 5,
    pollIntervalMs: 20,
    logger: silentLogger,
    handlers: {
      ok: async () => "done",
      bad: async () => {
        throw new Error("boom");
      },
    },
  });
  workers.push(w);
  await waitFor(
    async () => {
      const [stats] = await b.stats("q");
      return stats!.counts.completed === n / 2 && stats!.counts.dead === 1 && stats!.counts.waiting + stats!.counts.active + stats!.counts.scheduled === 0;
    },
    { description: "every job finished" },
  );
}

/**
 * readEvents (from `cursor`, a valid cursor of the store), latestEventCursor and pruneEvents
 * refuse with the shared "event log is off" error naming `scope` ("schema", "prefix");
 * queue.events() and GET /v1/events (501, naming the store by its description) refuse too; no
 * event tail is offered (LiveHub and JobWatcher poll without one).
 */
export async function expectEventLogReadersRefused(b: Backend, options: { cursor: string; scope: string }): Promise<void> {
  await expect(b.readEvents!(options.cursor, 10)).rejects.toBeInstanceOf(UnsupportedByStoreError);
  await expect(b.latestEventCursor!()).rejects.toThrow(new RegExp(`event log is off \\(eventLog: false.*another ${options.scope} with the log on`));
  await expect(b.pruneEvents!()).rejects.toMatchObject({ capability: "eventLog" });
  await expect(new Queue("q", { backend: b }).events().next()).rejects.toThrow(/keeps no event log.*eventLog: false/);
  expect(EventTail.of(b)).toBeNull();

  const app = await createServer({ backend: b, apiKeys: false, logger: false });
  try {
    const r = await app.inject({ method: "GET", url: "/v1/events" });
    expect(r.statusCode).toBe(501);
    expect(r.json()).toMatchObject({
      type: "urn:conveyor:problem:no-event-log",
      detail: expect.stringContaining(`store (${b.description}) keeps no event log`) as string,
    });
  } finally {
    await app.close();
  }
}

/**
 * GET /v1/jobs/{id}/events on `b` reports the job's completion and ends, though no event log
 * feeds it: the server polls the job. The worker that runs the job is pushed onto `workers` for
 * the caller to close.
 */
export async function expectJobEventStreamByPolling(b: Backend, workers: Worker[]): Promise<void> {
  const app = await createServer({ backend: b, apiKeys: false, logger: false, events: { pollIntervalMs: 50 } });
  try {
    await app.listen({ port: 0, host: "127.0.0.1" });
    const base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
    const { jobId } = (await (
      await fetch(`${base}/v1/queues/q/jobs`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "ok" }) })
    ).json()) as { jobId: string };
    const stream = await fetch(`${base}/v1/jobs/${jobId}/events`);
    expect(stream.status).toBe(200);
    const w = new Worker({ backend: b, queues: "q", pollIntervalMs: 20, logger: silentLogger, handlers: { ok: async () => 42 } });
    workers.push(w);
    const text = await stream.text(); // the stream ends after the terminal event
    expect(text).toMatch(/event: state\ndata: \{[^\n]*"state":"completed"/);
  } finally {
    await app.close();
  }
}
