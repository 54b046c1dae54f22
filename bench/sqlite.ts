/**
 * SQLite: throughput and latency of Conveyor alone (the embedded default has no peer to race),
 * one process, no-op jobs, each figure the median of `--runs` runs on a fresh database file.
 */
import { fork } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SqliteBackend } from "../src/backend/sqlite/index.js";
import { Queue, silentLogger, Worker } from "../src/index.js";
import { type BenchSizes, conveyorProcessing, fmt, median, percentile } from "./lib.js";

// Set by main() from the command line; module-level so the figure functions below stay as they were.
let JOBS = 0;
let SINGLE = 0;
let SAMPLES = 0;
let RUNS = 0;

const dirs: string[] = [];
function freshBackend(): { backend: SqliteBackend; path: string } {
  const dir = mkdtempSync(join(tmpdir(), "conveyor-bench-"));
  dirs.push(dir);
  const path = join(dir, "bench.db");
  return { backend: new SqliteBackend({ path }), path };
}

async function bulkEnqueue(): Promise<number> {
  const { backend } = freshBackend();
  const q = new Queue("bench", { backend });
  const jobs = Array.from({ length: JOBS }, (_, i) => ({ name: "noop", data: { i } }));
  const t0 = performance.now();
  await q.addBulk(jobs);
  const rate = JOBS / ((performance.now() - t0) / 1000);
  await backend.close();
  return rate;
}

async function singleEnqueue(): Promise<number> {
  const { backend } = freshBackend();
  const q = new Queue("bench", { backend });
  const t0 = performance.now();
  for (let i = 0; i < SINGLE; i++) await q.add("noop", { i });
  const rate = SINGLE / ((performance.now() - t0) / 1000);
  await backend.close();
  return rate;
}

async function processing(concurrency: number): Promise<number> {
  const { backend } = freshBackend();
  const rate = await conveyorProcessing(backend, JOBS, concurrency);
  await backend.close();
  return rate;
}

/** Enqueue one job into an idle worker, wait for its start; repeat. In-process wake-ups. */
async function latencyInProcess(): Promise<number[]> {
  const { backend } = freshBackend();
  const q = new Queue("bench", { backend });
  let onStart: (() => void) | null = null;
  const worker = new Worker({
    backend, queues: "bench", concurrency: 10, logger: silentLogger, maintenance: false, pollIntervalMs: 5_000,
    handlers: { noop: () => void onStart?.() },
  });
  const samples: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const started = new Promise<void>((r) => (onStart = r));
    const t0 = performance.now();
    await q.add("noop", { i });
    await started;
    samples.push(performance.now() - t0);
    await new Promise((r) => setTimeout(r, 2));
  }
  await worker.close();
  await backend.close();
  return samples;
}

/** The same with the worker in another process: wake-ups cross processes (file watch on the WAL). */
async function latencyCrossProcess(): Promise<number[]> {
  const { backend, path } = freshBackend();
  const q = new Queue("bench", { backend });
  const child = fork(new URL("./sqlite-latency-worker.ts", import.meta.url), [path], { execArgv: ["--import", "tsx"], stdio: ["ignore", "inherit", "inherit", "ipc"] });
  await new Promise<void>((r) => child.once("message", () => r()));
  const samples: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const started = new Promise<number>((r) => child.once("message", (m) => r(m as number)));
    // Wall-clock time with sub-millisecond precision, comparable across the two processes.
    const t0 = performance.timeOrigin + performance.now();
    await q.add("noop", { i });
    samples.push((await started) - t0);
    await new Promise((r) => setTimeout(r, 2));
  }
  child.kill("SIGTERM");
  await backend.close();
  return samples;
}

export async function main(sizes: BenchSizes): Promise<void> {
  ({ jobs: JOBS, single: SINGLE, samples: SAMPLES, runs: RUNS } = sizes);
  console.log(`Conveyor benchmark: backend sqlite, ${JOBS} jobs, medians of ${RUNS} runs, node ${process.version}\n`);
  const run = async (label: string, unit: string, fn: () => Promise<number>) => {
    const xs: number[] = [];
    for (let i = 0; i < RUNS; i++) xs.push(await fn());
    console.log(`  ${label.padEnd(42)} ${fmt(median(xs))} ${unit}`);
  };
  await run(`bulk enqueue (${JOBS} in one addBulk)`, "jobs/s", bulkEnqueue);
  await run(`single enqueue (${SINGLE} sequential add)`, "jobs/s", singleEnqueue);
  await run(`processing, concurrency 10`, "jobs/s", () => processing(10));
  await run(`processing, concurrency 50`, "jobs/s", () => processing(50));
  for (const [label, fn] of [["latency in-process", latencyInProcess], ["latency cross-process", latencyCrossProcess]] as const) {
    const all: number[][] = [];
    for (let i = 0; i < RUNS; i++) all.push(await fn());
    const p = (q: number) => median(all.map((s) => percentile(s, q)));
    const line = `p50 ${fmt(p(50))} ms  p95 ${fmt(p(95))} ms  p99 ${fmt(p(99))} ms`;
    console.log(`  ${`${label} (enqueue -> start)`.padEnd(42)} ${line}`);
  }
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
}
