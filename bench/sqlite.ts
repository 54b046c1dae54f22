/**
 * SQLite: throughput and latency of Conveyor alone (the embedded default has no peer to race),
 * one process, no-op jobs, every measurement on a fresh database file (WAL, synchronous=NORMAL,
 * the defaults). Each figure is the median of `--runs` runs, taken by the same runner as the
 * side-by-side benchmarks (bench/lib.ts), so the output has the same shape and the same
 * load-average record. Latency is reported twice: with the worker in this process (wake-ups
 * in memory) and in a child process (wake-ups by watching the WAL file).
 */
import { fork } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SqliteBackend } from "../src/backend/sqlite/index.js";
import { Queue, silentLogger, Worker } from "../src/index.js";
import { type BenchSizes, conveyorThroughput, latencySamples, machineLine, printReport, runSideBySide, type Subject, type WithFreshBackend } from "./lib.js";

/** A fresh database file in a temp dir of its own; `cleanup()` removes every dir made. */
function files(): { fresh(): { backend: SqliteBackend; path: string }; cleanup(): void } {
  const dirs: string[] = [];
  return {
    fresh() {
      const dir = mkdtempSync(join(tmpdir(), "conveyor-bench-"));
      dirs.push(dir);
      const path = join(dir, "bench.db");
      return { backend: new SqliteBackend({ path }), path };
    },
    cleanup() {
      for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
    },
  };
}

function conveyor(db: ReturnType<typeof files>): Subject {
  const withFreshBackend: WithFreshBackend = async (fn) => {
    const { backend } = db.fresh();
    try {
      return await fn(backend);
    } finally {
      await backend.close();
    }
  };
  return {
    name: "Conveyor (SQLite)",
    // No prefetch: one process owns the file, so a claim is a local call, not a round trip.
    ...conveyorThroughput(withFreshBackend),
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
      const child = fork(new URL("./sqlite-latency-worker.ts", import.meta.url), [path], {
        execArgv: ["--import", "tsx"],
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

export async function main(sizes: BenchSizes): Promise<void> {
  console.log(`SQLite (Conveyor alone: no peer embeds SQLite); ${sizes.jobs} jobs; ${machineLine()}\n`);
  const db = files();
  try {
    const subjects = [conveyor(db)];
    const report = await runSideBySide(subjects, sizes);
    console.log("");
    printReport(subjects, report);
  } finally {
    db.cleanup();
  }
}
