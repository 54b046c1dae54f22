/**
 * Poison pills: handlers that kill or block their process. In a sandbox they lose only a child
 * process; the watchdog turns a blocked in-process worker into a restartable crash.
 */
import { fork } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { ERROR_BOUNDS } from "../../src/core/error-info.js";
import { JOB_LOG_TRUNCATION_MARK } from "../../src/core/job-log.js";
import type { FromSandbox } from "../../src/runtime/sandbox-protocol.js";
import { Queue, silentLogger, Worker } from "../../src/index.js";
import { spawnCli } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const temp = new TempDirs();
let backend: SqliteBackend;
let dbPath: string;
let queue: Queue;
const workers: Worker[] = [];

beforeEach(async () => {
  dbPath = await temp.file("pills.db");
  backend = new SqliteBackend({ path: dbPath });
  queue = new Queue("q", { backend });
});

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.close({ force: true })));
  await backend.close();
});

afterAll(() => temp.removeAll());

function sandboxed(concurrency = 2): Worker {
  const w = new Worker({
    backend,
    queues: "q",
    concurrency,
    pollIntervalMs: 20,
    logger: silentLogger,
    sandbox: { module: "test/fixtures/pills.ts" },
  });
  workers.push(w);
  return w;
}

const state = async (id: string) => (await backend.get(id))?.state;

/** Pids of this process's live sandbox children (Linux /proc). */
function sandboxChildren(): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
      if (ppid === process.pid && state !== "Z" && readFileSync(`/proc/${entry}/cmdline`, "utf8").includes("sandbox-child")) pids.push(Number(entry));
    } catch {
      // Gone meanwhile.
    }
  }
  return pids;
}

describe("sandbox", () => {
  it("runs handlers in another process and returns their results", async () => {
    sandboxed();
    const { id } = await queue.add("ok", { n: 1 });
    await waitFor(async () => (await state(id)) === "completed", { timeoutMs: 15_000 });
    const job = (await backend.get(id))!;
    expect(job.result).toMatchObject({ echo: { n: 1 } });
    expect((job.result as { pid: number }).pid).not.toBe(process.pid);
  });

  it("starts a process for every slot, and a spare, ahead of jobs", async () => {
    const worker = sandboxed(3);
    await waitFor(() => worker.mode !== "starting" && worker.mode !== "created", { timeoutMs: 30_000, description: "the sandbox loaded" });
    // No job yet: none was started on demand.
    expect(sandboxChildren()).toHaveLength(4);
    const ids = (await queue.addBulk(Array.from({ length: 3 }, (_, n) => ({ name: "ok", data: { n } })))).map((j) => j.id);
    await waitFor(async () => (await Promise.all(ids.map(state))).every((s) => s === "completed"), { timeoutMs: 15_000 });
    expect(sandboxChildren()).toHaveLength(4);
  });

  it("a handler calling process.exit fails its attempts and goes dead; the worker keeps going", async () => {
    sandboxed();
    const pill = await queue.add("exit", {}, { attempts: 2, backoff: { type: "fixed", delayMs: 0 } });
    await waitFor(async () => (await state(pill.id)) === "dead", { timeoutMs: 20_000 });
    const dead = (await backend.get(pill.id))!;
    expect(dead.history.map((h) => h.error?.name)).toEqual(["SandboxCrashError", "SandboxCrashError"]);
    const healthy = await queue.add("ok", {});
    await waitFor(async () => (await state(healthy.id)) === "completed", { timeoutMs: 15_000 });
  });

  it("a handler blocking its event loop is killed at its timeout; healthy jobs still run meanwhile", async () => {
    sandboxed(2);
    const pill = await queue.add("block", {}, { timeoutMs: 300, attempts: 2, backoff: { type: "fixed", delayMs: 0 } });
    const healthy = await queue.addBulk(Array.from({ length: 5 }, (_, n) => ({ name: "ok", data: { n } })));
    await waitFor(async () => (await state(pill.id)) === "dead", { timeoutMs: 20_000 });
    expect((await backend.get(pill.id))!.history.map((h) => h.error?.name)).toEqual(["JobTimeoutError", "JobTimeoutError"]);
    for (const { id } of healthy) await waitFor(async () => (await state(id)) === "completed", { timeoutMs: 15_000 });
  });

  it("keeps error classes, progress and the idempotency guard across the process boundary", async () => {
    sandboxed();
    const bad = await queue.add("unrecoverable", {}, { attempts: 5 });
    const chatty = await queue.add("chatty", {});
    await waitFor(async () => (await state(bad.id)) === "dead" && (await state(chatty.id)) === "completed", { timeoutMs: 15_000 });
    expect((await backend.get(bad.id))!.attempt).toBe(1);
    const job = (await backend.get(chatty.id))!;
    expect(job.result).toEqual({ first: true, second: false });
    expect(job.progress).toEqual({ step: 1 });
  });

  it("cuts a handler's error in its own process, before it crosses to the worker (a message quoting 3,000,000 characters)", async () => {
    // The protocol itself, on a child started as the Worker starts it: what crosses the IPC channel.
    const child = fork("src/runtime/sandbox-child.ts", ["test/fixtures/pills.ts"], {
      execArgv: ["--import", "tsx"],
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    try {
      const messages: FromSandbox[] = [];
      child.on("message", (m: FromSandbox) => messages.push(m));
      await waitFor(() => messages.some((m) => m.type === "ready"), { timeoutMs: 15_000 });
      child.send({ type: "run", job: { id: "j1", name: "loud", data: {} } });
      const failed = await waitFor(() => messages.find((m) => m.type === "failed"), { timeoutMs: 15_000 });
      if (failed.type !== "failed") throw new Error("unreachable");
      expect(failed.error.message.startsWith("bad input: xxx")).toBe(true);
      expect(failed.error.message.length).toBeLessThanOrEqual(ERROR_BOUNDS.messageChars);
      expect(failed.error.message.endsWith(JOB_LOG_TRUNCATION_MARK)).toBe(true);
      expect(failed.error.stack!.length).toBeLessThanOrEqual(ERROR_BOUNDS.stackChars);
    } finally {
      child.kill("SIGKILL");
    }
  });
});

describe("watchdog", () => {
  /** A CLI worker on the test's queue, handlers from the pills module, with the watchdog limit given. */
  const watchedWorker = (o: { leaseMs: number; watchdogMs: number }) =>
    spawnCli([
      "worker",
      "--db",
      `sqlite:${dbPath}`,
      "--queue",
      "q",
      "--handlers",
      "test/fixtures/pills.ts",
      "--lease-ms",
      String(o.leaseMs),
      "--watchdog-ms",
      String(o.watchdogMs),
    ]);

  it("kills a worker process whose event loop is blocked, so it can be restarted", async () => {
    await queue.add("block", {});
    const w = watchedWorker({ leaseMs: 2_000, watchdogMs: 500 });
    expect(await w.exited).toBe("SIGKILL");
    expect(w.stderr()).toContain("event loop blocked");
  });

  it("kills a worker whose loop stands still without using the CPU for longer than 10 × its limit (a synchronous wait that never ends)", async () => {
    await queue.add("sleepSync", { ms: 60_000 });
    const w = watchedWorker({ leaseMs: 5_000, watchdogMs: 300 });
    expect(await w.exited).toBe("SIGKILL");
    expect(w.stderr()).toMatch(/event loop blocked for \d+ ms, \d+ ms of it on the CPU \(watchdog limit 300 ms\)/);
  });

  it("does not kill a worker whose loop stood still without using the CPU (as when starved), up to 10 × its limit", async () => {
    // A loop that does not turn while the process burns no CPU is what a starved process looks
    // like (and a synchronous wait): 4 × the limit here, well inside the 10 × allowed for it.
    const { id } = await queue.add("sleepSync", { ms: 1200 });
    const w = watchedWorker({ leaseMs: 5_000, watchdogMs: 300 });
    try {
      await waitFor(async () => (await backend.get(id))?.state === "completed", { timeoutMs: 30_000, description: "the job completed" });
      expect(w.stderr()).not.toContain("event loop blocked");
    } finally {
      w.child.kill("SIGTERM");
      await w.exited;
    }
  });
});
