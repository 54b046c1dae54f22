/**
 * CPU seconds per job of the SQLite backend, main's against this tree's: on a shared machine the
 * wall-clock rates of bench/sqlite.ts move with other processes' load far more than with the
 * code, while the CPU this process spends per job (`process.cpuUsage()`, user + system) moves
 * much less. Figures, each on a fresh file, the variants' runs interleaved (A, B, A, B, …):
 * - bulk enqueue: jobs per CPU second of one `addBulk` of `--jobs` no-op jobs;
 * - processing: jobs per CPU second of one Worker (concurrency 10) draining `--jobs` jobs, and
 *   the CPU spent inside the backend's claim and complete calls, in µs per job.
 * Both variants use this tree's Queue and Worker; only SqliteBackend differs.
 *
 * `npm run bench -- --backend sqlite --ab --cpu [--main /work/main] [--jobs 20000] [--runs 5]`
 */
import { mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type { Backend } from "../src/backend/contract.js";
import { SqliteBackend } from "../src/backend/sqlite/index.js";
import { Queue, silentLogger, Worker } from "../src/index.js";
import { chunks, deferred, FILL_CHUNK, fmt, formatLoad, interleaved, machineLine, median, noopJobs, pairedRatio } from "./lib.js";

interface Variant {
  readonly name: string;
  readonly Backend: typeof SqliteBackend;
}

/** CPU time of this process in µs (user + system) since `from`, or since it started. */
const cpuMicros = (from?: NodeJS.CpuUsage): number => {
  const used = process.cpuUsage(from);
  return used.user + used.system;
};

async function onFreshFile<T>(variant: Variant, fn: (backend: Backend) => Promise<T>): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), "conveyor-bench-cpu-"));
  const backend = new variant.Backend({ path: join(dir, "bench.db") });
  try {
    return await fn(backend);
  } finally {
    await backend.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function bulk(variant: Variant, n: number): Promise<number> {
  return onFreshFile(variant, async (backend) => {
    const jobs = noopJobs(0, n);
    const start = process.cpuUsage();
    await new Queue("bench", { backend }).addBulk(jobs);
    return n / (cpuMicros(start) / 1e6);
  });
}

/** Jobs per CPU second of the whole drain, and µs of CPU per job inside claim() and complete(). */
async function processing(variant: Variant, n: number): Promise<{ perCpuSecond: number; claimUs: number; completeUs: number }> {
  return onFreshFile(variant, async (backend) => {
    const q = new Queue("bench", { backend });
    for (const [start, length] of chunks(n, FILL_CHUNK)) await q.addBulk(noopJobs(start, length));
    // Counts the CPU of the backend's synchronous work: both calls do all of it before their first await.
    const inside = { claim: 0, complete: 0 };
    const measured = new Proxy(backend, {
      get(target, property) {
        const value: unknown = Reflect.get(target, property, target);
        if (typeof value !== "function") return value;
        const call = (value as (...args: unknown[]) => unknown).bind(target);
        if (property !== "claim" && property !== "complete") return call;
        return (...args: unknown[]) => {
          const start = process.cpuUsage();
          const result = call(...args);
          inside[property] += cpuMicros(start);
          return result;
        };
      },
    });
    const done = deferred();
    let completed = 0;
    const start = process.cpuUsage();
    const worker = new Worker({
      backend: measured,
      queues: "bench",
      concurrency: 10,
      logger: silentLogger,
      maintenance: false,
      handlers: { noop: () => null },
    });
    worker.on("job:completed", () => {
      if (++completed === n) done.resolve();
    });
    await done.promise;
    const perCpuSecond = n / (cpuMicros(start) / 1e6);
    await worker.close();
    return { perCpuSecond, claimUs: inside.claim / n, completeUs: inside.complete / n };
  });
}

export async function main(options: { mainDir: string; jobs: number; runs: number }): Promise<void> {
  const mainModule = (await import(pathToFileURL(`${options.mainDir}/src/backend/sqlite/index.ts`).href)) as { SqliteBackend: typeof SqliteBackend };
  const variants: Variant[] = [
    { name: "this tree", Backend: SqliteBackend },
    { name: "main", Backend: mainModule.SqliteBackend },
  ];
  const n = options.jobs;
  const loadStart = loadavg();
  console.log(`SQLite CPU per job: this tree against main's backend from ${options.mainDir}; ${n} jobs; ${machineLine()}\n`);
  // One small discarded run of each, so neither variant's first measured run pays for the JIT.
  for (const v of variants) {
    await bulk(v, 2_000);
    await processing(v, 2_000);
  }
  const rows: { label: string; unit: string; runs: number[][] }[] = [];
  rows.push({
    label: `bulk enqueue (${n} jobs)`,
    unit: "jobs/CPU s",
    runs: await interleaved(
      variants,
      options.runs,
      "bulk enqueue",
      (v) => bulk(v, n),
      (x) => `${fmt(x)} jobs per CPU second`,
    ),
  });
  const drains = await interleaved(
    variants,
    options.runs,
    "processing, concurrency 10",
    (v) => processing(v, n),
    (x) => `${fmt(x.perCpuSecond)} jobs per CPU second; claim ${fmt(x.claimUs)} µs, complete ${fmt(x.completeUs)} µs per job`,
  );
  rows.push({ label: "processing, concurrency 10", unit: "jobs/CPU s", runs: drains.map((rs) => rs.map((r) => r.perCpuSecond)) });
  rows.push({ label: "  of which in claim()", unit: "µs/job", runs: drains.map((rs) => rs.map((r) => r.claimUs)) });
  rows.push({ label: "  of which in complete()", unit: "µs/job", runs: drains.map((rs) => rs.map((r) => r.completeUs)) });

  console.log(`\nMedians of ${options.runs} runs, interleaved; ratio = this tree ÷ main, paired per round.\n`);
  console.log("| figure | unit | this tree | main | this ÷ main |\n| --- | --- | ---: | ---: | ---: |");
  for (const r of rows) {
    console.log(`| ${r.label} | ${r.unit} | ${fmt(median(r.runs[0]!))} | ${fmt(median(r.runs[1]!))} | ${pairedRatio(r.runs[0]!, r.runs[1]!).toFixed(2)}x |`);
  }
  console.log("\nEvery run:");
  for (const r of rows) console.log(`  ${r.label}: this tree ${r.runs[0]!.map(fmt).join(" / ")}; main ${r.runs[1]!.map(fmt).join(" / ")}`);
  console.log(`\nLoad average at start ${formatLoad(loadStart)}, at end ${formatLoad(loadavg())}.`);
}
