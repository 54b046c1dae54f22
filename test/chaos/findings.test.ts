/**
 * Regression tests for the bugs the chaos harness found, each reduced to the one fault that
 * showed it (see chaos/README.md for the harness).
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { Queue } from "../../src/index.js";
import { spawnCli, type Spawned } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const temp = new TempDirs();
let dbPath: string;
let backend: SqliteBackend;
let queue: Queue;
const spawned: Spawned[] = [];
/** Processes to SIGKILL after each test, in case a regression left them running. */
const strays: number[] = [];

beforeEach(async () => {
  dbPath = await temp.file("findings.db");
  backend = new SqliteBackend({ path: dbPath });
  queue = new Queue("q", { backend });
});

afterEach(async () => {
  for (const s of spawned.splice(0)) if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill("SIGKILL");
  for (const pid of strays.splice(0)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // Gone already: as it should be.
    }
  }
  await backend.close();
});

afterAll(() => temp.removeAll());

function worker(extra: string[]): Spawned {
  const s = spawnCli(["worker", "--db", `sqlite:${dbPath}`, "--queue", "q", "--poll-interval-ms", "50", ...extra]);
  spawned.push(s);
  return s;
}

/** Live (not zombie) processes whose parent is `ppid`. */
function childrenOf(ppid: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      // pid (comm) state ppid …: comm may hold spaces, so split after its closing parenthesis.
      const [state, parent] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(parent) === ppid && state !== "Z") out.push(Number(entry));
    } catch {
      // Exited meanwhile.
    }
  }
  return out;
}

/** Live sandbox children of a worker (not, say, the esbuild service tsx starts beside them). */
function sandboxChildrenOf(ppid: number): number[] {
  return childrenOf(ppid).filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("sandbox-child");
    } catch {
      return false;
    }
  });
}

/** User-mode CPU time a process has used, in clock ticks (usually 1/100 s); 0 when it is gone. */
function cpuTicks(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command: state is field 3, utime field 14.
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[11]);
  } catch {
    return 0;
  }
}

function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0] !== "Z";
  } catch {
    return false;
  }
}

describe.skipIf(!existsSync("/proc"))(`chaos findings${existsSync("/proc") ? "" : " (skipped: no /proc to read child processes from)"}`, () => {
  it("a sandbox child blocked in a handler dies with its SIGKILLed worker instead of spinning on, orphaned", async () => {
    const w = worker(["--handlers", "test/fixtures/pills.ts", "--sandbox", "--concurrency", "2"]);
    const pill = await queue.add("block", {}, { timeoutMs: 60_000 });
    await waitFor(async () => (await backend.get(pill.id))?.state === "active", { timeoutMs: 20_000, description: "the pill runs" });
    // The child has received the job and spins in its loop: it burns CPU (a tenth of a second).
    const children = await waitFor(
      () => {
        const found = sandboxChildrenOf(w.child.pid!);
        return found.some((pid) => cpuTicks(pid) >= 10) ? found : null;
      },
      { timeoutMs: 20_000, description: "a sandbox child spinning in the pill" },
    );
    strays.push(...children);
    w.child.kill("SIGKILL");
    await w.exited;
    await waitFor(() => children.every((pid) => !alive(pid)), { timeoutMs: 5_000, description: "every sandbox child of the killed worker exited" });
  });

  it("the watchdog does not kill a worker that was only suspended (SIGSTOP longer than its limit, then SIGCONT)", async () => {
    const w = worker(["--handlers", "test/fixtures/handlers.ts", "--lease-ms", "3000", "--watchdog-ms", "500"]);
    await waitFor(() => w.stderr().includes("conveyor worker "), { timeoutMs: 20_000, description: "the worker started" });
    // The watchdog thread and the main thread resume together; before the fix the thread often
    // looked first, saw no stamp for longer than its limit and killed the process. Several rounds
    // make that near certain.
    for (let round = 0; round < 8; round++) {
      w.child.kill("SIGSTOP");
      await sleep(800);
      w.child.kill("SIGCONT");
      await sleep(400);
      expect(w.child.exitCode, `round ${round}: ${w.stderr()}`).toBeNull();
      expect(w.child.signalCode, `round ${round}: ${w.stderr()}`).toBeNull();
    }
    expect(w.stderr()).not.toContain("watchdog limit");
    w.child.kill("SIGTERM");
    expect(await w.exited).toBe(0);
  });

  it("a sandboxed worker replaces a killed child at once, so the next job does not wait for a cold start", async () => {
    const w = worker(["--handlers", "test/fixtures/pills.ts", "--sandbox", "--concurrency", "1"]);
    // The pool's only child, started with the worker.
    const [first] = await waitFor(
      () => {
        const found = sandboxChildrenOf(w.child.pid!);
        return found.length === 1 ? found : null;
      },
      { timeoutMs: 20_000, description: "the first sandbox child" },
    );
    const pill = await queue.add("block", {}, { timeoutMs: 300, attempts: 1 });
    await waitFor(async () => (await backend.get(pill.id))?.state === "dead", { timeoutMs: 20_000, description: "the pill is dead" });
    // The pill's child was killed at the timeout. A replacement — a new process, not the dying
    // one still listed for a moment — is running before any other job arrives.
    const replacement = await waitFor(() => sandboxChildrenOf(w.child.pid!).find((pid) => pid !== first), {
      timeoutMs: 10_000,
      description: "a replacement child with a new pid, before the next job",
    });
    await waitFor(() => !alive(first!), { timeoutMs: 5_000, description: "the pill's child is gone" });
    const healthy = await queue.add("ok", {});
    const done = await waitFor(
      async () => {
        const j = await backend.get(healthy.id);
        return j?.state === "completed" ? j : null;
      },
      { timeoutMs: 20_000, description: "the healthy job completed" },
    );
    // It ran in the replacement that was already up.
    expect((done.result as { pid: number }).pid).toBe(replacement);
  });
});
