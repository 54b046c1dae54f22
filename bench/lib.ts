/**
 * What the benchmarks share (bench/sqlite.ts, bench/postgres.ts, bench/redis.ts): statistics,
 * rate timing, Conveyor's processing and latency runs, and the side-by-side runner: every figure
 * taken several times per subject with the subjects interleaved, reported as medians with
 * Conveyor/peer ratios, every run behind them, and the machine's load before and after.
 */
import { existsSync, readFileSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import { availableParallelism, loadavg } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { Queue, silentLogger, Worker, type Backend, type JobDefaults } from "../src/index.js";

/** The middle value (the mean of the two middle ones for an even count); NaN for none. */
export function median(xs: readonly number[]): number {
  if (xs.length === 0) return NaN;
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

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
  /**
   * The server's floor (bench/pg-floor.ts): the least work any queue must do per job. The report
   * adds every subject's figures as a fraction of this subject's, paired round by round.
   */
  readonly floor?: boolean;
  /** Jobs/s enqueueing `jobs` in one bulk call. */
  bulk(jobs: number): Promise<number>;
  /** Jobs/s of `count` sequential single enqueues. */
  single(count: number): Promise<number>;
  /** Jobs/s processing `jobs` pre-enqueued no-op jobs in one process at `concurrency`. */
  processing(jobs: number, concurrency: number): Promise<number>;
  /**
   * Processing again with jobs claimed ahead (the Worker's `prefetch`), for a subject whose
   * `processing` claims none: a row of its own at concurrency 10, so the default and the batched
   * figure sit side by side.
   */
  readonly prefetched?: { prefetch: number; processing(jobs: number, concurrency: number): Promise<number> };
  /** Enqueue-to-start latency samples in ms. */
  latency(samples: number): Promise<number[]>;
  /**
   * The same with the worker in another process, where the backend has a figure of its own for
   * that (SQLite: a wake-up crosses processes by watching the WAL file, not by a server).
   */
  crossProcessLatency?: (samples: number) => Promise<number[]>;
  /** Bytes of server memory per waiting job, by whatever measures the backend offers. */
  memory?: (jobs: number) => Promise<Record<string, number>>;
}

export interface BenchSizes {
  jobs: number;
  single: number;
  samples: number;
  /** Runs per figure and subject; each figure reports the median of its runs. */
  runs: number;
}

/** One line of the table: a figure, each subject's median, the ratios, and every run behind them. */
export interface Row {
  label: string;
  unit: string;
  /** Median per subject, in subject order (NaN where a subject has no such figure). */
  values: number[];
  /** Per peer (subjects after the first), the paired ratio first ÷ peer (see `pairedRatio`). */
  ratios: number[];
  /** Every run per subject, in the order they were taken. */
  runs: number[][];
}

/**
 * The first subject's runs divided by a peer's, round by round (the two runs of a round were
 * taken back to back), and the median of those quotients. Load on a shared machine shifts
 * between rounds far more than within one, so pairing cancels most of it: the quotient of the
 * two medians can pair a quiet run of one subject with a loaded run of the other. NaN when no
 * round has both figures.
 */
export function pairedRatio(first: readonly number[], peer: readonly number[]): number {
  const quotients: number[] = [];
  for (let i = 0; i < Math.min(first.length, peer.length); i++) {
    const q = first[i]! / peer[i]!;
    if (Number.isFinite(q) && peer[i]! > 0) quotients.push(q);
  }
  return median(quotients);
}

/** A row from every run per subject: medians, and paired ratios of the first subject to each peer. */
function row(label: string, unit: string, runs: number[][]): Row {
  return { label, unit, values: runs.map(median), ratios: runs.slice(1).map((peer) => pairedRatio(runs[0]!, peer)), runs };
}

/** What a side-by-side run measured, and the state of the machine around it. */
export interface Report {
  rows: Row[];
  runs: number;
  /** `os.loadavg()` (1, 5 and 15 minutes) when the run started and when it ended. */
  loadStart: number[];
  loadEnd: number[];
  /** Wall time of the whole run, seconds. */
  elapsedS: number;
}

/**
 * Whether this benchmark runs compiled (`npm run bench`, scripts/bench.mjs: the JavaScript tsc
 * makes, as the package ships) or from its sources through tsx (`npx tsx bench/…`). A module it
 * loads by URL or runs in a child process must take the same form.
 */
export const compiled = import.meta.url.endsWith(".js");

/** A module of this tree by its path from the repository root, without extension ("src/backend/sqlite/index"), in the form this benchmark runs in. */
export function ownModule(path: string): URL {
  return new URL(`../${path}${compiled ? ".js" : ".ts"}`, import.meta.url);
}

/** `execArgv` for a child process running one of this tree's modules: tsx's loader for the sources, nothing compiled. */
export const childExecArgv: readonly string[] = compiled ? [] : ["--import", "tsx"];

/** "graphile-worker 0.18.0, pg-boss 12.38.0": the installed versions of the peers, for the output's header. */
export function peerVersions(names: readonly string[]): string {
  return names
    .map((name) => {
      // The package.json above the peer's entry point: some peers' `exports` do not expose it.
      for (let dir = new URL(".", import.meta.resolve(name)); ; dir = new URL("..", dir)) {
        const file = new URL("package.json", dir);
        const pkg = existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as { name?: string; version: string }) : null;
        if (pkg?.name === name) return `${name} ${pkg.version}`;
        if (dir.pathname === "/") throw new Error(`no package.json of ${name} above its entry point`);
      }
    })
    .join(", ");
}

/** "1.52 0.98 0.61": the 1-, 5- and 15-minute load averages. */
export const formatLoad = (load: readonly number[]): string => load.map((x) => x.toFixed(2)).join(" ");

/** The machine's state in one line, for the top of every benchmark's output. */
export function machineLine(): string {
  const form = compiled ? "Conveyor compiled by tsc" : "Conveyor's sources through tsx";
  return `node ${process.version}, ${form}, ${availableParallelism()} cores, load average ${formatLoad(loadavg())} (1/5/15 min)`;
}

const progress = (msg: string) => process.stderr.write(`  .. ${msg}\n`);

/**
 * Measures `measure` `runs` times for every subject, interleaved, each round starting one subject
 * further: round 1 takes A, B, C, round 2 B, C, A, round 3 C, A, B, and so on. On a shared machine
 * load comes in bursts; interleaving spreads a burst over every subject of a figure instead of
 * landing it on whichever subject ran then, and rotating the start keeps any cost of going first
 * (a cold server cache, a fresh process's warm-up) from always falling on the same subject.
 * Returns each subject's results round by round (index r of every subject is round r + 1).
 */
export async function interleaved<S extends { readonly name: string }, T>(
  subjects: readonly S[],
  runs: number,
  label: string,
  measure: (s: S) => Promise<T>,
  describe: (result: T) => string,
): Promise<T[][]> {
  const out: T[][] = subjects.map(() => []);
  for (let run = 1; run <= runs; run++) {
    for (let k = 0; k < subjects.length; k++) {
      const i = (run - 1 + k) % subjects.length;
      const s = subjects[i]!;
      const result = await measure(s);
      out[i]!.push(result);
      progress(`run ${run}/${runs}  ${s.name}: ${label}: ${describe(result)}`);
    }
  }
  return out;
}

/**
 * Runs every figure for every subject, figure by figure, each `sizes.runs` times with the
 * subjects interleaved (see `interleaved`), and keeps the medians. Progress goes to stderr so
 * stdout is just the report. `only: "memory"` runs the memory figure alone.
 */
export async function runSideBySide(subjects: readonly Subject[], sizes: BenchSizes, options: { only?: "memory" } = {}): Promise<Report> {
  const started = performance.now();
  const loadStart = loadavg();
  const rows: Row[] = [];
  const { runs } = sizes;
  const rate = async (label: string, fn: (s: Subject) => Promise<number>) => {
    const all = await interleaved(subjects, runs, label, fn, (x) => `${fmt(x)} jobs/s`);
    rows.push(row(label, "jobs/s", all));
  };
  const latency = async (label: string, of: (s: Subject) => ((samples: number) => Promise<number[]>) | undefined) => {
    const having = subjects.filter((s) => of(s) !== undefined);
    if (having.length === 0) return;
    const describe = (xs: number[]) => `p50 ${fmt(percentile(xs, 50))} ms, p99 ${fmt(percentile(xs, 99))} ms`;
    const all = await interleaved(having, runs, label, (s) => of(s)!(sizes.samples), describe);
    // Each run gives one p50/p95/p99; the median over runs of each percentile is reported.
    for (const p of [50, 95, 99]) {
      const perSubject = subjects.map((s) => {
        const i = having.indexOf(s);
        return i < 0 ? [] : all[i]!.map((samples) => percentile(samples, p));
      });
      rows.push(row(`${label} p${p} (${sizes.samples} samples)`, "ms", perSubject));
    }
  };

  if (options.only !== "memory") {
    await rate(`bulk enqueue (${sizes.jobs} jobs)`, (s) => s.bulk(sizes.jobs));
    await rate(`single enqueue (${sizes.single} sequential)`, (s) => s.single(sizes.single));
    await rate("processing, concurrency 10", (s) => s.processing(sizes.jobs, 10));
    await rate("processing, concurrency 50", (s) => s.processing(sizes.jobs, 50));
    const prefetch = subjects.find((s) => s.prefetched !== undefined)?.prefetched?.prefetch;
    if (prefetch !== undefined) {
      const label = `processing, concurrency 10, prefetch ${prefetch}`;
      const having = subjects.filter((s) => s.prefetched?.prefetch === prefetch);
      const all = await interleaved(
        having,
        runs,
        label,
        (s) => s.prefetched!.processing(sizes.jobs, 10),
        (x) => `${fmt(x)} jobs/s`,
      );
      rows.push(
        row(
          label,
          "jobs/s",
          subjects.map((s) => all[having.indexOf(s)] ?? []),
        ),
      );
    }
    await latency("latency", (s) => s.latency.bind(s));
    await latency("latency cross-process", (s) => s.crossProcessLatency?.bind(s));
  }
  if (subjects.some((s) => s.memory)) {
    const describe = (m: Record<string, number>) =>
      Object.entries(m)
        .map(([k, v]) => `${k} ${fmt(v)} B`)
        .join(", ");
    const all = await interleaved(subjects, runs, "memory per waiting job", async (s) => (await s.memory?.(sizes.jobs)) ?? {}, describe);
    const keys = [...new Set(all.flat().flatMap((m) => Object.keys(m)))];
    for (const k of keys) {
      const perSubject = all.map((xs) => xs.map((m) => m[k] ?? NaN));
      rows.push(row(`memory per waiting job (${k})`, "bytes", perSubject));
    }
  }
  return { rows, runs, loadStart, loadEnd: loadavg(), elapsedS: (performance.now() - started) / 1000 };
}

/**
 * Prints the report: one column per subject (the median of its runs), then one ratio column per
 * peer, always first subject (Conveyor) divided by the peer, paired round by round (see
 * `pairedRatio`), then every run behind each figure and the machine's load before and after. For jobs/s a ratio above 1 means Conveyor is ahead;
 * for ms and bytes below 1 does.
 */
export function printReport(subjects: readonly Subject[], report: Report): void {
  const names = subjects.map((s) => s.name);
  const header = ["figure", "unit", ...names, ...names.slice(1).map((n) => `${names[0]}/${n}`)];
  const body = report.rows.map((r) => [r.label, r.unit, ...r.values.map(fmt), ...r.ratios.map((x) => (Number.isFinite(x) ? `${x.toFixed(2)}x` : "-"))]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((line) => line[i]!.length)));
  const line = (cells: readonly string[]) => cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ");
  console.log(`Medians of ${report.runs} run${report.runs === 1 ? "" : "s"} per figure and subject, subjects interleaved run by run.\n`);
  console.log(line(header));
  console.log(widths.map((w) => "-".repeat(w)).join("  "));
  for (const cells of body) console.log(line(cells));
  if (names.length > 1) {
    console.log(
      `\nRatios are ${names[0]} divided by the peer, paired: the median over rounds of ${names[0]}'s run divided by the peer's run ` +
        `of the same round (taken back to back), so load that shifts between rounds cancels out. ` +
        `Above 1 is better for jobs/s, below 1 is better for ms and bytes.`,
    );
  }
  const floorIndex = subjects.findIndex((s) => s.floor);
  if (floorIndex >= 0) printFloorFractions(subjects, report, floorIndex);
  console.log("\nEvery run, in the order taken:");
  for (const r of report.rows) {
    const perSubject = r.runs.map((xs, i) => (xs.length ? `${names[i]} ${xs.map(fmt).join(" / ")}` : null)).filter((x) => x !== null);
    console.log(`  ${r.label}: ${perSubject.join("; ")}`);
  }
  console.log(
    `\nLoad average (1/5/15 min) at start ${formatLoad(report.loadStart)}, at end ${formatLoad(report.loadEnd)}; ` +
      `${availableParallelism()} cores; measuring took ${formatDuration(report.elapsedS)}.`,
  );
}

/**
 * Every subject's figures as a fraction of the floor's (paired round by round, as the ratios
 * above): for jobs/s the share of what the server allows that a system reaches, for ms the
 * multiple of the least a round trip through the server takes.
 */
function printFloorFractions(subjects: readonly Subject[], report: Report, floorIndex: number): void {
  const names = subjects.map((s) => s.name).filter((_, i) => i !== floorIndex);
  const floorName = subjects[floorIndex]!.name;
  const header = ["figure", "unit", ...names.map((n) => `${n}/${floorName}`)];
  const body = report.rows.map((r) => [
    r.label,
    r.unit,
    ...r.runs
      .filter((_, i) => i !== floorIndex)
      .map((runs) => {
        const x = pairedRatio(runs, r.runs[floorIndex]!);
        return Number.isFinite(x) ? `${x.toFixed(2)}x` : "-";
      }),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((line) => line[i]!.length)));
  const line = (cells: readonly string[]) => cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ");
  console.log(`\nAs a fraction of the ${floorName} (the least work any queue must do per job on this server, same run, same batching):\n`);
  console.log(line(header));
  console.log(widths.map((w) => "-".repeat(w)).join("  "));
  for (const cells of body) console.log(line(cells));
}

/** "4 min 12 s" */
export function formatDuration(seconds: number): string {
  const s = Math.round(seconds);
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
}

/** Jobs per enqueue call when filling a queue before a processing run. */
export const FILL_CHUNK = 5_000;

/** `[0, n)` cut into chunks of at most `size`, as [start, length] pairs. */
export function chunks(n: number, size: number): [number, number][] {
  const out: [number, number][] = [];
  for (let i = 0; i < n; i += size) out.push([i, Math.min(size, n - i)]);
  return out;
}

/** `n` no-op jobs numbered from `start`, as `addBulk` takes them. */
export const noopJobs = (start: number, n: number) => Array.from({ length: n }, (_, k) => ({ name: "noop", data: { i: start + k } }));

/**
 * Runs `fn` on a backend over an empty store and disposes of both afterwards (each benchmark
 * knows how: a fresh database, file or key prefix).
 */
export type WithFreshBackend = <T>(fn: (backend: Backend) => Promise<T>) => Promise<T>;

/**
 * Conveyor's throughput figures, the same on every backend, each on a fresh store: bulk enqueue
 * (one `addBulk`), sequential single enqueues, and processing with `prefetch` (see
 * conveyorProcessing). `defaults`: job options every job is added with (the queue's `defaults`),
 * none unless given.
 */
export function conveyorThroughput(withFreshBackend: WithFreshBackend, prefetch = 0, defaults?: JobDefaults): Pick<Subject, "bulk" | "single" | "processing"> {
  return {
    bulk: (n) =>
      withFreshBackend((backend) => {
        const q = new Queue("bench", { backend, defaults });
        const all = noopJobs(0, n);
        return rate(n, () => q.addBulk(all));
      }),
    single: (n) =>
      withFreshBackend((backend) => {
        const q = new Queue("bench", { backend, defaults });
        return rate(n, async () => {
          for (let i = 0; i < n; i++) await q.add("noop", { i });
        });
      }),
    processing: (n, concurrency) => withFreshBackend((backend) => conveyorProcessing(backend, n, concurrency, prefetch, defaults)),
  };
}

/**
 * Conveyor's processing figure, the same on every backend: fills queue "bench" with `n` no-op
 * jobs (with the job options `defaults`, when given), then times one Worker at `concurrency` until
 * every completion is committed (`job:completed` fires after the store accepted it). Closes the
 * worker, not the backend.
 */
export async function conveyorProcessing(backend: Backend, n: number, concurrency: number, prefetch = 0, defaults?: JobDefaults): Promise<number> {
  const q = new Queue("bench", { backend, defaults });
  for (const [start, length] of chunks(n, FILL_CHUNK)) await q.addBulk(noopJobs(start, length));
  return conveyorProcessFilled(backend, n, concurrency, prefetch);
}

/**
 * conveyorProcessing's timed part: jobs/s of one Worker draining `n` jobs already in queue "bench".
 * `handler` (default: a no-op that returns at once) runs each job; `WorkerClass` (default this
 * tree's) is the Worker, another checkout's when a bench compares two.
 */
export async function conveyorProcessFilled(
  backend: Backend,
  n: number,
  concurrency: number,
  prefetch = 0,
  handler: () => unknown = () => null,
  WorkerClass: typeof Worker = Worker,
): Promise<number> {
  const done = deferred();
  let completed = 0;
  let worker: Worker | undefined;
  const r = await rate(n, async () => {
    worker = new WorkerClass({ backend, queues: "bench", concurrency, prefetch, logger: silentLogger, maintenance: false, handlers: { noop: handler } });
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
 * would between processes, as it does for the peers. `defaults`: job options every job is added
 * with. Closes both backends.
 */
export async function conveyorLatency(workerBackend: Backend, producer: Backend, samples: number, defaults?: JobDefaults): Promise<number[]> {
  const q = new Queue("bench", { backend: producer, defaults });
  let onStart: (() => void) | null = null;
  const worker = new Worker({
    backend: workerBackend,
    queues: "bench",
    concurrency: 10,
    logger: silentLogger,
    maintenance: false,
    // Long poll interval: starts must come from wake-ups, not from a lucky poll.
    pollIntervalMs: 5_000,
    handlers: { noop: () => void onStart?.() },
  });
  await sleep(200);
  const out = await latencySamples(
    [],
    samples,
    (i) => q.add("noop", { i }),
    (fn) => (onStart = fn),
  );
  await worker.close();
  await producer.close();
  await workerBackend.close();
  return out;
}

/**
 * CPU time (user + system, ms) of every process of the server: the postmaster's own and its
 * waited-for children's (backends and workers that exited), and each live child's.
 */
export async function serverCpuMs(dataDir: string): Promise<number> {
  const ticksPerMs = 100 / 1000; // USER_HZ: 100 on Linux
  const postmaster = Number((await readFile(join(dataDir, "postmaster.pid"), "utf8")).split("\n")[0]);
  // Fields after the command name (which may hold spaces): state ppid ... utime(14) stime(15) cutime(16) cstime(17).
  const fields = (stat: string) => stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  let ticks = 0;
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, "utf8").catch(() => null);
    if (stat === null) continue;
    const f = fields(stat);
    const pid = Number(entry);
    if (pid === postmaster) ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
    else if (Number(f[1]) === postmaster) ticks += Number(f[11]) + Number(f[12]);
  }
  return ticks / ticksPerMs;
}

/** `measure` on a store made by `fresh`, handed to `discard` afterwards whatever the outcome. */
export async function onFreshStore<T>(
  fresh: () => Promise<string>,
  discard: (store: string) => Promise<void>,
  measure: (store: string) => Promise<T>,
): Promise<T> {
  const store = await fresh();
  try {
    return await measure(store);
  } finally {
    await discard(store);
  }
}

/**
 * Drops the schema a PostgreSQL store URL names (`?schema=`) on the server at `serverUrl`, with
 * everything in it: a measured arm's jobs, so that autovacuum does not go on vacuuming them while
 * later arms run on the same cores.
 */
export async function dropStoreSchema(serverUrl: string, storeUrl: string): Promise<void> {
  const schema = new URL(storeUrl).searchParams.get("schema");
  if (schema === null) throw new Error(`dropStoreSchema: ${storeUrl} names no schema`);
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`);
  } finally {
    await admin.end();
  }
}
