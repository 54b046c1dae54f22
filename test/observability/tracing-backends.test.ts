/**
 * The trace context travels in the job's metadata on every backend alike: enqueued with a
 * producer span on SQLite, PostgreSQL and Redis, each job's consumer span is that span's child.
 */
import { context, propagation, ROOT_CONTEXT, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { PostgresBackend } from "../../src/backend/postgres/index.js";
import { RedisBackend } from "../../src/backend/redis/index.js";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { Queue, silentLogger, Worker } from "../../src/index.js";
import { ConveyorTracing } from "../../src/observability/index.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";
import { deletePrefix, requireRedis, testPrefix } from "../helpers/redis.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const pgUrl = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const redisUrl = requireRedis(inject("redisUrl"), inject("redisUnavailable"));
const schemas = new TestSchemas(pgUrl);
const temp = new TempDirs();
const prefixes: string[] = [];
const exporter = new InMemorySpanExporter();
const closing: Array<() => Promise<unknown>> = [];

beforeAll(() => {
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
});
afterEach(async () => {
  for (const c of closing.splice(0).reverse()) await c();
  exporter.reset();
});
afterAll(async () => {
  trace.disable();
  context.disable();
  propagation.disable();
  await schemas.dropAll();
  for (const p of prefixes) await deletePrefix(redisUrl, p);
  await temp.removeAll();
});

const makers: Record<string, () => Promise<Backend>> = {
  sqlite: async () => new SqliteBackend({ path: await temp.file("jobs.db") }),
  postgres: async () => {
    const b = new PostgresBackend({ connectionString: pgUrl, schema: schemas.create(), logger: silentLogger });
    await b.migrate();
    return b;
  },
  redis: async () => {
    const prefix = testPrefix("trace");
    prefixes.push(prefix);
    return new RedisBackend({ connection: redisUrl, prefix, logger: silentLogger });
  },
};

describe.each(Object.keys(makers))("trace context on %s", (name) => {
  it("stores the producer's traceparent with the job, beside the caller's meta, and parents the consumer span on it", async () => {
    const backend = await makers[name]!();
    closing.push(() => backend.close());
    const tracing = new ConveyorTracing();
    const queue = new Queue("traced", { backend, telemetry: tracing });
    const { id } = await queue.add("work", { n: 1 }, { meta: { requestedBy: "u_1" } });
    const producer = exporter.getFinishedSpans().find((s) => s.name === "send traced")!;
    const stored = await backend.get(id);
    expect(stored!.meta).toMatchObject({ requestedBy: "u_1" });
    const sc = trace.getSpanContext(propagation.extract(ROOT_CONTEXT, { traceparent: stored!.meta!.traceparent as string }));
    expect(sc).toMatchObject({ traceId: producer.spanContext().traceId, spanId: producer.spanContext().spanId });

    const worker = new Worker({
      backend,
      queues: "traced",
      pollIntervalMs: 20,
      logger: silentLogger,
      telemetry: tracing,
      handlers: { work: async () => "ok" },
    });
    closing.push(() => worker.close({ force: true }));
    const consumer = await waitFor(() => exporter.getFinishedSpans().find((s) => s.name === "process traced"), { timeoutMs: 10_000 });
    expect(consumer.spanContext().traceId).toBe(producer.spanContext().traceId);
    expect(consumer.parentSpanContext?.spanId).toBe(producer.spanContext().spanId);
  });
});
