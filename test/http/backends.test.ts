/**
 * The HTTP contract on every backend: the service only uses the Backend contract, so what holds
 * on SQLite must hold on PostgreSQL and Redis too. Each backend's block runs when its server is
 * available (vitest globalSetup) and says why when it is not.
 */
import { createServer as createHttpServer, type IncomingHttpHeaders } from "node:http";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { createServer, generateWebhookSecret, verifyWebhook, WebhookDispatcher } from "../../src/http/index.js";
import { silentLogger, Worker, type Handler } from "../../src/index.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";
import { storeCases } from "./stores.js";
import { openStream, send, type Obj } from "./harness.js";

const temp = new TempDirs();
afterAll(() => temp.removeAll());
const cases = storeCases(temp, "http");

for (const c of cases) {
  describe.skipIf(c.unavailable !== "")(`HTTP service on ${c.name}${c.unavailable ? ` (skipped: ${c.unavailable})` : ""}`, () => {
    let backend: Backend;
    let base: string;
    const closers: Array<() => Promise<unknown>> = [];
    const secret = generateWebhookSecret();
    let webhooks: WebhookDispatcher;

    async function start(handlers: Record<string, Handler>): Promise<Worker> {
      backend = await c.make();
      webhooks = new WebhookDispatcher({
        backend,
        secrets: [secret],
        allow: ["127.0.0.1"],
        backoff: { type: "fixed", delayMs: 10 },
        sweepIntervalMs: 0,
        logger: silentLogger,
      });
      const app = await createServer({ backend, apiKeys: false, logger: false, webhooks, events: { pollIntervalMs: 25 } });
      await app.listen({ port: 0, host: "127.0.0.1" });
      base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
      const worker = new Worker({ backend, queues: "q", handlers, pollIntervalMs: 20, heartbeatIntervalMs: 100, leaseMs: 2_000, logger: silentLogger });
      webhooks.attach(worker);
      webhooks.start({ pollIntervalMs: 20, logger: silentLogger, maintenance: false });
      closers.push(
        () => backend.close(),
        () => app.close(),
        () => webhooks.close({ force: true }),
        () => worker.close({ force: true }),
      );
      return worker;
    }
    afterEach(async () => {
      for (const close of closers.splice(0).reverse()) await close();
    });

    it("202 contract, idempotent retry, status and SSE through a worker to completion", async () => {
      await start({ double: async (job) => (job.data as { n: number }).n * 2 });
      const body = { name: "double", data: { n: 21 } };
      const r = await send<{ jobId: string; pollUrl: string }>(base, "POST", "/v1/queues/q/jobs", { body, headers: { "idempotency-key": "k1" } });
      expect(r.status).toBe(202);
      expect(r.headers.get("location")).toBe(r.json.pollUrl);
      const again = await send(base, "POST", "/v1/queues/q/jobs", { body, headers: { "idempotency-key": "k1" } });
      expect(again.text).toBe(r.text);
      expect((await send(base, "POST", "/v1/queues/q/jobs", { body: { ...body, data: { n: 1 } }, headers: { "idempotency-key": "k1" } })).status).toBe(422);
      const s = await openStream(`${base}/v1/jobs/${r.json.jobId}/events`);
      await s.ended;
      expect(s.events.map((e) => e.data.state)).toEqual(["waiting", "active", "completed"]);
      expect(s.events.at(-1)!.data.result).toBe(42);
      const resumed = await openStream(`${base}/v1/jobs/${r.json.jobId}/events`, { "last-event-id": "3" });
      expect(resumed.status).toBe(204);
      expect((await send<Obj>(base, "GET", r.json.pollUrl)).json).toMatchObject({ state: "completed", result: 42, attempts: { made: 1 } });
      const queues = await send<{ queues: Array<{ name: string; counts: Obj }> }>(base, "GET", "/v1/queues");
      expect(queues.json.queues.find((q) => q.name === "q")?.counts).toMatchObject({ completed: 1 });
    });

    it("GET /v1/events: every event of a job run by a worker, in order; Last-Event-ID resumes after any of them", async () => {
      await start({ double: async (job) => (job.data as { n: number }).n * 2 });
      if (backend.capabilities.eventLog !== true) {
        expect((await send(base, "GET", "/v1/events")).status).toBe(501);
        return;
      }
      const s = await openStream(`${base}/v1/events?queue=q`);
      expect(s.status).toBe(200);
      // The stream starts "from now", a moment after its response began: an event of a first
      // job (its added, active or completed) shows it is live before the job under test is added.
      const marker = await send<{ jobId: string }>(base, "POST", "/v1/queues/q/jobs", { body: { name: "double", data: { n: 0 } } });
      await s.waitForEvent((e) => e.data.jobId === marker.json.jobId);
      const r = await send<{ jobId: string }>(base, "POST", "/v1/queues/q/jobs", { body: { name: "double", data: { n: 2 } } });
      const done = await s.waitForEvent((e) => e.event === "completed" && e.data.jobId === r.json.jobId);
      s.close();
      const mine = s.events.filter((e) => e.data.jobId === r.json.jobId);
      expect(mine.map((e) => e.event)).toEqual(["added", "active", "completed"]);
      expect(done.data).toMatchObject({ queue: "q", name: "double", attempt: 1, data: { result: 4 } });
      // Resuming after the first event gives the rest, exactly (the same events: on Redis an
      // event of the last second may carry another id when read again, see docs/events.md).
      const resumed = await openStream(`${base}/v1/events?queue=q`, { "last-event-id": mine[0]!.id! });
      await resumed.waitForEvent((e) => e.event === "completed" && e.data.jobId === r.json.jobId);
      resumed.close();
      const withoutId = (list: typeof mine) => list.map((e) => ({ event: e.event, data: { ...e.data, id: null } }));
      expect(withoutId(resumed.events.filter((e) => e.data.jobId === r.json.jobId))).toEqual(withoutId(mine.slice(1)));
    });

    it("cancel: a waiting job never runs; a running job's signal aborts", async () => {
      let aborted: unknown = null;
      const worker = await start({
        marker: async () => "ran",
        hold: (_job, ctx) =>
          new Promise((_resolve, reject) => {
            ctx.signal.addEventListener("abort", () => {
              aborted = ctx.signal.reason;
              reject(ctx.signal.reason as Error);
            });
          }),
      });
      const running = await send<{ jobId: string }>(base, "POST", "/v1/queues/q/jobs", { body: { name: "hold" } });
      await waitFor(async () => (await backend.get(running.json.jobId))?.state === "active", { timeoutMs: 10_000 });
      await backend.pause("q");
      const waiting = await send<{ jobId: string }>(base, "POST", "/v1/queues/q/jobs", { body: { name: "hold" } });
      expect((await send(base, "DELETE", `/v1/jobs/${waiting.json.jobId}`)).json).toMatchObject({ state: "cancelled", previousState: "waiting" });
      expect((await send(base, "DELETE", `/v1/jobs/${running.json.jobId}`)).json).toMatchObject({ state: "cancelled", previousState: "active" });
      await waitFor(() => aborted !== null, { timeoutMs: 10_000, description: "the handler's signal to abort" });
      expect(aborted).toMatchObject({ name: "LeaseLostError", reason: "cancelled" });
      await backend.resume("q");
      // A job enqueued after the cancelled one runs: the worker has been past it, and left it.
      const marker = await send<{ jobId: string }>(base, "POST", "/v1/queues/q/jobs", { body: { name: "marker" } });
      await waitFor(async () => (await backend.get(marker.json.jobId))?.state === "completed", { timeoutMs: 10_000, description: "the later job ran" });
      expect((await backend.get(waiting.json.jobId))?.state).toBe("cancelled");
      expect((await backend.get(waiting.json.jobId))?.history).toEqual([]);
      expect(worker.activeCount).toBe(0);
    });

    it("dead letters: listed with forensics, replayed; a signed job.dead webhook is delivered", async () => {
      const received: Array<{ headers: IncomingHttpHeaders; body: string }> = [];
      const receiver = createHttpServer((req, res) => {
        let b = "";
        req.on("data", (chunk: Buffer) => (b += chunk.toString()));
        req.on("end", () => {
          received.push({ headers: req.headers, body: b });
          res.writeHead(200).end();
        });
      });
      await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", r));
      closers.push(() => new Promise((r) => receiver.close(r)));
      await start({
        broken: async () => {
          throw new Error("always broken");
        },
      });
      const port = (receiver.address() as { port: number }).port;
      const r = await send<{ jobId: string }>(base, "POST", "/v1/queues/q/jobs", {
        body: { name: "broken", data: { x: 1 }, options: { attempts: 1, callbackUrl: `http://127.0.0.1:${port}/hook` } },
      });
      await waitFor(() => received.length === 1, { timeoutMs: 15_000, description: "the job.dead webhook" });
      expect(verifyWebhook(secret, received[0]!.headers, received[0]!.body)).toMatchObject({
        type: "job.dead",
        data: { id: r.json.jobId, error: { message: "always broken" } },
      });
      const dead = await send<{ jobs: Obj[] }>(base, "GET", "/v1/queues/q/dead");
      expect(dead.json.jobs[0]).toMatchObject({ id: r.json.jobId, data: { x: 1 }, failure: { message: "always broken" } });
      expect((await send(base, "POST", "/v1/queues/q/dead/replay", { body: { ids: [r.json.jobId] } })).json).toMatchObject({ replayed: [r.json.jobId] });
      // Dies again after the replay: a second, distinct delivery.
      await waitFor(() => received.length === 2, { timeoutMs: 15_000 });
      expect(received[1]!.headers["webhook-id"]).not.toBe(received[0]!.headers["webhook-id"]);
    });
  });
}
