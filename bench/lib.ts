/**
 * Small helpers shared by the benchmarks (bench/sqlite.ts, bench/postgres.ts, bench/redis.ts):
 * statistics, rate timing, Conveyor's processing run, and the side-by-side table with
 * Conveyor/peer ratios.
 */
import { Queue, silentLogger, Worker, type Backend } from "../src/index.js";

export const median = (xs: readonly number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Nearest-rank percentile (p in 0..100) of the samples. */
export const percentile = (xs: readonly number[], p: number): number =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

export function fmt(n: number): string {
  if (!Number.isFinite(n)) return "-";
  return n >= 100 ? Math.round(n).toLocaleString("en-US") : n.toFixed(2);
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Items per second of `count` items done by `fn`. */
export async function rate(count: number, fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return count / ((performance.now() - t0) / 1000);
}

/** A promise plus its resolver, for "wait until the handler saw the N-th job". */
export function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/**
 * Enqueue-to-start latency: `enqueue(i)` adds one job into an idle worker whose handler calls
 * the `started` callback it was handed; we time from before the enqueue to that call, then
 * pause (`gapMs`, default 2 ms) so each sample starts from an idle worker again. A polling worker
 * needs a random gap: a fixed one would land every enqueue at the same phase of its poll cycle.
 */
export async function latencySamples(
  samples: number[],
  count: number,
  enqueue: (i: number) => Promise<unknown>,
  setStarted: (fn: () => void) => void,
  gapMs: () => number = () => 2,
): Promise<number[]> {
  for (let i = 0; i < count; i++) {
    const started = deferred();
    setStarted(started.resolve);
    const t0 = performance.now();
    await enqueue(i);
    await started.promise;
    samples.push(performance.now() - t0);
    await sleep(gapMs());
  }
  return samples;
}

/** The figures every side-by-side benchmark reports, one system at a time. */
export interface Subject {
  readonly name: string;
  /** Jobs/s enqueueing `jobs` in one bulk call. */
  bulk(jobs: number): Promise<number>;
  /** Jobs/s of `count` sequential single enqueues. */
  single(count: number): Promise<number>;
  /** Jobs/s processing `jobs` pre-enqueued no-op jobs in one process at `concurrency`. */
  processing(jobs: number, concurrency: number): Promise<number>;
  /** Enqueue-to-start latency samples in ms. */
  latency(samples: number): Promise<number[]>;
  /** Bytes of server memory per waiting job, by whatever measures the backend offers. */
  memory?: (jobs: number) => Promise<Record<string, number>>;
}

export interface BenchSizes {
  jobs: number;
  single: number;
  samples: number;
  runs: number;
}

interface Row {
  label: string;
  unit: string;
  values: number[];
}

/**
 * Runs every figure for every subject, figure by figure (so a burst of load from other processes
 * hits all subjects of one figure alike rather than one whole subject), `runs` times each, and
 * keeps the median. Progress goes to stderr so stdout is just the table.
 */
export async function runSideBySide(subjects: readonly Subject[], sizes: BenchSizes): Promise<Row[]> {
  const rows: Row[] = [];
  const progress = (msg: string) => process.stderr.write(`  .. ${msg}\n`);
  const figure = async (label: string, unit: string, fn: (s: Subject) => Promise<number>) => {
    const values: number[] = [];
    for (const s of subjects) {
      progress(`${s.name}: ${label}`);
      const xs: number[] = [];
      for (let i = 0; i < sizes.runs; i++) xs.push(await fn(s));
      values.push(median(xs));
    }
    rows.push({ label, unit, values });
  };
  await figure(`bulk enqueue (${sizes.jobs} jobs)`, "jobs/s", (s) => s.bulk(sizes.jobs));
  await figure(`single enqueue (${sizes.single} sequential)`, "jobs/s", (s) => s.single(sizes.single));
  await figure(`processing, concurrency 10`, "jobs/s", (s) => s.processing(sizes.jobs, 10));
  await figure(`processing, concurrency 50`, "jobs/s", (s) => s.processing(sizes.jobs, 50));

  // Latency: each run gives one p50/p95/p99; the median over runs of each percentile is reported.
  const runsPerSubject: number[][][] = [];
  for (const s of subjects) {
    progress(`${s.name}: latency`);
    const all: number[][] = [];
    for (let i = 0; i < sizes.runs; i++) all.push(await s.latency(sizes.samples));
    runsPerSubject.push(all);
  }
  for (const p of [50, 95, 99]) {
    rows.push({
      label: `latency p${p} (${sizes.samples} samples)`,
      unit: "ms",
      values: runsPerSubject.map((all) => median(all.map((samples) => percentile(samples, p)))),
    });
  }

  if (subjects.some((s) => s.memory)) {
    const perSubject: Record<string, number>[] = [];
    for (const s of subjects) {
      progress(`${s.name}: memory`);
      const all: Record<string, number>[] = [];
      for (let i = 0; i < sizes.runs; i++) all.push((await s.memory?.(sizes.jobs)) ?? {});
      const keys = Object.keys(all[0]!);
      perSubject.push(Object.fromEntries(keys.map((k) => [k, median(all.map((m) => m[k] ?? NaN))])));
    }
    const keys = [...new Set(perSubject.flatMap((m) => Object.keys(m)))];
    for (const k of keys) {
      rows.push({ label: `memory per waiting job (${k})`, unit: "bytes", values: perSubject.map((m) => m[k] ?? NaN) });
    }
  }
  return rows;
}

/**
 * Prints the rows as a table: one column per subject, then one ratio column per peer, always
 * first subject (Conveyor) divided by the peer. For jobs/s above 1 means Conveyor is ahead; for
 * ms and bytes below 1 does.
 */
export function printTable(subjects: readonly Subject[], rows: readonly Row[]): void {
  const names = subjects.map((s) => s.name);
  const header = ["figure", "unit", ...names, ...names.slice(1).map((n) => `${names[0]}/${n}`)];
  const body = rows.map((r) => [
    r.label,
    r.unit,
    ...r.values.map(fmt),
    ...r.values.slice(1).map((v) => (v > 0 && Number.isFinite(v) ? `${(r.values[0]! / v).toFixed(2)}x` : "-")),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((line) => line[i]!.length)));
  const line = (cells: readonly string[]) =>
    cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ");
  console.log(line(header));
  console.log(widths.map((w) => "-".repeat(w)).join("  "));
  for (const cells of body) console.log(line(cells));
  console.log(`\nRatios are ${names[0]} divided by the peer: above 1 is better for jobs/s, below 1 is better for ms and bytes.`);
}

/** Jobs per enqueue call when filling a queue before a processing run. */
export const FILL_CHUNK = 5_000;

/**
 * Conveyor's processing figure, the same on every backend: fills queue "bench" with `n` no-op
 * jobs, then times one Worker at `concurrency` until every completion is committed
 * (`job:completed` fires after the store accepted it). Closes the worker, not the backend.
 */
export async function conveyorProcessing(backend: Backend, n: number, concurrency: number, prefetch = 0): Promise<number> {
  const q = new Queue("bench", { backend });
  for (let i = 0; i < n; i += FILL_CHUNK) {
    await q.addBulk(Array.from({ length: Math.min(FILL_CHUNK, n - i) }, (_, k) => ({ name: "noop", data: { i: i + k } })));
  }
  const done = deferred();
  let completed = 0;
  let worker: Worker | undefined;
  const r = await rate(n, async () => {
    worker = new Worker({ backend, queues: "bench", concurrency, prefetch, logger: silentLogger, maintenance: false, handlers: { noop: () => null } });
    worker.on("job:completed", () => {
      if (++completed === n) done.resolve();
    });
    await done.promise;
  });
  await worker?.close();
  return r;
}

/**
 * Conveyor's enqueue-to-start latency, the same on every server backend: a producer and a worker
 * on separate backends (separate connections), so each wake-up travels through the store as it
 * would between processes, as it does for the peers. Closes both backends.
 */
export async function conveyorLatency(workerBackend: Backend, producer: Backend, samples: number): Promise<number[]> {
  const q = new Queue("bench", { backend: producer });
  let onStart: (() => void) | null = null;
  const worker = new Worker({
    backend: workerBackend, queues: "bench", concurrency: 10, logger: silentLogger, maintenance: false,
    // Long poll interval: starts must come from wake-ups, not from a lucky poll.
    pollIntervalMs: 5_000,
    handlers: { noop: () => void onStart?.() },
  });
  await sleep(200);
  const out = await latencySamples([], samples, (i) => q.add("noop", { i }), (fn) => (onStart = fn));
  await worker.close();
  await producer.close();
  await workerBackend.close();
  return out;
}
