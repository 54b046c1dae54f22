/**
 * `node scripts/bench.mjs bench/ab-worker.ts --base DIR [--store postgres|sqlite] [--pairs 6] [--concurrency 10] [--jobs 20000]`
 *
 * The Worker of another checkout (`--base`, e.g. `git worktree add --detach /tmp/base main`, with
 * node_modules linked) against this tree's, each side with its own
 * backend: what a change to the runtime (src/runtime) costs or saves per job. Every run is a
 * child process of its own (so neither side warms the other's code), the sides alternating and
 * each pair starting with the other side; a child drains `--jobs` pre-filled no-op jobs three
 * times on fresh stores, the first unreported (the JIT). PostgreSQL: one throwaway server,
 * concurrency 10 and prefetch 500 as in bench/postgres.ts; SQLite: a file each, no prefetch as
 * in bench/sqlite.ts. Figures, medians over the reported drains: jobs/s, the paired ratio
 * this ÷ base, this process's CPU per job (the Worker and, on SQLite, the store) and the time
 * V8's collector paused it (perf_hooks "gc" entries) per `--jobs` jobs.
 *
 * Both sides run their sources through tsx (scripts/bench.mjs does so for every comparison of two
 * checkouts), like with like: tsx's keep-names wrapping costs each side alike (1-5% of a process's
 * CPU in profiles, docs/performance-sqlite.md "Session 16"), so the absolute figures run a little
 * above what the compiled benches read.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { PerformanceObserver } from "node:perf_hooks";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import type { Backend } from "../src/backend/contract.js";
import { startThrowawayPostgres } from "../testkit/servers/postgres.js";
import { childExecArgv, chunks, conveyorProcessFilled, FILL_CHUNK, fmt, machineLine, median, noopJobs, ownModule, pairedRatio } from "./lib.js";
import { freshDatabase } from "./pg-scale.js";

const { values } = parseArgs({
  options: {
    base: { type: "string" },
    store: { type: "string", default: "postgres" },
    pairs: { type: "string", default: "6" },
    concurrency: { type: "string", default: "10" },
    jobs: { type: "string", default: "20000" },
    // Internal: run the drains of one side in this process.
    child: { type: "string" },
    url: { type: "string" },
  },
});
const jobs = Number(values.jobs);
const concurrency = Number(values.concurrency);
const store = values.store;
if (store !== "postgres" && store !== "sqlite") throw new Error(`--store postgres or sqlite; got ${store}`);
/** Drains per child; the first is not reported. */
const DRAINS = 3;

interface Drain {
  jobsPerSecond: number;
  clientUs: number;
  gcMs: number;
}

/** A module of one side: this tree's (in the form this bench runs in) or the base checkout's sources. */
function sideModule(side: string, path: string): string {
  if (side === "this") return ownModule(path).href;
  const file = resolve(values.base!, `${path}.ts`);
  if (!existsSync(file)) throw new Error(`${file} is missing: is ${values.base} a checkout of Conveyor?`);
  return pathToFileURL(file).href;
}

async function childDrains(side: string, serverUrl: string | undefined): Promise<Drain[]> {
  const index = (await import(sideModule(side, "src/index"))) as typeof import("../src/index.js");
  let gcMs = 0;
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) gcMs += entry.duration;
  }).observe({ entryTypes: ["gc"] });
  const drains: Drain[] = [];
  for (let d = 0; d < DRAINS; d++) {
    let backend: Backend;
    let cleanup: () => Promise<void>;
    if (store === "sqlite") {
      const { SqliteBackend } = (await import(sideModule(side, "src/backend/sqlite/index"))) as typeof import("../src/backend/sqlite/index.js");
      const dir = mkdtempSync(join(tmpdir(), "conveyor-ab-worker-"));
      backend = new SqliteBackend({ path: join(dir, "db.sqlite") });
      cleanup = async () => {
        await backend.close();
        rmSync(dir, { recursive: true, force: true });
      };
    } else {
      const { PostgresBackend } = (await import(sideModule(side, "src/backend/postgres/index"))) as typeof import("../src/backend/postgres/index.js");
      const database = await freshDatabase(serverUrl!, "ab_worker");
      backend = new PostgresBackend({ connectionString: database.url });
      cleanup = async () => {
        await backend.close();
        await database.drop();
      };
    }
    await backend.migrate();
    const queue = new index.Queue("bench", { backend });
    for (const [start, length] of chunks(jobs, FILL_CHUNK)) await queue.addBulk(noopJobs(start, length));
    const gc0 = gcMs;
    const cpu0 = process.cpuUsage();
    const jobsPerSecond = await conveyorProcessFilled(backend, jobs, concurrency, store === "postgres" ? 500 : 0, () => null, index.Worker);
    const cpu = process.cpuUsage(cpu0);
    // The last collection's entry arrives after its pause.
    await new Promise((r) => setTimeout(r, 10));
    if (d > 0) drains.push({ jobsPerSecond, clientUs: (cpu.user + cpu.system) / jobs, gcMs: gcMs - gc0 });
    await cleanup();
  }
  return drains;
}

if (values.child !== undefined) {
  console.log(JSON.stringify(await childDrains(values.child, values.url)));
  process.exit(0);
}

if (values.base === undefined) {
  console.error("--base DIR: the other checkout (its sources, node_modules linked), whose Worker runs beside this tree's");
  process.exit(2);
}
const server = store === "postgres" ? await startThrowawayPostgres({ database: "bench" }) : null;
const sides = ["base", "this"] as const;
const results: Record<(typeof sides)[number], Drain[]> = { base: [], this: [] };
try {
  console.log(`The Worker, ${values.base} (base) against this tree, on ${store}: ${jobs} no-op jobs, concurrency ${concurrency}; ${machineLine()}\n`);
  for (let pair = 0; pair < Number(values.pairs); pair++) {
    for (const side of pair % 2 === 0 ? sides : [...sides].reverse()) {
      const args = [
        ...childExecArgv,
        fileURLToPath(import.meta.url),
        "--child",
        side,
        "--store",
        store,
        "--jobs",
        String(jobs),
        "--concurrency",
        String(concurrency),
        "--base",
        values.base,
      ];
      if (server !== null) args.push("--url", server.url);
      const out = execFileSync(process.execPath, args, { encoding: "utf8" }).trim().split("\n").pop()!;
      const drains = JSON.parse(out) as Drain[];
      results[side].push(...drains);
      process.stderr.write(`  .. pair ${pair + 1} ${side}: ${drains.map((d) => `${fmt(d.jobsPerSecond)} jobs/s`).join(", ")}\n`);
    }
  }
} finally {
  await server?.stop();
}
const column = (side: (typeof sides)[number], pick: (d: Drain) => number) => median(results[side].map(pick));
console.log("| side | jobs/s | this ÷ base (paired) | client CPU µs/job | GC ms per run |");
console.log("| --- | ---: | ---: | ---: | ---: |");
for (const side of sides) {
  const ratio =
    side === "this"
      ? `${pairedRatio(
          results.this.map((d) => d.jobsPerSecond),
          results.base.map((d) => d.jobsPerSecond),
        ).toFixed(3)}x`
      : "";
  console.log(
    `| ${side} | ${fmt(column(side, (d) => d.jobsPerSecond))} | ${ratio} | ${column(side, (d) => d.clientUs).toFixed(2)} | ${column(side, (d) => d.gcMs).toFixed(1)} |`,
  );
}
console.log(
  `\n${results.this.length} drains per side. Every run: ${sides.map((s) => `${s} ${results[s].map((d) => fmt(d.jobsPerSecond)).join(" / ")}`).join("; ")}`,
);
