/**
 * Where a cross-process enqueue→start goes on SQLite: one producer here, an idle Worker in a
 * child process (this same file, `--child`), 300 samples, medians of
 * - the producer's `add()` call (its commit);
 * - from before the `add()` to the first file event in the child's directory (its own watch,
 *   beside the backend's);
 * - from that event to the handler's start (the backend's look at the file, the claim, dispatch);
 * - from before the `add()` to the handler's start (the bench's cross-process latency).
 * Times are wall clock with sub-millisecond precision, comparable across the two processes.
 * Each sample starts 20 ms after the last, so the child's own settle of the previous job cannot
 * pass for the next job's file event.
 *
 * `npx tsx bench/sqlite-wake-breakdown.ts [--main DIR]` (default: this tree's backend)
 */
import { fork } from "node:child_process";
import { mkdtempSync, rmSync, watch } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { parseArgs } from "node:util";
import { pathToFileURL } from "node:url";
import type { SqliteBackend as SqliteBackendClass } from "../src/backend/sqlite/index.js";
import { Queue, silentLogger, Worker } from "../src/index.js";
import { loadavg } from "node:os";
import { childExecArgv, formatLoad, median, ownModule } from "./lib.js";

const { values } = parseArgs({ options: { main: { type: "string" }, child: { type: "string" }, samples: { type: "string", default: "300" } } });
const module = values.main === undefined ? ownModule("src/backend/sqlite/index").href : pathToFileURL(`${values.main}/src/backend/sqlite/index.ts`).href;
const { SqliteBackend } = (await import(module)) as { SqliteBackend: typeof SqliteBackendClass };
const wallNow = (): number => performance.timeOrigin + performance.now();

if (values.child !== undefined) {
  const path = values.child;
  let firstEvent = 0;
  watch(dirname(path), { persistent: false }, () => {
    if (firstEvent === 0) firstEvent = wallNow();
  });
  const backend = new SqliteBackend({ path });
  const worker = new Worker({
    backend,
    queues: "bench",
    concurrency: 10,
    logger: silentLogger,
    maintenance: false,
    // Long poll interval: starts must come from wake-ups, not from a lucky poll.
    pollIntervalMs: 5_000,
    handlers: { noop: () => void process.send!([firstEvent, wallNow()]) },
  });
  process.on("message", () => (firstEvent = 0));
  process.on(
    "SIGTERM",
    () =>
      void worker
        .close()
        .then(() => backend.close())
        .then(() => process.exit(0)),
  );
  process.send!("ready");
} else {
  const loadStart = loadavg();
  const dir = mkdtempSync(join(tmpdir(), "conveyor-bench-wake-"));
  const path = join(dir, "bench.db");
  const backend = new SqliteBackend({ path });
  const child = fork(new URL(import.meta.url), ["--child", path, ...(values.main === undefined ? [] : ["--main", values.main])], {
    execArgv: [...childExecArgv],
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  try {
    await new Promise<void>((r) => child.once("message", () => r()));
    const q = new Queue("bench", { backend });
    const add: number[] = [];
    const toEvent: number[] = [];
    const eventToStart: number[] = [];
    const total: number[] = [];
    for (let i = 0; i < Number(values.samples); i++) {
      await new Promise((r) => setTimeout(r, 20));
      child.send("reset");
      await new Promise((r) => setTimeout(r, 5));
      const started = new Promise<[number, number]>((r) => child.once("message", (m) => r(m as [number, number])));
      const t0 = wallNow();
      await q.add("noop", { i });
      add.push(wallNow() - t0);
      const [event, start] = await started;
      toEvent.push(event - t0);
      eventToStart.push(start - event);
      total.push(start - t0);
    }
    const ms = (xs: number[]) => median(xs).toFixed(2);
    console.log(`SQLite cross-process wake-up, backend ${values.main ?? "of this tree"}; ${Number(values.samples)} samples, medians in ms:`);
    console.log(
      `  add() call ${ms(add)}; to the first file event in the worker ${ms(toEvent)}; event to handler start ${ms(eventToStart)}; enqueue to start ${ms(total)}`,
    );
    console.log(`  load average at start ${formatLoad(loadStart)}, at end ${formatLoad(loadavg())}`);
  } finally {
    child.kill("SIGTERM");
    await new Promise((r) => child.once("exit", r));
    await backend.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
