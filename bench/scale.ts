/**
 * What every `--scale` bench shares (bench/pg-scale.ts, bench/sqlite-scale.ts,
 * bench/redis-scale.ts): the backlog shapes, the loop over sizes and runs, the table, the SVG,
 * and Conveyor's side of the measurement, which is the same on every backend. A bench file only
 * says how to get a fresh store of its backend (and how to fill finished rows fast) and adds its
 * peer (graphile-worker, BullMQ) as another {@link ScaleSystem}.
 *
 * For every size N, each system gets a fresh store holding the backlog, then:
 * - throughput: one worker (concurrency 10, 500 fetched per round trip where the system batches)
 *   processes {@link TAKE} jobs off the top, once unreported (warm-up), then `runs` times, median
 *   reported, with this process's CPU time per job beside it; after each run the backlog is
 *   topped up by as many jobs as the run took;
 * - latency: enqueue-to-start of `samples` jobs, one at a time, into an idle worker that takes
 *   only them, while the backlog sits beside them (another queue for Conveyor; the peer's own way
 *   of keeping work out of a worker's path). Producer and worker use separate connections.
 */
import { writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { Queue, silentLogger, Worker, type Backend } from "../src/index.js";
import { chunks, deferred, FILL_CHUNK, fmt, formatLoad, latencySamples, machineLine, median, percentile, sleep } from "./lib.js";

/** Jobs fetched per round trip by a batching worker (Conveyor's `prefetch`, graphile-worker's local queue). */
export const PREFETCH = 500;
/** Jobs per throughput run; the backlog is topped up to its size again after each run. */
export const TAKE = 5_000;

/** One backlog a system is measured over. */
export interface Shape {
  label: string;
  /** Waiting jobs in the measured queue. */
  waiting: number;
  /** Jobs in the measured queue delayed by a day (never due during the run). */
  delayed: number;
  /** Completed jobs kept under the default retention, in the measured queue. */
  retained: number;
}

/** A system with its backlog in place. */
export interface OpenedScale {
  /** Jobs/s of TAKE jobs; `consumed` counts every job the run took off the backlog (a closing worker may finish a few more). */
  throughput(): Promise<{ rate: number; consumed: number }>;
  /** Adds `n` waiting jobs (the top-up after a throughput run). */
  refill(n: number): Promise<void>;
  latency(samples: number): Promise<number[]>;
  close(): Promise<void>;
}

export interface ScaleSystem {
  name: string;
  /** Fills a fresh store with the backlog and returns what measures it. */
  open(shape: Shape): Promise<OpenedScale>;
}

export interface ScalePoint {
  label: string;
  throughput: number;
  p50: number;
  p99: number;
  /**
   * This process's CPU ms per 1,000 jobs of a throughput run (median): the worker's, and for
   * SQLite the store's work too (it runs in the process), not a server's. Time spent waiting is
   * not counted, so a disk busy writing back a fill moves it far less than it moves jobs/s.
   */
  cpuMsPer1000: number;
  /** This process's heap after the size, MB (it holds every system's client: a rough check). */
  heapMb: number;
}

export interface ScaleOptions {
  /** Backlog sizes (waiting jobs); the largest is measured again as delayed jobs beside 10,000 waiting. */
  sizes: number[];
  runs: number;
  samples: number;
  /** Where the curves go; null draws none (neither does a run of one size). */
  svgPath: string | null;
  /**
   * Finished jobs kept beside every backlog (`--retained`), 0 for none. When not 0 every size is
   * measured twice, without and with them, so the table shows what retention costs a claim.
   */
  retained: number;
  /** Only the systems whose name contains one of these (case-insensitive); empty: all. */
  only: string[];
}

/** A fresh store of one backend for Conveyor's side of a scale bench. */
export interface ConveyorStore {
  /** The backend the worker and the filling queue use. */
  backend: Backend;
  /** A second backend on the same store with its own connection, for the latency producer. */
  producer(): Backend;
  /**
   * Copies the completed job `templateId` `n` times with fresh ids (one INSERT … SELECT on SQL
   * stores): finished rows under the default retention, filled at the store's own speed.
   */
  retain?(templateId: string, n: number): Promise<void>;
  /** After the fill, before measuring (PostgreSQL: VACUUM ANALYZE, so every system starts from current statistics). */
  settle?(): Promise<void>;
  /** Closes what this store opened and deletes it. */
  drop(): Promise<void>;
}

/**
 * Conveyor's side of a scale bench on any backend: fills queue "bench" (delayed, then retained,
 * then waiting jobs) on the store `fresh()` gives, and measures it.
 */
export function conveyorScale(name: string, fresh: () => Promise<ConveyorStore>, workerOptions: { prefetch: number }): ScaleSystem {
  return {
    name,
    async open(shape) {
      const store = await fresh();
      const { backend } = store;
      const q = new Queue("bench", { backend });
      const addWaiting = async (n: number) => {
        for (const [s, len] of chunks(n, FILL_CHUNK)) await q.addBulk(Array.from({ length: len }, (_, k) => ({ name: "noop", data: { i: s + k } })));
      };
      try {
        for (const [s, n] of chunks(shape.delayed, FILL_CHUNK))
          await q.addBulk(Array.from({ length: n }, (_, k) => ({ name: "noop", data: { i: s + k }, options: { delayMs: 86_400_000 } })));
        if (shape.retained > 0) {
          if (!store.retain) throw new Error(`${name}: --retained is not supported on this backend`);
          // One job run to completion the ordinary way, then copied: the copies are rows the
          // worker really leaves behind, at a fill rate that makes 10M rows possible.
          const template = await q.add("noop", { template: true });
          await drain(backend, 1, 0);
          await store.retain(template.id, shape.retained - 1);
          // The store's own count, so the output shows the retained rows are there.
          const [stats] = await backend.stats("bench");
          process.stderr.write(`  .. ${name}: ${stats?.counts.completed ?? 0} completed jobs retained in queue "bench"\n`);
        }
        await addWaiting(shape.waiting);
        await store.settle?.();
      } catch (err) {
        await store.drop();
        throw err;
      }
      return {
        throughput: async () => {
          const t0 = performance.now();
          const consumed = await drain(backend, TAKE, workerOptions.prefetch);
          return { rate: TAKE / ((performance.now() - t0) / 1000), consumed };
        },
        refill: addWaiting,
        async latency(samples) {
          const producer = store.producer();
          try {
            return await wakeLatency(backend, producer, samples);
          } finally {
            await producer.close();
          }
        },
        close: () => store.drop(),
      };
    },
  };
}

/**
 * Enqueue-to-start latency, `samples` times: a job added through `producer` (another backend
 * instance) to queue "latency", started by a worker on `backend` that polls only every 5 s, so
 * each start comes from a wake-up, not from a lucky poll.
 */
export async function wakeLatency(backend: Backend, producer: Backend, samples: number): Promise<number[]> {
  const lq = new Queue("latency", { backend: producer });
  let onStart: (() => void) | null = null;
  const worker = new Worker({
    backend,
    queues: "latency",
    concurrency: 10,
    logger: silentLogger,
    maintenance: false,
    pollIntervalMs: 5_000,
    handlers: { ping: () => void onStart?.() },
  });
  await sleep(200);
  try {
    return await latencySamples(
      [],
      samples,
      (i) => lq.add("ping", { i }),
      (fn) => (onStart = fn),
    );
  } finally {
    await worker.close();
  }
}

/** Runs one worker on queue "bench" until `n` jobs completed; returns how many it completed in all (a closing worker may finish a few more). */
export async function drain(backend: Backend, n: number, prefetch: number): Promise<number> {
  const done = deferred();
  let completed = 0;
  const worker = new Worker({ backend, queues: "bench", concurrency: 10, prefetch, logger: silentLogger, maintenance: false, handlers: { noop: () => null } });
  worker.on("job:completed", () => {
    if (++completed === n) done.resolve();
  });
  await done.promise;
  await worker.close();
  return completed;
}

/** The shapes of a run: every size waiting, the largest again as delayed jobs; each also with `retained` finished jobs when asked. */
export function shapesFor(options: Pick<ScaleOptions, "sizes" | "retained">): Shape[] {
  const largest = options.sizes.at(-1)!;
  const base: Shape[] = [
    ...options.sizes.map((n) => ({ label: `${fmt(n)} waiting`, waiting: n, delayed: 0, retained: 0 })),
    { label: `${fmt(largest)} delayed + ${fmt(2 * TAKE)} waiting`, waiting: 2 * TAKE, delayed: largest, retained: 0 },
  ];
  if (options.retained === 0) return base;
  return base.flatMap((s) => [s, { ...s, label: `${s.label} + ${fmt(options.retained)} retained`, retained: options.retained }]);
}

/**
 * Measures every system over every shape and prints the table (Conveyor first, each peer's ratio
 * to it). Returns the points per system, in shape order.
 */
export async function runScale(title: string, header: string, systems: ScaleSystem[], options: ScaleOptions): Promise<Map<string, ScalePoint[]>> {
  const loadStart = loadavg();
  const chosen = options.only.length === 0 ? systems : systems.filter((s) => options.only.some((o) => s.name.toLowerCase().includes(o.toLowerCase())));
  if (chosen.length === 0) throw new Error(`--only ${options.only.join(",")}: no system matches (${systems.map((s) => s.name).join(", ")})`);
  console.log(`# ${title}\n\n${header}; ${machineLine()}\n`);
  const shapes = shapesFor(options);
  const results = new Map<string, ScalePoint[]>(chosen.map((s) => [s.name, []]));
  for (const shape of shapes) {
    for (const system of chosen) {
      // At least TAKE jobs, and the worker's buffer, must be there for a throughput run.
      const opened = await system.open({ ...shape, waiting: Math.max(shape.waiting, 2 * TAKE) });
      try {
        const rates: number[] = [];
        const p50s: number[] = [];
        const p99s: number[] = [];
        const cpus: number[] = [];
        // One unreported run first: the first cell of a process ran cold (the JIT, the store's
        // caches), which read as a cost of whatever shape came first (SQLite, session 15: 0.69x the
        // CPU per job with 100,000 retained, measured second, than without, measured first).
        await opened.refill((await opened.throughput()).consumed);
        for (let r = 0; r < options.runs; r++) {
          const cpu0 = process.cpuUsage();
          const { rate, consumed } = await opened.throughput();
          const cpu = process.cpuUsage(cpu0);
          rates.push(rate);
          // µs per job is ms per 1,000 jobs (every system's worker runs in this process).
          cpus.push((cpu.user + cpu.system) / consumed);
          await opened.refill(consumed);
          const samples = await opened.latency(options.samples);
          p50s.push(percentile(samples, 50));
          p99s.push(percentile(samples, 99));
        }
        results.get(system.name)!.push({
          label: shape.label,
          throughput: median(rates),
          p50: median(p50s),
          p99: median(p99s),
          cpuMsPer1000: median(cpus),
          heapMb: process.memoryUsage().heapUsed / 2 ** 20,
        });
        process.stderr.write(
          `  .. ${system.name} ${shape.label}: ${rates.map(fmt).join(" / ")} jobs/s; CPU ${cpus.map((c) => c.toFixed(1)).join(" / ")} ms per 1,000 jobs; p50 ${p50s.map(fmt).join(" / ")} ms; load ${formatLoad(loadavg())}\n`,
        );
      } finally {
        await opened.close();
      }
    }
  }
  const [first, ...peers] = chosen;
  console.log(
    `Medians of ${options.runs} runs per cell (${TAKE} jobs per throughput run after one unreported run, ${options.samples} latency samples per run).\n`,
  );
  console.log(
    `| backlog | ${chosen.map((s) => `${s.name} jobs/s | ${s.name} p50 / p99 ms`).join(" | ")}${peers.map((p) => ` | ${first!.name} ÷ ${p.name} jobs/s`).join("")} |`,
  );
  console.log(`| --- | ${chosen.map(() => "---: | ---:").join(" | ")}${peers.map(() => " | ---:").join("")} |`);
  shapes.forEach((shape, i) => {
    const cells = chosen.map((s) => {
      const p = results.get(s.name)![i]!;
      return `${fmt(p.throughput)} | ${fmt(p.p50)} / ${fmt(p.p99)}`;
    });
    const ratios = peers.map((p) => ` | ${(results.get(first!.name)![i]!.throughput / results.get(p.name)![i]!.throughput).toFixed(2)}x`);
    console.log(`| ${shape.label} | ${cells.join(" | ")}${ratios.join("")} |`);
  });
  const stride = options.retained === 0 ? 1 : 2;
  for (const system of chosen) {
    const ps = results.get(system.name)!;
    const small = ps[0]!;
    const large = ps[(options.sizes.length - 1) * stride]!;
    console.log(
      `\n${system.name} at ${fmt(options.sizes.at(-1)!)} ÷ at ${fmt(options.sizes[0]!)}: throughput ${(large.throughput / small.throughput).toFixed(2)}x, ` +
        `p50 latency ${(large.p50 / small.p50).toFixed(2)}x; bench process heap ${ps.map((p) => fmt(p.heapMb)).join(" / ")} MB after each cell.`,
    );
    if (options.retained > 0) {
      // Shapes come in pairs, without then with the retained jobs (shapesFor).
      const pairs = shapes.filter((s) => s.retained === 0).map((s, k) => ({ label: s.label, without: ps[2 * k]!, kept: ps[2 * k + 1]! }));
      const throughputs = pairs.map((p) => `${p.label} ${(p.kept.throughput / p.without.throughput).toFixed(2)}x`);
      console.log(`${system.name} with ${fmt(options.retained)} retained ÷ without, throughput: ${throughputs.join("; ")}.`);
      const cpus = pairs.map(
        (p) =>
          `${p.label} ${p.without.cpuMsPer1000.toFixed(1)} → ${p.kept.cpuMsPer1000.toFixed(1)} (${(p.kept.cpuMsPer1000 / p.without.cpuMsPer1000).toFixed(2)}x)`,
      );
      console.log(`${system.name} with ${fmt(options.retained)} retained ÷ without, this process's CPU ms per 1,000 jobs: ${cpus.join("; ")}.`);
    }
  }
  const loadLine = `load average ${formatLoad(loadStart)} at start, ${formatLoad(loadavg())} at end; ${machineLine()}`;
  console.log(`\n${loadLine}`);
  // One size draws no curve (and must not overwrite the curves of a full run).
  if (options.svgPath && options.sizes.length > 1) {
    // The curves: the waiting sizes without retained jobs.
    const curve = new Map([...results].map(([name, ps]) => [name, options.sizes.map((_, k) => ps[k * stride]!)]));
    writeFileSync(options.svgPath, svg(title, options.sizes, curve, loadLine));
    console.log(`\nwrote ${options.svgPath}`);
  }
  return results;
}

/** A small SVG: one panel per metric, log-scale x (backlog), one line per system. */
export function svg(title: string, sizes: number[], results: Map<string, ScalePoint[]>, loadLine: string): string {
  const W = 420,
    H = 260,
    L = 60,
    R = 20,
    T = 40,
    B = 45;
  const colors = ["#1f77b4", "#d62728", "#2ca02c"];
  const panel = (x0: number, heading: string, value: (p: ScalePoint) => number, unit: string) => {
    const all = [...results.values()].flatMap((ps) => ps.slice(0, sizes.length).map(value));
    const max = Math.max(...all) * 1.15;
    const lx = (n: number) => x0 + L + ((Math.log10(n) - Math.log10(sizes[0]!)) / (Math.log10(sizes.at(-1)!) - Math.log10(sizes[0]!) || 1)) * (W - L - R);
    const ly = (v: number) => T + (1 - v / max) * (H - T - B);
    let out = `<text x="${x0 + W / 2}" y="34" text-anchor="middle" font-weight="bold">${heading}</text>`;
    out += `<line x1="${x0 + L}" y1="${H - B}" x2="${x0 + W - R}" y2="${H - B}" stroke="#333"/><line x1="${x0 + L}" y1="${T}" x2="${x0 + L}" y2="${H - B}" stroke="#333"/>`;
    for (const n of sizes) out += `<text x="${lx(n)}" y="${H - B + 16}" text-anchor="middle" font-size="11">${n >= 1e6 ? `${n / 1e6}M` : `${n / 1e3}k`}</text>`;
    for (let k = 0; k <= 4; k++) {
      const v = (max / 4) * k;
      out += `<text x="${x0 + L - 6}" y="${ly(v) + 4}" text-anchor="end" font-size="11">${fmt(v)}</text><line x1="${x0 + L}" y1="${ly(v)}" x2="${x0 + W - R}" y2="${ly(v)}" stroke="#eee"/>`;
    }
    out += `<text x="${x0 + W / 2}" y="${H - 8}" text-anchor="middle" font-size="11">waiting jobs in the backlog (log scale); y: ${unit}</text>`;
    [...results.entries()].forEach(([name, ps], i) => {
      const pts = ps
        .slice(0, sizes.length)
        .map((p, j) => `${lx(sizes[j]!).toFixed(1)},${ly(value(p)).toFixed(1)}`)
        .join(" ");
      out += `<polyline fill="none" stroke="${colors[i % colors.length]}" stroke-width="2" points="${pts}"/>`;
      out += `<text x="${x0 + L + 8}" y="${T + 14 + 14 * i}" font-size="12" fill="${colors[i % colors.length]}">${name}</text>`;
    });
    return out;
  };
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${2 * W}" height="${H + 20}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
<text x="${W}" y="14" text-anchor="middle" font-size="13">${title}</text>
${panel(0, "claim + complete throughput", (p) => p.throughput, "jobs/s")}
${panel(W, "enqueue-to-start latency p50", (p) => p.p50, "ms")}
<text x="${W}" y="${H + 14}" text-anchor="middle" font-size="10" fill="#555">${loadLine}</text>
</svg>
`;
}
