/**
 * A/B on Redis: this checkout's Conveyor against another checkout's (`--base DIR`, e.g. a
 * `git worktree add --detach /tmp/base main` with node_modules linked), on one throwaway Redis,
 * runs interleaved (base, this, base, this, …) so load on a shared machine hits both alike.
 * Figures: bulk enqueue and processing at concurrency 10 and 50 (prefetch 100, as bench/redis.ts),
 * medians of `--runs`, and the ratio this/base; and, less sensitive to a loaded machine, the
 * Redis server's own CPU time per job (INFO commandstats, every command of the measurement).
 *
 * `npx tsx bench/ab-redis.ts --base /tmp/base [--jobs 20000] [--runs 3]`
 *
 * `--event-log-off` compares this checkout with itself instead: base is the event log on (the
 * default), this is `eventLog: false` (RedisBackendOptions), so the ratios are the log's cost.
 */
import { parseArgs } from "node:util";
import { pathToFileURL } from "node:url";
import { resolve } from "node:path";
import { Redis } from "ioredis";
import { deletePrefix, startThrowawayRedis } from "../testkit/servers/redis.js";

const { values } = parseArgs({
  options: {
    base: { type: "string" },
    jobs: { type: "string", default: "20000" },
    runs: { type: "string", default: "3" },
    "event-log-off": { type: "boolean" },
  },
});
if (!values.base && !values["event-log-off"]) {
  console.error("--base DIR: the other checkout to compare with (its src/ is imported as is)");
  process.exit(2);
}
const jobs = Number(values.jobs);
const runs = Number(values.runs);

interface Tree {
  label: string;
  RedisBackend: new (options: { connection: string; prefix: string; logger: unknown; eventLog?: boolean }) => {
    migrate(): Promise<void>;
    close(): Promise<void>;
  };
  Queue: new (name: string, options: { backend: unknown }) => { addBulk(jobs: { name: string; data: unknown }[]): Promise<unknown> };
  Worker: new (options: Record<string, unknown>) => { on(event: string, fn: () => void): void; close(): Promise<void> };
  silentLogger: unknown;
  /** Extra RedisBackend options of this side (--event-log-off). */
  options?: { eventLog: boolean };
}

async function load(label: string, root: string): Promise<Tree> {
  const url = (path: string) => pathToFileURL(resolve(root, path)).href;
  const redis = (await import(url("src/backend/redis/index.ts"))) as Pick<Tree, "RedisBackend">;
  const core = (await import(url("src/index.ts"))) as Pick<Tree, "Queue" | "Worker" | "silentLogger">;
  return { label, RedisBackend: redis.RedisBackend, Queue: core.Queue, Worker: core.Worker, silentLogger: core.silentLogger };
}

const trees = values["event-log-off"]
  ? [await load("base", "."), { ...(await load("this", ".")), options: { eventLog: false } }]
  : [await load("base", values.base!), await load("this", ".")];
const server = await startThrowawayRedis();
const url = server.url;
const admin = new Redis(url);
let n = 0;

/** Microseconds of Redis CPU over every command since the last CONFIG RESETSTAT. */
async function redisMicros(): Promise<number> {
  const info = await admin.info("commandstats");
  let total = 0;
  for (const m of info.matchAll(/^cmdstat_(\w+):calls=\d+,usec=(\d+),/gm)) if (m[1] !== "info" && m[1] !== "config") total += Number(m[2]);
  return total;
}

const noop = (from: number, count: number) => Array.from({ length: count }, (_, i) => ({ name: "noop", data: { i: from + i } }));

async function withBackend<T>(tree: Tree, fn: (backend: unknown) => Promise<T>): Promise<T> {
  const prefix = `ab-${tree.label}-${process.pid}-${n++}`;
  const backend = new tree.RedisBackend({ connection: url, prefix, logger: tree.silentLogger, ...tree.options });
  await backend.migrate();
  try {
    return await fn(backend);
  } finally {
    await backend.close();
    await deletePrefix(url, prefix);
  }
}

async function bulk(tree: Tree): Promise<number> {
  return withBackend(tree, async (backend) => {
    const q = new tree.Queue("bench", { backend });
    const started = performance.now();
    for (let i = 0; i < jobs; i += 1000) await q.addBulk(noop(i, Math.min(1000, jobs - i)));
    return jobs / ((performance.now() - started) / 1000);
  });
}

async function processing(tree: Tree, concurrency: number): Promise<number> {
  return withBackend(tree, async (backend) => {
    const q = new tree.Queue("bench", { backend });
    for (let i = 0; i < jobs; i += 1000) await q.addBulk(noop(i, Math.min(1000, jobs - i)));
    let completed = 0;
    let finish!: () => void;
    const done = new Promise<void>((r) => (finish = r));
    const started = performance.now();
    const worker = new tree.Worker({
      backend,
      queues: "bench",
      concurrency,
      prefetch: 100,
      logger: tree.silentLogger,
      maintenance: false,
      handlers: { noop: () => null },
    });
    worker.on("job:completed", () => {
      if (++completed === jobs) finish();
    });
    await done;
    const rate = jobs / ((performance.now() - started) / 1000);
    await worker.close();
    return rate;
  });
}

const figures: [string, (tree: Tree) => Promise<number>][] = [
  ["bulk enqueue", bulk],
  ["processing, concurrency 10", (t) => processing(t, 10)],
  ["processing, concurrency 50", (t) => processing(t, 50)],
];
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const rows: string[] = [];
try {
  for (const [name, measure] of figures) {
    const results: Record<string, number[]> = { base: [], this: [] };
    const cpu: Record<string, number[]> = { base: [], this: [] };
    const ratios: number[] = [];
    const timed = async (tree: Tree) => {
      await admin.config("RESETSTAT");
      const rate = await measure(tree);
      cpu[tree.label]!.push((await redisMicros()) / jobs);
      return rate;
    };
    for (let r = 0; r < runs; r++) {
      // Odd rounds run "this" first: whatever going first costs (a cold cache) falls on both alike.
      let a: number, b: number;
      if (r % 2 === 0) {
        a = await timed(trees[0]!);
        b = await timed(trees[1]!);
      } else {
        b = await timed(trees[1]!);
        a = await timed(trees[0]!);
      }
      results.base!.push(a);
      results.this!.push(b);
      ratios.push(b / a);
      console.log(
        `  .. run ${r + 1}/${runs}  ${name}: base ${a.toFixed(0)}, this ${b.toFixed(0)} jobs/s; Redis CPU per job base ${cpu.base!.at(-1)!.toFixed(1)} µs, this ${cpu.this!.at(-1)!.toFixed(1)} µs`,
      );
    }
    rows.push(
      `${name.padEnd(28)} Redis CPU per job: base ${median(cpu.base!).toFixed(1)} µs, this ${median(cpu.this!).toFixed(1)} µs (this/base ${(median(cpu.this!) / median(cpu.base!)).toFixed(2)}x)`,
    );
    rows.push(
      `${name.padEnd(28)} base ${median(results.base!).toFixed(0).padStart(7)}  this ${median(results.this!).toFixed(0).padStart(7)} jobs/s  this/base ${median(ratios).toFixed(2)}x  (runs: base ${results.base!.map((x) => x.toFixed(0)).join(" / ")}; this ${results.this!.map((x) => x.toFixed(0)).join(" / ")})`,
    );
  }
} finally {
  await admin.quit();
  await server.stop();
}
console.log(`\n${jobs} jobs, medians of ${runs} interleaved runs; ratio = median of per-round this/base\n${rows.join("\n")}`);
