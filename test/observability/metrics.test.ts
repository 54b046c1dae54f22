/**
 * ConveyorMetrics in one process: counters and histograms fed by a real Worker's events, store
 * gauges from one cached stats() query per scrape, the scaling endpoint, and mounting into a
 * user's own registry and Fastify app. Read back with prom-client's own parser-free API
 * (`getMetricsAsJSON`) and the text a scrape returns.
 */
import { connect } from "node:net";
import Fastify from "fastify";
import { Histogram, Registry } from "prom-client";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { FakeClock, Queue, silentLogger, UnrecoverableError, Worker } from "../../src/index.js";
import { conveyorHttp } from "../../src/http/index.js";
import { ConveyorMetrics, conveyorMetricsRoutes, MetricsEndpoints, startMetricsServer } from "../../src/observability/index.js";
import { JobCounter, JobHistogram } from "../../src/observability/series.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const temp = new TempDirs();
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
afterAll(() => temp.removeAll());

async function store(clock?: FakeClock): Promise<SqliteBackend> {
  const b = new SqliteBackend({ path: await temp.file("jobs.db"), ...(clock ? { clock } : {}) });
  cleanups.push(() => b.close());
  return b;
}

/** Counts stats() calls: the store-load figure the cache exists for. */
function countingStats(backend: Backend): { calls: () => number } {
  let calls = 0;
  const original = backend.stats.bind(backend);
  backend.stats = (queue?: string) => {
    calls++;
    return original(queue);
  };
  return { calls: () => calls };
}

async function value(registry: Registry, name: string, labels: Record<string, string> = {}): Promise<number | undefined> {
  const metric = registry.getSingleMetric(name);
  if (!metric) throw new Error(`no metric ${name}`);
  const { values } = await metric.get();
  const match = values.filter((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l));
  if (match.length === 0) return undefined;
  return match.reduce((sum, v) => sum + v.value, 0);
}

describe("ConveyorMetrics", () => {
  it("counts outcomes per queue and job name from a worker's events, with run- and wait-time histograms", async () => {
    const backend = await store();
    const metrics = new ConveyorMetrics();
    const queue = new Queue("mail", { backend, telemetry: metrics });
    const worker = new Worker({
      backend,
      queues: "mail",
      pollIntervalMs: 20,
      logger: silentLogger,
      autostart: false,
      handlers: {
        send: async () => "sent",
        bounce: async (job) => {
          if (job.attempt < 2) throw new Error("try again");
          throw new UnrecoverableError("no such mailbox");
        },
      },
    });
    cleanups.push(() => worker.close({ force: true }));
    metrics.observe(worker);
    await queue.add("send", {}, { jobId: "s1" });
    await queue.add("send", {}, { jobId: "s2" });
    await queue.add("send", {}, { jobId: "s1" }); // a duplicate: stored once, counted once
    await queue.add("bounce", {}, { backoff: { type: "fixed", delayMs: 1 } });
    worker.run();
    const r = metrics.registry;
    await waitFor(async () => (await value(r, "conveyor_jobs_dead_total", { queue: "mail", name: "bounce" })) === 1, { timeoutMs: 10_000 });
    await waitFor(async () => (await value(r, "conveyor_jobs_completed_total", { name: "send" })) === 2);
    expect(await value(r, "conveyor_jobs_enqueued_total", { queue: "mail", name: "send" })).toBe(2);
    expect(await value(r, "conveyor_jobs_enqueued_total", { queue: "mail", name: "bounce" })).toBe(1);
    expect(await value(r, "conveyor_jobs_started_total", { name: "bounce" })).toBe(2);
    expect(await value(r, "conveyor_jobs_failed_total", { name: "bounce" })).toBe(2);
    expect(await value(r, "conveyor_jobs_retried_total", { name: "bounce" })).toBe(1);
    expect(await value(r, "conveyor_jobs_completed_total", { name: "bounce" })).toBe(0); // exported at 0, so rate() sees the first one
    expect(await value(r, "conveyor_job_duration_seconds", { name: "send" })).toBeGreaterThan(0);
    const text = await metrics.metrics();
    expect(text).toMatch(/conveyor_job_duration_seconds_count\{queue="mail",name="send"\} 2/);
    expect(text).toMatch(/conveyor_job_wait_seconds_count\{queue="mail",name="bounce"\} 2/);
    expect(text).toMatch(/conveyor_job_duration_seconds_bucket\{le="0.001",queue="mail",name="send"\}/);
    expect(text).toMatch(/conveyor_job_duration_seconds_bucket\{le="600",queue="mail",name="send"\}/);
    // Labels are queue and name only: never a job id.
    expect(text).not.toMatch(/s1|s2/);
    expect(await value(r, "conveyor_worker_slots")).toBe(10);
  });

  it("counts lease expiries the rescuer finds, and which went back to waiting or to dead", async () => {
    const clock = new FakeClock(1_000_000);
    const backend = await store(clock);
    const metrics = new ConveyorMetrics();
    await new Queue("q", { backend }).add("slow", {}, { attempts: 1 });
    await new Queue("q", { backend }).add("slow", {}, { attempts: 5 });
    await new Queue("q", { backend }).add("slow", {}, { attempts: 5 });
    // A worker that died holding the three leases.
    await backend.claim({ queues: ["q"], names: ["slow"], worker: { id: "gone", host: "h", pid: 1 }, limit: 3, leaseMs: 1_000 });
    clock.advance(5_000);
    const worker = new Worker({ backend, queues: "q", handlers: { other: async () => null }, logger: silentLogger, maintenance: { rescueIntervalMs: 10 } });
    cleanups.push(() => worker.close({ force: true }));
    metrics.observe(worker);
    const r = metrics.registry;
    await waitFor(async () => (await value(r, "conveyor_lease_expiries_total", { queue: "q", name: "slow" })) === 3, { timeoutMs: 10_000 });
    expect(await value(r, "conveyor_jobs_rescued_total", { name: "slow" })).toBe(2);
    expect(await value(r, "conveyor_jobs_quarantined_total", { name: "slow" })).toBe(1);
    expect(await value(r, "conveyor_jobs_dead_total", { name: "slow" })).toBe(1);
  });

  it("store gauges: depth by state and oldest age from one stats() per cache period, however many scrapes", async () => {
    const clock = new FakeClock(10_000_000);
    const backend = await store(clock);
    const stats = countingStats(backend);
    const metrics = new ConveyorMetrics({ backend, storeCacheMs: 60_000 });
    const q = new Queue("reports", { backend });
    await q.add("render", {});
    clock.advance(90_000);
    await q.add("render", {});
    await q.add("render", {}, { delayMs: 60_000 });
    await Promise.all([metrics.metrics(), metrics.metrics(), metrics.metrics()]);
    await metrics.metrics();
    expect(stats.calls()).toBe(1);
    const r = metrics.registry;
    expect(await value(r, "conveyor_queue_jobs", { queue: "reports", state: "waiting" })).toBe(2);
    expect(await value(r, "conveyor_queue_jobs", { queue: "reports", state: "scheduled" })).toBe(1);
    expect(await value(r, "conveyor_queue_oldest_waiting_age_seconds", { queue: "reports" })).toBe(90);
    expect(await value(r, "conveyor_store_up")).toBe(1);

    // A store that fails: gauges left out, the failure counted, the endpoint says 503.
    const failing = await store();
    failing.stats = () => Promise.reject(new Error("store down"));
    const broken = new ConveyorMetrics({ backend: failing, storeCacheMs: 1_000 });
    const text = await broken.metrics();
    expect(text).toMatch(/^conveyor_store_up 0$/m);
    expect(text).toMatch(/^conveyor_store_stats_errors_total 1$/m);
    expect(text).not.toMatch(/^conveyor_queue_jobs\{/m);

    // A store that answered once and then fails: the age of the statistics last obtained keeps
    // growing, not repeated as it was (an alert on their age would otherwise never fire).
    const flaky = await store();
    const answer = flaky.stats.bind(flaky);
    let down = false;
    flaky.stats = (queue?: string) => (down ? Promise.reject(new Error("store down")) : answer(queue));
    const later = new ConveyorMetrics({ backend: flaky, storeCacheMs: 1_000 });
    expect(await later.metrics()).toMatch(/^conveyor_store_stats_age_seconds \d/m);
    down = true;
    const afterFailure = await waitFor(
      async () => {
        const scrape = await later.metrics();
        return /^conveyor_store_up 0$/m.test(scrape) ? scrape : null;
      },
      { timeoutMs: 5_000, intervalMs: 100 },
    );
    const age = Number(/^conveyor_store_stats_age_seconds (\S+)$/m.exec(afterFailure)?.[1]);
    // The 1 s cache expired before the failing query: the statistics are older than that.
    expect(age).toBeGreaterThanOrEqual(1);
  });

  it("a wall clock stepped back (NTP, a VM resumed) does not freeze the cached store figures", async () => {
    const backend = await store();
    const stats = countingStats(backend);
    const metrics = new ConveyorMetrics({ backend, storeCacheMs: 1_000 });
    await metrics.storeSnapshot();
    expect(stats.calls()).toBe(1);
    // The system clock jumps an hour back: the cache must still expire after about one second.
    const realNow = Date.now.bind(Date);
    const stepBack = vi.spyOn(Date, "now").mockImplementation(() => realNow() - 3_600_000);
    try {
      await waitFor(
        async () => {
          await metrics.storeSnapshot();
          return stats.calls() === 2;
        },
        { timeoutMs: 5_000, intervalMs: 100, description: "a second stats() query once the 1 s cache has expired" },
      );
      expect(await value(metrics.registry, "conveyor_store_stats_age_seconds")).toBeLessThan(1);
    } finally {
      stepBack.mockRestore();
    }
  });

  it("its cheap histograms and counters expose exactly what prom-client's own classes expose", async () => {
    const buckets = [0.001, 0.01, 0.1, 1, 10];
    const observations = [0, 0.0005, 0.001, 0.002, 0.05, 0.1, 0.7, 3, 12, 99, 0.01];
    const theirs = new Registry();
    const ours = new Registry();
    const reference = new Histogram({ name: "h_seconds", help: "h", labelNames: ["queue", "name"], buckets, registers: [theirs] });
    const mine = new JobHistogram("h_seconds", "h", buckets, [ours]);
    for (const [queue, name] of [
      ["a", "x"],
      ["b", "y"],
    ] as const) {
      const series = mine.for({ queue, name });
      for (const v of observations) {
        reference.observe({ queue, name }, v);
        series.observe(v);
      }
    }
    expect(await ours.metrics()).toBe(await theirs.metrics());

    const counterRegistry = new Registry();
    const counter = new JobCounter("c_total", "c", [counterRegistry]);
    counter.for({ queue: "a", name: "x" }).n += 3;
    counter.for({ queue: "b", name: "y" });
    expect(await counterRegistry.metrics()).toBe('# HELP c_total c\n# TYPE c_total counter\nc_total{queue="a",name="x"} 3\nc_total{queue="b",name="y"} 0\n');
  });

  it("refuses a cache shorter than one second and unordered buckets, saying what to pass", () => {
    expect(() => new ConveyorMetrics({ storeCacheMs: 100 })).toThrow(/storeCacheMs must be an integer of at least 1000/);
    expect(() => new ConveyorMetrics({ durationBuckets: [1, 0.5] })).toThrow(/increasing positive numbers of seconds/);
  });

  it("bounds the (queue, name) series a client can create: past maxLabelSets they share _other", async () => {
    const backend = await store();
    expect(() => new ConveyorMetrics({ maxLabelSets: 0 })).toThrow(/maxLabelSets must be a positive integer/);
    const metrics = new ConveyorMetrics({ maxLabelSets: 3 });
    // No job types registered, so the HTTP API takes any job name: a key with the enqueue scope
    // picks the label values.
    const app = Fastify();
    await app.register(conveyorHttp, { backend, telemetry: metrics, apiKeys: false });
    cleanups.push(() => app.close());
    const jobs = Array.from({ length: 50 }, (_, i) => ({ name: `spam-${i}`, data: null }));
    const res = await app.inject({ method: "POST", url: "/v1/queues/spam/jobs/bulk", payload: { jobs } });
    expect(res.statusCode).toBeLessThan(300);
    const enqueued = (await metrics.registry.getSingleMetricAsString("conveyor_jobs_enqueued_total")).split("\n").filter((l) => !l.startsWith("#") && l !== "");
    expect(enqueued).toEqual([
      'conveyor_jobs_enqueued_total{queue="spam",name="spam-0"} 1',
      'conveyor_jobs_enqueued_total{queue="spam",name="spam-1"} 1',
      'conveyor_jobs_enqueued_total{queue="spam",name="spam-2"} 1',
      'conveyor_jobs_enqueued_total{queue="_other",name="_other"} 47',
    ]);
    expect(await metrics.registry.getSingleMetricAsString("conveyor_metrics_label_sets_overflow_total")).toMatch(
      /^conveyor_metrics_label_sets_overflow_total 47$/m,
    );
  });

  it("a store that does not answer leaves its gauges out after storeTimeoutMs, not the whole scrape", async () => {
    const backend = await store();
    await new Queue("video", { backend }).add("encode", {});
    // The statistics query hangs (a stuck connection) until the test lets it go.
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let queries = 0;
    const original = backend.stats.bind(backend);
    backend.stats = async (queue?: string) => {
      queries++;
      await gate;
      return original(queue);
    };
    expect(() => new ConveyorMetrics({ storeTimeoutMs: 0 })).toThrow(/storeTimeoutMs must be a positive integer/);
    const metrics = new ConveyorMetrics({ backend, storeTimeoutMs: 300 });
    const hung = new Promise<string>((resolve) => setTimeout(() => resolve("the scrape hung"), 10_000).unref());
    for (let scrape = 0; scrape < 2; scrape++) {
      const text = await Promise.race([metrics.metrics(), hung]);
      expect(text).toMatch(/^conveyor_store_up 0$/m);
      expect(text).toMatch(/^conveyor_worker_slots 0$/m);
      expect(text).not.toMatch(/conveyor_queue_jobs\{/);
    }
    // One stuck query, counted once, not one more per scrape.
    expect(queries).toBe(1);
    expect(await metrics.registry.getSingleMetricAsString("conveyor_store_stats_errors_total")).toMatch(/ 1$/m);
    const server = await startMetricsServer(metrics, { port: 0 });
    cleanups.push(() => server.close());
    expect((await fetch(`http://127.0.0.1:${server.address.port}/scaling?queue=video`)).status).toBe(503);
    release();
    await waitFor(async () => /conveyor_queue_jobs\{queue="video",state="waiting"\} 1/.test(await metrics.metrics()), { timeoutMs: 5_000, intervalMs: 50 });
    expect(queries).toBe(1);
  });

  it("answers a request target that is not a URL with a 400, not a 500", async () => {
    const server = await startMetricsServer(new ConveyorMetrics(), { port: 0 });
    cleanups.push(() => server.close());
    const reply = await new Promise<string>((resolve, reject) => {
      const socket = connect(server.address.port, "127.0.0.1", () => socket.write("GET //[ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
      let text = "";
      socket.on("data", (chunk) => (text += String(chunk)));
      socket.on("end", () => resolve(text));
      socket.on("error", reject);
    });
    expect(reply).toMatch(/^HTTP\/1\.1 400 /);
    expect(reply).toMatch(/not a valid request path/);
  });

  it("/scaling evaluates the policy once per store snapshot: polling more often does not scale faster", async () => {
    const clock = new FakeClock(Date.now());
    const backend = await store(clock);
    const stats = countingStats(backend);
    // Lagging: waiting 120 s against a 30 s target, so each evaluation steps out by one.
    await new Queue("video", { backend }).add("encode", {}, { runAt: clock.now() - 120_000 });
    const metrics = new ConveyorMetrics({ backend, storeCacheMs: 60_000 });
    const server = await startMetricsServer(metrics, { port: 0, scaling: { policy: { targetAgeSeconds: 30, jobsPerSecondPerWorker: 10 } } });
    cleanups.push(() => server.close());
    const desired = async (path: string) => {
      const body = (await (await fetch(`http://127.0.0.1:${server.address.port}${path}`)).json()) as {
        desiredWorkers?: number;
        queues?: Array<{ desiredWorkers: number }>;
      };
      return body.desiredWorkers ?? body.queues![0]!.desiredWorkers;
    };
    // KEDA, a second KEDA and a person with curl all polling the same cached snapshot.
    const answers = [];
    for (let i = 0; i < 6; i++) answers.push(await desired(i % 2 === 0 ? "/scaling?queue=video" : "/scaling"));
    expect(stats.calls()).toBe(1);
    expect(answers).toEqual([1, 1, 1, 1, 1, 1]);
  });

  it("serves /metrics and /scaling on its own port and inside a user's registry and Fastify app", async () => {
    const backend = await store();
    // Waiting for 40 s: past half the 60 s target, so the endpoint scales out rather than holding.
    await new Queue("video", { backend }).add("encode", {}, { runAt: Date.now() - 40_000 });
    await new Queue("video", { backend }).add("encode", {}, { jobId: "newer" });
    const registry = new Registry();
    registry.setDefaultLabels({ app: "shop" });
    const metrics = new ConveyorMetrics({ backend, registry, storeCacheMs: 1_000 });
    expect(metrics.registry).toBe(registry);

    const server = await startMetricsServer(metrics, { port: 0, scaling: { policy: { targetAgeSeconds: 60, jobsPerSecondPerWorker: 0.01 } } });
    cleanups.push(() => server.close());
    const base = `http://127.0.0.1:${server.address.port}`;
    const scrape = await fetch(`${base}/metrics`);
    expect(scrape.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(await scrape.text()).toMatch(/conveyor_queue_jobs\{queue="video",state="waiting",app="shop"\} 2/);
    const one = (await (await fetch(`${base}/scaling?queue=video`)).json()) as Record<string, unknown>;
    // 2 jobs at 0.01 jobs/s per worker within 60 s: 2 / 0.6 → 4 workers.
    expect(one).toMatchObject({ queue: "video", backlog: 2, active: 0, paused: false, desiredWorkers: 4 });
    expect(((await (await fetch(`${base}/scaling`)).json()) as { queues: unknown[] }).queues).toHaveLength(1);
    // The backlog halves while the age stays in the dead band: hold the last answer (4), not drop
    // to the 2 workers the backlog alone would need.
    await backend.cancel("newer");
    const next = await waitFor(
      async () => {
        const a = (await (await fetch(`${base}/scaling?queue=video`)).json()) as { backlog: number; desiredWorkers: number };
        return a.backlog === 1 ? a : null;
      },
      { timeoutMs: 5_000, intervalMs: 100 },
    );
    expect(next.desiredWorkers).toBe(4);
    // Paused, its backlog cannot be worked off: step in, never out.
    await backend.pause("video");
    const paused = await waitFor(
      async () => {
        const p = (await (await fetch(`${base}/scaling?queue=video`)).json()) as { paused: boolean; desiredWorkers: number };
        return p.paused ? p : null;
      },
      { timeoutMs: 5_000, intervalMs: 100 },
    );
    expect(paused.desiredWorkers).toBe(3);
    await backend.resume("video");
    const unknown = await fetch(`${base}/scaling?queue=nope`);
    expect(unknown.status).toBe(404);
    expect(await unknown.text()).toMatch(/no queue named \\"nope\\".*known: video/);
    expect((await fetch(`${base}/other`)).status).toBe(404);
    expect((await fetch(`${base}/metrics`, { method: "POST" })).status).toBe(405);

    const app = Fastify();
    await app.register(conveyorMetricsRoutes, { metrics, prefix: "/internal" });
    cleanups.push(() => app.close());
    const res = await app.inject({ method: "GET", url: "/internal/metrics" });
    expect(res.statusCode).toBe(200);
    expect(res.body).toMatch(/# TYPE conveyor_jobs_completed_total counter/);
    expect((await app.inject({ method: "GET", url: "/internal/scaling?queue=video" })).json()).toMatchObject({ backlog: 1 });
  });

  it("/scaling with the queue parameter given twice answers 400 asking for one queue, on its own port and in Fastify", async () => {
    const backend = await store();
    await new Queue("a", { backend }).add("x", {});
    await new Queue("b", { backend }).add("x", {});
    const metrics = new ConveyorMetrics({ backend });
    const server = await startMetricsServer(metrics, { port: 0 });
    cleanups.push(() => server.close());
    const res = await fetch(`http://127.0.0.1:${server.address.port}/scaling?queue=a&queue=b`);
    expect(res.status).toBe(400);
    expect(await res.text()).toMatch(/give at most one queue/);
    // One queue still answers that queue alone.
    expect(await (await fetch(`http://127.0.0.1:${server.address.port}/scaling?queue=a`)).json()).toMatchObject({ queue: "a", backlog: 1 });

    const app = Fastify();
    await app.register(conveyorMetricsRoutes, { metrics });
    cleanups.push(() => app.close());
    const injected = await app.inject({ method: "GET", url: "/scaling?queue=a&queue=b" });
    expect(injected.statusCode).toBe(400);
    expect(injected.body).toMatch(/give at most one queue/);
  });

  it("store gauges keep series for at most maxLabelSets queues; the rest are summed under _other and counted; /scaling remembers at most as many", async () => {
    const backend = await store();
    // Queues a hostile key could create by enqueueing: five, for a bound of two.
    for (const [queue, jobs] of [
      ["a", 1],
      ["b", 2],
      ["c", 3],
      ["d", 4],
      ["e", 5],
    ] as const) {
      const q = new Queue(queue, { backend });
      for (let i = 0; i < jobs; i++) await q.add("x", {}, i === 0 && queue === "d" ? { runAt: Date.now() - 60_000 } : {});
    }
    await backend.pause("e");
    const metrics = new ConveyorMetrics({ backend, maxLabelSets: 2 });
    const text = await metrics.metrics();
    const queuesOf = (name: string) => new Set([...text.matchAll(new RegExp(`^${name}\\{queue="([^"]+)"`, "gm"))].map((m) => m[1]));
    for (const gauge of ["conveyor_queue_jobs", "conveyor_queue_oldest_waiting_age_seconds", "conveyor_queue_paused"]) {
      expect(queuesOf(gauge)).toEqual(new Set(["a", "b", "_other"]));
    }
    // c + d + e: every job still counted, under _other.
    expect(await value(metrics.registry, "conveyor_queue_jobs", { queue: "_other", state: "waiting" })).toBe(12);
    expect(await value(metrics.registry, "conveyor_queue_jobs", { queue: "a", state: "waiting" })).toBe(1);
    expect(await value(metrics.registry, "conveyor_queue_paused", { queue: "_other" })).toBe(1);
    expect(await value(metrics.registry, "conveyor_queue_oldest_waiting_age_seconds", { queue: "_other" })).toBeGreaterThanOrEqual(59);
    expect(await value(metrics.registry, "conveyor_metrics_queues_folded")).toBe(3);

    // The scaling endpoint evaluates every queue but keeps its last answer for two at most.
    const endpoints = new MetricsEndpoints(metrics, { policy: { targetAgeSeconds: 60, jobsPerSecondPerWorker: 1 } });
    const all = JSON.parse((await endpoints.scalingJson(null)).body) as { queues: Array<{ queue: string }> };
    expect(all.queues.map((q) => q.queue)).toEqual(["a", "b", "c", "d", "e"]);
    expect(endpoints.rememberedQueues).toBe(2);
  });
});
