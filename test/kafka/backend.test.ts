/**
 * The Kafka backend beyond the conformance suite, against librdkafka's mock cluster started by
 * kcat (a Kafka-protocol TEST BROKER, not Kafka): the Worker on `openBackend("kafka://…")` with
 * retries through the retry topic and dead letters (forensics headers read back with kcat, another
 * client), the dead-letter view (get, list, replay, remove), offsets committed only up to the
 * first unsettled record, refusals by name over HTTP (501), and the consumer lag scraped by
 * Prometheus' text format from ConveyorMetrics.
 */
import { hostname } from "node:os";
import { describe, expect, inject, it } from "vitest";
import type { Backend, ClaimedJob } from "../../src/backend/contract.js";
import { KafkaBackend, type KafkaBackendOptions } from "../../src/backend/kafka/index.js";
import { openBackend } from "../../src/backend/open.js";
import { UnrecoverableError, UnsupportedByStoreError } from "../../src/core/errors.js";
import { silentLogger } from "../../src/core/logger.js";
import { buildJobSpec, type JobOptions } from "../../src/core/spec.js";
import { createServer } from "../../src/http/index.js";
import { ConveyorMetrics } from "../../src/observability/index.js";
import { startMetricsServer } from "../../src/observability/http.js";
import { PrometheusServer } from "../helpers/prometheus.js";
import { Worker } from "../../src/runtime/worker.js";
import { kafkaName, readTopic, requireKafka } from "../helpers/kafka.js";
import { waitFor } from "../helpers/wait-for.js";

const url = requireKafka(inject("kafkaUrl"), inject("kafkaUnavailable"));

// The tests run concurrently: each closes what it opened, newest first, when it finishes.
type Closable = { close(): Promise<unknown> };
type Track = <T extends Closable>(thing: T) => T;
function tracked(onTestFinished: (fn: () => Promise<void>) => void): Track {
  const mine: Closable[] = [];
  onTestFinished(async () => {
    for (const thing of mine.splice(0).reverse()) await thing.close();
  });
  return (thing) => (mine.push(thing), thing);
}

/** A backend under a prefix (and so a group) of its own, closed after the test. */
function backend(track: Track, options: Partial<KafkaBackendOptions> = {}): KafkaBackend {
  return track(
    new KafkaBackend({
      url,
      prefix: kafkaName("kb").replace(/-/g, "_"),
      logger: silentLogger,
      heartbeatIntervalMs: 300,
      sessionTimeoutMs: 6_000,
      fetchMaxWaitMs: 100,
      ...options,
    }),
  );
}

function spec(queue: string, options: JobOptions & { name?: string; data?: unknown } = {}) {
  const { name = "job", data = {}, ...rest } = options;
  return buildJobSpec({ queue, name, data, options: rest });
}

const A = { id: "worker-A", host: "host-A", pid: 4242 };

async function claimSoon(b: Backend, queue: string, limit: number): Promise<ClaimedJob[]> {
  const got: ClaimedJob[] = [];
  await waitFor(
    async () => {
      got.push(...(await b.claim({ queues: [queue], names: ["job"], worker: A, limit: limit - got.length, leaseMs: 30_000 })));
      return got.length >= limit;
    },
    { timeoutMs: 20_000, description: `${limit} jobs claimed on ${queue}` },
  );
  return got;
}

function worker(track: Track, b: Backend, queue: string, handlers: ConstructorParameters<typeof Worker>[0]["handlers"]): Worker {
  return track(new Worker({ backend: b, queues: queue, handlers, logger: silentLogger, maintenance: false, pollIntervalMs: 200, concurrency: 8 }));
}

describe.concurrent("KafkaBackend (mock broker, not Kafka)", () => {
  it(
    "the Worker on openBackend('kafka://…'): jobs run once; a failure is retried through the retry topic, then dead with the forensics headers; the dead letter is got, listed, replayed and removed",
    { timeout: 90_000 },
    async ({ onTestFinished }) => {
      const track = tracked(onTestFinished);
      const prefix = kafkaName("open").replace(/-/g, "_");
      const b = await openBackend(`${url}?prefix=${prefix}`);
      track(b);
      expect(b).toBeInstanceOf(KafkaBackend);
      const kb = b as KafkaBackend;
      const ran = new Map<number, number>();
      let failures = 0;
      let replayed = false;
      worker(track, b, "w", {
        job: async (job) => {
          const { n } = job.data as { n: number };
          ran.set(n, (ran.get(n) ?? 0) + 1);
          if (n === 0 && !replayed) {
            failures++;
            throw new Error(`boom ${job.attempt}`);
          }
        },
      });
      await b.enqueue([
        spec("w", { data: { n: 0 }, attempts: 2, backoff: { type: "fixed", delayMs: 50 }, jobId: "poison" }),
        ...Array.from({ length: 30 }, (_, i) => spec("w", { data: { n: i + 1 } })),
      ]);
      await waitFor(async () => (await b.list({ queue: "w", state: "dead" })).length === 1, { timeoutMs: 30_000, description: "the poison job dead" });
      await waitFor(() => ran.size === 31, { timeoutMs: 20_000, description: "every job run" });
      for (let n = 1; n <= 30; n++) expect(ran.get(n), `job ${n}`).toBe(1);
      expect(failures).toBe(2);

      // The retry copy went through the retry topic; the dead letter carries the forensics (read with kcat: librdkafka).
      const retries = await readTopic(url, kb.topics.retry("w"));
      expect(retries.map((r) => r.headers["conveyor-id"])).toEqual(["poison"]);
      expect(retries[0]!.headers).toMatchObject({ "conveyor-attempt": "2", "conveyor-error-message": "boom 1", "conveyor-source-topic": kb.topics.work("w") });
      const dead = await readTopic(url, kb.topics.dead("w"));
      expect(dead).toHaveLength(1);
      expect(dead[0]!.headers).toMatchObject({
        "conveyor-id": "poison",
        "conveyor-job": "job",
        "conveyor-attempt": "2",
        "conveyor-max-attempts": "2",
        "conveyor-dead-reason": "attempts-exhausted",
        "conveyor-error-name": "Error",
        "conveyor-error-message": "boom 2",
        "conveyor-host": hostname(),
        "conveyor-pid": String(process.pid),
        "conveyor-source-topic": kb.topics.retry("w"),
      });
      expect(dead[0]!.headers["conveyor-error-stack"]).toMatch(/boom 2/);

      const got = await b.get("poison", "w");
      expect(got).toMatchObject({ id: "poison", state: "dead", attempt: 2, error: { message: "boom 2" }, data: { n: 0 } });
      expect(got!.history.map((h) => h.outcome)).toEqual(["failed", "dead"]);
      // Not a dead letter: refused by name, never a wrong answer.
      const other = await b.enqueue([spec("w", { data: { n: 99 }, jobId: "not-dead", delayMs: 600_000 })]);
      await expect(b.get(other[0]!.id, "w")).rejects.toThrow(UnsupportedByStoreError);
      await expect(b.cancel("not-dead", "w")).rejects.toThrow(UnsupportedByStoreError);
      await expect(b.list({ queue: "w", state: "waiting" })).rejects.toThrow(UnsupportedByStoreError);

      // Replay: a fresh copy runs (and completes); the dead letter is gone, in this view and in a new one.
      replayed = true;
      expect(await b.replay("poison", "w")).toBe("replayed");
      await waitFor(() => ran.get(0) === 3, { timeoutMs: 20_000, description: "the replayed job run" });
      expect(await b.list({ queue: "w", state: "dead" })).toEqual([]);
      const fresh = backend(track, { prefix, groupId: `${prefix}.other` });
      expect(await fresh.list({ queue: "w", state: "dead" })).toEqual([]);
      expect(await fresh.replay("poison", "w")).toBe("not-found");
    },
  );

  it("remove hides a dead letter in every view; a record that is no Conveyor job is set aside in the dead topic, not run and not lost", async ({
    onTestFinished,
  }) => {
    const track = tracked(onTestFinished);
    const b = backend(track);
    worker(track, b, "r", {
      job: async () => {
        throw new UnrecoverableError("declined");
      },
    });
    const [r] = await b.enqueue([spec("r", { data: { n: 1 } })]);
    // A foreign record produced straight to the queue's topic by another client.
    const { Kafka, logLevel } = await import("kafkajs");
    const raw = new Kafka({ brokers: url.slice("kafka://".length).split(","), logLevel: logLevel.NOTHING }).producer();
    await raw.connect();
    await raw.send({ topic: b.topics.work("r"), acks: -1, messages: [{ key: "x", value: "not a job" }] });
    await raw.disconnect();
    await waitFor(async () => (await b.list({ queue: "r", state: "dead" })).length === 2, {
      timeoutMs: 30_000,
      description: "the dead job and the foreign record set aside",
    });
    const letters = await b.list({ queue: "r", state: "dead" });
    expect(letters.find((j) => j.id === r!.id)).toMatchObject({ state: "dead", error: { message: "declined" } });
    expect(letters.find((j) => j.id !== r!.id)).toMatchObject({ data: "not a job", error: { name: "ForeignMessage" } });
    expect(await b.remove(r!.id, "r")).toBe("removed");
    expect(await b.remove(r!.id, "r")).toBe("not-found");
    const other = backend(track, { prefix: b.topics.prefix, groupId: `${b.groupId}.reader` });
    expect((await other.list({ queue: "r", state: "dead" })).map((j) => j.id)).not.toContain(r!.id);
  });

  it("commits a partition only up to its first unsettled record: a new member gets exactly the records from there on", async ({ onTestFinished }) => {
    const track = tracked(onTestFinished);
    const b = backend(track);
    await b.enqueue(["one", "two", "three"].map((jobId) => spec("c", { jobId })));
    const claimed = await claimSoon(b, "c", 3);
    expect(claimed.map((c) => c.job.id)).toEqual(["one", "two", "three"]);
    const [one, two, three] = claimed as [ClaimedJob, ClaimedJob, ClaimedJob];
    expect(await b.complete([{ lease: one.lease, result: null }])).toEqual(["applied"]);
    expect(await b.complete([{ lease: three.lease, result: null }])).toEqual(["applied"]);
    // "three" is done, but "two" before it is not: the commit stops at "two".
    const lag = (await b.lag("c")).filter((l) => l.topic === b.topics.work("c"));
    expect(lag.reduce((n, l) => n + l.lag, 0)).toBe(2);
    expect((await b.heartbeat([two.lease], 30_000)).lost).toEqual([]);
    await b.close();
    // The member that takes over runs "two" again, and "three" (at least once), never "one".
    const next = backend(track, { prefix: b.topics.prefix });
    const again = await claimSoon(next, "c", 2);
    expect(again.map((c) => c.job.id)).toEqual(["two", "three"]);
    expect(again[0]!.job.attempt).toBe(1);
    expect(await next.complete(again.map((c) => ({ lease: c.lease, result: null })))).toEqual(["applied", "applied"]);
    await waitFor(async () => (await next.lag("c")).every((l) => l.lag === 0), { timeoutMs: 10_000, description: "the lag drained" });
    // The first member's lease on "two" is gone with it.
    expect(await b.complete([{ lease: two.lease, result: null }])).toEqual(["stale"]);
  });

  it("HTTP: enqueue accepted; a job's status and cancel are a clear 501 naming the capability", async ({ onTestFinished }) => {
    const track = tracked(onTestFinished);
    const b = backend(track, { queues: ["http"] });
    const app = await createServer({ backend: b, apiKeys: false, logger: false });
    track(app);
    const accepted = await app.inject({ method: "POST", url: "/v1/queues/http/jobs", payload: { name: "job", data: { n: 1 } } });
    expect(accepted.statusCode, accepted.body).toBe(202);
    const { jobId } = accepted.json<{ jobId: string }>();
    const status = await app.inject({ method: "GET", url: `/v1/jobs/${jobId}?queue=http` });
    expect(status.statusCode).toBe(501);
    expect(status.json()).toMatchObject({ type: "urn:conveyor:problem:not-supported-by-store", capability: "jobRecords" });
    expect(status.json<{ detail: string }>().detail).toMatch(/only dead letters can be looked up/);
    expect((await app.inject({ method: "DELETE", url: `/v1/jobs/${jobId}?queue=http` })).statusCode).toBe(501);
    expect((await app.inject({ method: "POST", url: "/v1/queues/http/pause" })).statusCode).toBe(501);
    const prioritized = await app.inject({ method: "POST", url: "/v1/queues/http/jobs", payload: { name: "job", data: {}, options: { priority: 3 } } });
    expect(prioritized.statusCode).toBe(422);
  });

  it(
    "the consumer lag is exported per partition (conveyor_kafka_consumer_lag, scraped by Prometheus) and is the /scaling backlog",
    { timeout: 90_000 },
    async ({ onTestFinished }) => {
      const track = tracked(onTestFinished);
      const b = backend(track, { partitionKey: "id" });
      await b.enqueue(Array.from({ length: 12 }, (_, i) => spec("lag", { data: { i } })));
      const metrics = new ConveyorMetrics({ backend: b, storeCacheMs: 1_000 });
      const server = track(
        await startMetricsServer(metrics, {
          port: 0,
          host: "127.0.0.1",
          scaling: { policy: { targetAgeSeconds: 60, jobsPerSecondPerWorker: 1, minWorkers: 0, maxWorkers: 10 } },
        }),
      );
      const prometheus = await PrometheusServer.start({ kafka: [`127.0.0.1:${server.address.port}`] }, 1);
      track({ close: () => prometheus.stop() });
      const lagOf = (group: string) => prometheus.value(`sum(conveyor_kafka_consumer_lag{group="${group}",topic="${b.topics.work("lag")}"})`);
      await waitFor(async () => (await lagOf(b.groupId)) === 12, { timeoutMs: 30_000, description: "Prometheus scraped a lag of 12" });
      // Per partition: keyed by id, the 12 records spread over the topic's partitions.
      const series = await prometheus.query(`conveyor_kafka_consumer_lag{group="${b.groupId}",topic="${b.topics.work("lag")}"}`);
      expect(series.length).toBeGreaterThan(1);
      expect(series.map((s) => s.metric.partition).every((p) => /^\d+$/.test(p!))).toBe(true);
      // The scaling endpoint's backlog for the queue is that lag.
      const scaling = (await (await fetch(`http://127.0.0.1:${server.address.port}/scaling?queue=lag`)).json()) as { backlog: number; desiredWorkers?: number };
      expect(scaling.backlog).toBe(12);
      // A worker drains it; the scraped lag follows down to 0.
      worker(track, b, "lag", { job: async () => undefined });
      await waitFor(async () => (await lagOf(b.groupId)) === 0, { timeoutMs: 40_000, description: "Prometheus scraped a lag of 0" });
    },
  );
});
