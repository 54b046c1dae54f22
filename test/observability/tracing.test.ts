/**
 * OpenTelemetry: one trace from an HTTP request through the queue into the handler and on into
 * the webhook delivery, recorded by OpenTelemetry's own SDK and in-memory exporter; the stored
 * `traceparent` read back with OpenTelemetry's own W3C propagator.
 */
import { createServer as createHttpServer, type IncomingHttpHeaders, type Server } from "node:http";
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import type { FastifyInstance } from "fastify";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { createServer, generateWebhookSecret, WebhookDispatcher } from "../../src/http/index.js";
import { Queue, silentLogger, Worker } from "../../src/index.js";
import { ConveyorTracing } from "../../src/observability/index.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const temp = new TempDirs();
const cleanups: Array<() => Promise<unknown>> = [];
let exporter: InMemorySpanExporter;

beforeEach(() => {
  exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  trace.setGlobalTracerProvider(provider);
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  cleanups.push(async () => {
    trace.disable();
    context.disable();
    propagation.disable();
  });
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
afterAll(() => temp.removeAll());

async function backend(): Promise<SqliteBackend> {
  const b = new SqliteBackend({ path: await temp.file("jobs.db") });
  cleanups.push(() => b.close());
  return b;
}

function spansNamed(name: string): ReadableSpan[] {
  return exporter.getFinishedSpans().filter((s) => s.name === name);
}

function one(name: string): ReadableSpan {
  const found = spansNamed(name);
  expect(
    found,
    `spans named ${name}: ${exporter
      .getFinishedSpans()
      .map((s) => s.name)
      .join(", ")}`,
  ).toHaveLength(1);
  return found[0]!;
}

async function receiver(): Promise<{ url: string; headers: IncomingHttpHeaders[] }> {
  const headers: IncomingHttpHeaders[] = [];
  const server: Server = createHttpServer((req, res) => {
    req.resume();
    req.on("end", () => {
      headers.push(req.headers);
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanups.push(() => new Promise((r) => server.close(r)));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`, headers };
}

describe("tracing", () => {
  it("one trace runs from an HTTP request through the queue into the handler and its webhook delivery", async () => {
    const store = await backend();
    const tracing = new ConveyorTracing();
    const webhooks = new WebhookDispatcher({
      backend: store,
      secrets: [generateWebhookSecret()],
      allow: ["127.0.0.1"],
      sweepIntervalMs: 0,
      logger: silentLogger,
      telemetry: tracing,
    });
    const app: FastifyInstance = await createServer({ backend: store, apiKeys: false, webhooks, telemetry: tracing, logger: false });
    await app.listen({ port: 0, host: "127.0.0.1" });
    cleanups.push(() => app.close());
    const worker = new Worker({
      backend: store,
      queues: "orders",
      pollIntervalMs: 20,
      logger: silentLogger,
      telemetry: tracing,
      handlers: {
        charge: async () =>
          trace.getTracer("shop").startActiveSpan("charge card", async (span) => {
            await new Promise((r) => setTimeout(r, 5));
            span.end();
            return { charged: true };
          }),
      },
    });
    webhooks.attach(worker);
    webhooks.start({ pollIntervalMs: 20, logger: silentLogger, maintenance: false });
    cleanups.push(
      () => worker.close({ force: true }),
      () => webhooks.close({ force: true }),
    );
    const hook = await receiver();

    // The calling service: its own span, propagated as a traceparent header.
    const { port } = app.server.address() as { port: number };
    const jobId = await trace.getTracer("shop").startActiveSpan("POST /checkout", { kind: SpanKind.SERVER }, async (span) => {
      const headers: Record<string, string> = { "content-type": "application/json" };
      propagation.inject(context.active(), headers);
      const res = await fetch(`http://127.0.0.1:${port}/v1/queues/orders/jobs`, {
        method: "POST",
        headers,
        body: JSON.stringify({ name: "charge", data: { order: 7 }, options: { callbackUrl: hook.url } }),
      });
      span.end();
      expect(res.status).toBe(202);
      return ((await res.json()) as { jobId: string }).jobId;
    });
    await waitFor(() => hook.headers.length === 1, { timeoutMs: 10_000, description: "the webhook delivery" });
    await waitFor(() => spansNamed("process conveyor.webhooks").length === 1, { description: "the delivery's span" });

    const request = one("POST /checkout");
    const producer = one("send orders");
    const consumer = one("process orders");
    const handler = one("charge card");
    const delivery = one("process conveyor.webhooks");
    const traceId = request.spanContext().traceId;
    for (const s of [producer, consumer, handler, delivery]) expect(s.spanContext().traceId).toBe(traceId);

    // HTTP request -> producer -> consumer (child and link) -> the handler's own span.
    expect(producer.parentSpanContext?.spanId).toBe(request.spanContext().spanId);
    expect(producer.kind).toBe(SpanKind.PRODUCER);
    expect(producer.attributes).toMatchObject({
      "messaging.system": "conveyor",
      "messaging.operation.type": "send",
      "messaging.destination.name": "orders",
      "messaging.message.id": jobId,
      "conveyor.job.name": "charge",
      "conveyor.job.duplicate": false,
    });
    expect(consumer.kind).toBe(SpanKind.CONSUMER);
    expect(consumer.parentSpanContext?.spanId).toBe(producer.spanContext().spanId);
    expect(consumer.links.map((l) => l.context.spanId)).toEqual([producer.spanContext().spanId]);
    expect(consumer.attributes).toMatchObject({
      "messaging.system": "conveyor",
      "messaging.operation.type": "process",
      "messaging.destination.name": "orders",
      "messaging.message.id": jobId,
      "conveyor.job.attempt": 1,
    });
    expect(handler.parentSpanContext?.spanId).toBe(consumer.spanContext().spanId);

    // The job carries the producer's context as a W3C traceparent, readable by OpenTelemetry's propagator.
    const job = await store.get(jobId);
    const stored = trace.getSpanContext(propagation.extract(ROOT_CONTEXT, { traceparent: job!.meta!.traceparent as string }));
    expect(stored).toMatchObject({ traceId, spanId: producer.spanContext().spanId });

    // The delivery continues the job's trace, and tells the receiver where it stands in it.
    expect(delivery.parentSpanContext?.spanId).toBe(producer.spanContext().spanId);
    const sent = trace.getSpanContext(propagation.extract(ROOT_CONTEXT, hook.headers[0]!));
    expect(sent).toMatchObject({ traceId, spanId: delivery.spanContext().spanId });
  });

  it("a failed attempt's span records the error; a retry is a new consumer span in the same trace", async () => {
    const store = await backend();
    const tracing = new ConveyorTracing();
    let calls = 0;
    const worker = new Worker({
      backend: store,
      queues: "q",
      pollIntervalMs: 20,
      logger: silentLogger,
      telemetry: tracing,
      handlers: {
        flaky: async () => {
          if (++calls === 1) throw new TypeError("upstream said no");
          return "ok";
        },
      },
    });
    cleanups.push(() => worker.close({ force: true }));
    const queue = new Queue("q", { backend: store, telemetry: tracing });
    await queue.add("flaky", null, { backoff: { type: "fixed", delayMs: 1 } });
    await waitFor(() => spansNamed("process q").length === 2, { timeoutMs: 10_000, description: "two attempts" });
    const [first, second] = spansNamed("process q").sort((a, b) => Number(a.attributes["conveyor.job.attempt"]) - Number(b.attributes["conveyor.job.attempt"]));
    const producer = one("send q");
    expect(first!.status.code).toBe(SpanStatusCode.ERROR);
    expect(first!.attributes["error.type"]).toBe("TypeError");
    expect(first!.events.map((e) => e.name)).toContain("exception");
    expect(second!.status.code).not.toBe(SpanStatusCode.ERROR);
    for (const s of [first!, second!]) {
      expect(s.spanContext().traceId).toBe(producer.spanContext().traceId);
      expect(s.parentSpanContext?.spanId).toBe(producer.spanContext().spanId);
    }
  });

  it("with no SDK registered nothing is recorded and nothing is added to the job", async () => {
    trace.disable();
    context.disable();
    propagation.disable();
    const store = await backend();
    const tracing = new ConveyorTracing();
    const queue = new Queue("q", { backend: store, telemetry: tracing });
    const { id } = await queue.add("x", { a: 1 }, { meta: { who: "me" } });
    expect((await store.get(id))!.meta).toEqual({ who: "me" });
    let ran = false;
    await tracing.attempt((await store.get(id))!, async () => (ran = true));
    expect(ran).toBe(true);
    expect(exporter.getFinishedSpans()).toHaveLength(0);
  });
});
