/**
 * SQLite: throughput and latency of Conveyor alone (the embedded default has no peer to race),
 * one process, no-op jobs, every measurement on a fresh database file (WAL, synchronous=NORMAL,
 * the defaults). Each figure is the median of `--runs` runs, taken by the same runner as the
 * side-by-side benchmarks (bench/lib.ts), so the output has the same shape and the same
 * load-average record. Latency is reported twice: with the worker in this process (wake-ups
 * in memory) and in a child process (wake-ups by watching the WAL file).
 *
 * `--ab [--main DIR]` races main's SqliteBackend (imported from DIR/src, default /work/main)
 * against this tree's, side by side in the same interleaved runs; both use this tree's Queue and
 * Worker, so only the backend differs. The ratios are this tree ÷ main, paired run by run.
 * Without `--ab`, a second subject runs Conveyor with its event log off (SqliteBackendOptions.eventLog):
 * its column is the switch's effect, as in the PostgreSQL bench; and SQLite's two floors
 * (bench/sqlite-floor.ts: the least a queue must do, and the same loop over Conveyor's own rows)
 * run beside them, every figure also reported as a fraction of the first.
 */
import { fork } from "node:child_process";
import { pathToFileURL } from "node:url";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SqliteBackend } from "../src/backend/sqlite/index.js";
import { Queue, silentLogger, Worker } from "../src/index.js";
import { sqliteFloorSubjects } from "./sqlite-floor.js";
import {
  type BenchSizes,
  childExecArgv,
  conveyorProcessing,
  conveyorThroughput,
  latencySamples,
  machineLine,
  ownModule,
  printReport,
  runSideBySide,
  type Subject,
  type WithFreshBackend,
} from "./lib.js";

/** Where a subject's SqliteBackend comes from: this tree's, or another checkout's (`--ab`). */
interface BackendSource {
  readonly Backend: typeof SqliteBackend;
  /** The module exporting it, for the latency worker's child process. */
  readonly module: string;
}

const THIS_TREE: BackendSource = { Backend: SqliteBackend, module: ownModule("src/backend/sqlite/index").href };

/** A fresh database file in a temp dir of its own; `cleanup()` removes every dir made. */
function files(source: BackendSource = THIS_TREE, eventLog = true): { fresh(): { backend: SqliteBackend; path: string }; eventLog: boolean; cleanup(): void } {
  const dirs: string[] = [];
  return {
    fresh() {
      const dir = mkdtempSync(join(tmpdir(), "conveyor-bench-"));
      dirs.push(dir);
      const path = join(dir, "bench.db");
      return { backend: new source.Backend({ path, ...(eventLog ? {} : { eventLog: false }) }), path };
    },
    eventLog,
    cleanup() {
      for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
    },
  };
}

/** Jobs claimed ahead in the prefetched processing row (the Redis bench's figure). */
const SQLITE_BENCH_PREFETCH = 100;

function conveyor(db: ReturnType<typeof files>, name = "Conveyor (SQLite)", source: BackendSource = THIS_TREE): Subject {
  const withFreshBackend: WithFreshBackend = async (fn) => {
    const { backend } = db.fresh();
    try {
      return await fn(backend);
    } finally {
      await backend.close();
    }
  };
  return {
    name,
    // The Worker's default, no prefetch, in the usual rows; the same with 100 claimed ahead (as
    // the Redis bench) in a row of its own: a claim is a local call here, but each claim is a
    // transaction, and claiming for the buffer too makes them fewer (2,000 claims of 10 for
    // 20,000 jobs at concurrency 10, against 182 of about 110).
    ...conveyorThroughput(withFreshBackend),
    prefetched: {
      prefetch: SQLITE_BENCH_PREFETCH,
      processing: (n, concurrency) => withFreshBackend((backend) => conveyorProcessing(backend, n, concurrency, SQLITE_BENCH_PREFETCH)),
    },
    /** Enqueue one job into an idle worker on the same backend, wait for its start; repeat. */
    async latency(samples) {
      const { backend } = db.fresh();
      const q = new Queue("bench", { backend });
      let onStart: (() => void) | null = null;
      const worker = new Worker({
        backend,
        queues: "bench",
        concurrency: 10,
        logger: silentLogger,
        maintenance: false,
        // Long poll interval: starts must come from wake-ups, not from a lucky poll.
        pollIntervalMs: 5_000,
        handlers: { noop: () => void onStart?.() },
      });
      const out = await latencySamples(
        [],
        samples,
        (i) => q.add("noop", { i }),
        (fn) => (onStart = fn),
      );
      await worker.close();
      await backend.close();
      return out;
    },
    /** The same with the worker in a child process (bench/sqlite-latency-worker.ts). */
    async crossProcessLatency(samples) {
      const { backend, path } = db.fresh();
      const q = new Queue("bench", { backend });
      const child = fork(ownModule("bench/sqlite-latency-worker"), [path, source.module, db.eventLog ? "on" : "off"], {
        execArgv: [...childExecArgv],
        stdio: ["ignore", "inherit", "inherit", "ipc"],
      });
      await new Promise<void>((r) => child.once("message", () => r()));
      const out: number[] = [];
      for (let i = 0; i < samples; i++) {
        const started = new Promise<number>((r) => child.once("message", (m) => r(m as number)));
        // Wall-clock time with sub-millisecond precision, comparable across the two processes.
        const t0 = performance.timeOrigin + performance.now();
        await q.add("noop", { i });
        out.push((await started) - t0);
        await new Promise((r) => setTimeout(r, 2));
      }
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await exited;
      await backend.close();
      return out;
    },
  };
}

export async function main(sizes: BenchSizes, options: { abMain?: string } = {}): Promise<void> {
  const { abMain } = options;
  const against = abMain === undefined ? "Conveyor alone: no peer embeds SQLite" : `this tree against main's backend from ${abMain}`;
  console.log(`SQLite (${against}); ${sizes.jobs} jobs; ${machineLine()}\n`);
  const db = files();
  const offDb = abMain === undefined ? files(THIS_TREE, false) : null;
  const mainSource = abMain === undefined ? null : await backendOf(abMain);
  const mainDb = mainSource === null ? null : files(mainSource);
  try {
    const subjects = [conveyor(db, abMain === undefined ? "Conveyor (SQLite)" : "this tree")];
    if (offDb !== null) subjects.push(conveyor(offDb, "Conveyor (SQLite), event log off"));
    // What SQLite itself does with the same settings, in the same run (bench/sqlite-floor.ts).
    if (abMain === undefined) subjects.push(...sqliteFloorSubjects());
    if (mainSource !== null && mainDb !== null) subjects.push(conveyor(mainDb, "main", mainSource));
    const report = await runSideBySide(subjects, sizes);
    console.log("");
    printReport(subjects, report);
  } finally {
    db.cleanup();
    offDb?.cleanup();
    mainDb?.cleanup();
  }
}

/** The SqliteBackend of the checkout at `dir` (its src/, run through tsx like this tree's). */
async function backendOf(dir: string): Promise<BackendSource> {
  const module = pathToFileURL(`${dir}/src/backend/sqlite/index.ts`).href;
  const { SqliteBackend: Backend } = (await import(module)) as { SqliteBackend: typeof SqliteBackend };
  return { Backend, module };
}
