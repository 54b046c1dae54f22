/**
 * `npm run bench -- --metrics [--db URL] [--jobs 20000] [--single 2000] [--runs 5] [--concurrency 10]`
 * `npm run bench -- --metrics --stats-cost [--backlog 100000]` (bench/stats-cost.ts: one scrape's store query)
 *
 * What observability costs: processing throughput (no-op jobs, one process) and single-enqueue
 * throughput with
 *   off       no telemetry at all,
 *   metrics   ConveyorMetrics observing the worker (and counting enqueues), with the store gauges
 *             scraped every second during the run — 15× Prometheus's usual rate,
 *   tracing   ConveyorTracing with no OpenTelemetry SDK registered (the no-op API),
 *   traced    ConveyorTracing with an SDK recording every span (informative: the price of tracing on).
 * After one untimed warm-up round, modes run interleaved (each run starting one mode later) so
 * drift on a shared machine hits them alike; each figure is the median of `--runs`, with its
 * ratio to `off` (the median of per-round ratios). Wall-clock throughput swings with whatever
 * else the machine runs; this process's CPU time per job is the steadier measure of the cost. The default store is
 * a fresh SQLite file per run; `--db` takes any store URL (each run uses its own queue name).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { openBackend } from "../src/backend/open.js";
import { TypedEmitter, type WorkerEvents } from "../src/core/events.js";
import type { JobRecord } from "../src/core/job.js";
import { Queue, silentLogger, Worker, type Backend } from "../src/index.js";
import { ConveyorMetrics, ConveyorTracing, type JobTelemetry } from "../src/observability/index.js";
import { deferred, fmt, median, rate } from "./lib.js";

const { values } = parseArgs({
  options: {
    metrics: { type: "boolean", default: true },
    db: { type: "string" },
    jobs: { type: "string", default: "20000" },
    single: { type: "string", default: "2000" },
    runs: { type: "string", default: "5" },
    concurrency: { type: "string", default: "10" },
    "stats-cost": { type: "boolean", default: false },
    backlog: { type: "string", default: "100000" },
  },
});
if (values["stats-cost"]) {
  await (await import("./stats-cost.js")).main(Number(values.backlog));
  process.exit(process.exitCode ?? 0);
}
const JOBS = Number(values.jobs);
const SINGLE = Number(values.single);
const RUNS = Number(values.runs);
const CONCURRENCY = Number(values.concurrency);

type Mode = "off" | "metrics" | "tracing" | "traced";
const MODES: readonly Mode[] = ["off", "metrics", "tracing", "traced"];

const dirs: string[] = [];
async function freshBackend(): Promise<Backend> {
  if (values.db) return openBackend(values.db);
  const dir = mkdtempSync(join(tmpdir(), "conveyor-bench-metrics-"));
  dirs.push(dir);
  return openBackend(`sqlite:${join(dir, "bench.db")}`);
}

/** Sets up one mode: its telemetry, and what to undo afterwards. */
function setUp(mode: Mode, backend: Backend): { telemetry: JobTelemetry | undefined; metrics: ConveyorMetrics | null; tearDown: () => void } {
  if (mode === "off") return { telemetry: undefined, metrics: null, tearDown: () => undefined };
  if (mode === "metrics") {
    const metrics = new ConveyorMetrics({ backend, storeCacheMs: 1_000 });
    return { telemetry: metrics, metrics, tearDown: () => undefined };
  }
  if (mode === "traced") {
    const exporter = new InMemorySpanExporter();
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    return {
      telemetry: new ConveyorTracing(),
      metrics: null,
      tearDown: () => {
        trace.disable();
        context.disable();
      },
    };
  }
  return { telemetry: new ConveyorTracing(), metrics: null, tearDown: () => undefined };
}

let runNumber = 0;

/** One timed section: items per second of wall time, and this process's CPU time per item. */
interface Sample {
  perSecond: number;
  cpuMicrosPerItem: number;
}

async function timed(count: number, fn: () => Promise<unknown>): Promise<Sample> {
  const cpu0 = process.cpuUsage();
  const perSecond = await rate(count, fn);
  const cpu = process.cpuUsage(cpu0);
  return { perSecond, cpuMicrosPerItem: (cpu.user + cpu.system) / count };
}

/** Jobs/s processing JOBS pre-enqueued no-op jobs (the enqueue is not timed). */
async function processing(mode: Mode): Promise<Sample> {
  const backend = await freshBackend();
  const queueName = `bench-metrics-${process.pid}-${++runNumber}`;
  const { telemetry, metrics, tearDown } = setUp(mode, backend);
  try {
    const q = new Queue(queueName, { backend, ...(telemetry ? { telemetry } : {}) });
    for (let i = 0; i < JOBS; i += 1_000) await q.addBulk(Array.from({ length: Math.min(1_000, JOBS - i) }, (_, k) => ({ name: "noop", data: { i: i + k } })));
    const done = deferred();
    let completed = 0;
    let worker: Worker | undefined;
    let scrapes: NodeJS.Timeout | undefined;
    const r = await timed(JOBS, async () => {
      worker = new Worker({
        backend,
        queues: queueName,
        concurrency: CONCURRENCY,
        logger: silentLogger,
        maintenance: false,
        handlers: { noop: () => null },
        ...(telemetry ? { telemetry } : {}),
      });
      if (metrics) {
        metrics.observe(worker);
        scrapes = setInterval(() => void metrics.metrics(), 1_000);
      }
      worker.on("job:completed", () => {
        if (++completed === JOBS) done.resolve();
      });
      await done.promise;
    });
    clearInterval(scrapes);
    await worker?.close();
    return r;
  } finally {
    tearDown();
    await backend.close();
  }
}

/** Jobs/s of SINGLE sequential `queue.add` calls. */
async function singleEnqueue(mode: Mode): Promise<Sample> {
  const backend = await freshBackend();
  const { telemetry, tearDown } = setUp(mode, backend);
  try {
    const q = new Queue(`bench-metrics-${process.pid}-${++runNumber}`, { backend, ...(telemetry ? { telemetry } : {}) });
    return await timed(SINGLE, async () => {
      for (let i = 0; i < SINGLE; i++) await q.add("noop", { i });
    });
  } finally {
    tearDown();
    await backend.close();
  }
}

async function figure(label: string, fn: (mode: Mode) => Promise<Sample>): Promise<void> {
  const results = new Map<Mode, Sample[]>(MODES.map((m) => [m, []]));
  // One untimed round first: the JIT warms up on whichever mode runs first otherwise.
  for (const mode of MODES) await fn(mode);
  // Interleaved: every round measures every mode once, starting one mode later each round.
  for (let i = 0; i < RUNS; i++) {
    for (let k = 0; k < MODES.length; k++) {
      const mode = MODES[(i + k) % MODES.length]!;
      results.get(mode)!.push(await fn(mode));
    }
  }
  const off = results.get("off")!;
  // Ratios per round (neighbours in time share the machine's load), then their median.
  const ratio = (mode: Mode, pick: (s: Sample) => number) => median(results.get(mode)!.map((s, i) => pick(s) / pick(off[i]!)));
  console.log(`  ${label}`);
  console.log(
    `    ${"mode".padEnd(8)} ${"jobs/s".padStart(8)}  ${"vs off".padStart(7)}  ${"CPU µs/job".padStart(10)}  ${"vs off".padStart(7)}   runs (jobs/s)`,
  );
  for (const mode of MODES) {
    const xs = results.get(mode)!;
    const pct = (r: number) => (mode === "off" ? "" : `${(r * 100).toFixed(1)}%`).padStart(7);
    console.log(
      `    ${mode.padEnd(8)} ${fmt(median(xs.map((s) => s.perSecond))).padStart(8)}  ${pct(ratio(mode, (s) => s.perSecond))}  ` +
        `${fmt(median(xs.map((s) => s.cpuMicrosPerItem))).padStart(10)}  ${pct(ratio(mode, (s) => s.cpuMicrosPerItem))}   ${xs.map((s) => fmt(s.perSecond)).join(", ")}`,
    );
  }
}

/** An emitter whose emit is public, to drive the metrics' listeners without a worker. */
class Events extends TypedEmitter<WorkerEvents> {
  readonly concurrency = 10;
  readonly busySlotCount = 0;
  readonly bufferedCount = 0;
  fire<K extends keyof WorkerEvents>(event: K, payload: WorkerEvents[K]): void {
    this.emit(event, payload);
  }
}

/**
 * The per-job price in isolation, steadier than throughput on a busy machine: nanoseconds per job
 * of the metrics' listeners (a start and a completion event) and of a traced attempt with no SDK.
 */
async function perJobCost(): Promise<void> {
  const N = 1_000_000;
  const job = { id: "j", queue: "bench", name: "noop", attempt: 1, maxAttempts: 3, meta: null } as unknown as JobRecord;
  const time = async (fn: () => unknown): Promise<number> => {
    for (let i = 0; i < N / 10; i++) await fn();
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < N; i++) await fn();
    return Number(process.hrtime.bigint() - t0) / N;
  };
  const plain = new Events();
  const observed = new Events();
  new ConveyorMetrics().observe(observed);
  const started = { job, workerId: "w", waitMs: 3 };
  const completed = { job, result: null, durationMs: 0.4 };
  const emitBoth = (e: Events) => () => {
    e.fire("job:started", started);
    e.fire("job:completed", completed);
  };
  const bare = median([await time(emitBoth(plain)), await time(emitBoth(plain)), await time(emitBoth(plain))]);
  const withMetrics = median([await time(emitBoth(observed)), await time(emitBoth(observed)), await time(emitBoth(observed))]);
  const run = async () => null;
  const tracing = new ConveyorTracing();
  const direct = median([await time(run), await time(run), await time(run)]);
  const traced = median([
    await time(() => tracing.attempt(job, run)),
    await time(() => tracing.attempt(job, run)),
    await time(() => tracing.attempt(job, run)),
  ]);
  console.log("  per job, in isolation (medians of 3 × 1M)");
  console.log(`    metrics listeners (start + completion)   ${(withMetrics - bare).toFixed(0)} ns   (events alone ${bare.toFixed(0)} ns)`);
  console.log(`    traced attempt, no SDK registered        ${(traced - direct).toFixed(0)} ns   (the bare call ${direct.toFixed(0)} ns)`);
}

const store = values.db ? values.db.replace(/\/\/[^@/]*@/, "//") : "sqlite (fresh file per run)";
console.log(`Conveyor observability cost: ${store}, ${JOBS} jobs, concurrency ${CONCURRENCY}, medians of ${RUNS} interleaved runs, node ${process.version}\n`);
await perJobCost();
await figure(`processing (${JOBS} no-op jobs)`, processing);
await figure(`single enqueue (${SINGLE} sequential add)`, singleEnqueue);
for (const d of dirs) rmSync(d, { recursive: true, force: true });
