/**
 * Worker processes as an operator runs them: killed with SIGKILL, stopped with SIGTERM.
 */
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
const children: Spawned[] = [];

function startWorker(extra: string[] = []): Spawned {
  const s = spawnCli(["worker", "--db", `sqlite:${dbPath}`, "--queue", "q", "--handlers", "test/fixtures/handlers.ts", "--poll-interval-ms", "50", ...extra]);
  children.push(s);
  return s;
}

const counts = async () => (await queue.stats()).counts;

beforeEach(async () => {
  dbPath = await temp.file("jobs.db");
  backend = new SqliteBackend({ path: dbPath });
  queue = new Queue("q", { backend });
});

afterEach(async () => {
  for (const c of children.splice(0)) if (c.child.exitCode === null) c.child.kill("SIGKILL");
  await backend.close();
});

afterAll(() => temp.removeAll());

describe("worker process", () => {
  it("loses nothing when SIGKILLed mid-run: a restarted worker completes every job", async () => {
    const total = 120;
    await queue.addBulk(Array.from({ length: total }, (_, i) => ({ name: "sleep", data: { ms: 200, i } })));
    const first = startWorker(["--concurrency", "8", "--lease-ms", "1000"]);
    // Killed while it holds jobs: each runs 200 ms, so a busy worker has its slots full.
    await waitFor(
      async () => {
        const c = await counts();
        return c.completed >= 16 && c.active >= 4;
      },
      { timeoutMs: 20_000, description: "first worker progressed and holds jobs" },
    );
    first.child.kill("SIGKILL");
    expect(await first.exited).toBe("SIGKILL");
    const orphaned = (await counts()).active;
    // Without orphans the comparison below would hold for a rescuer that records nothing.
    expect(orphaned).toBeGreaterThan(0);

    const second = startWorker(["--concurrency", "8", "--lease-ms", "1000"]);
    await waitFor(async () => (await counts()).completed === total, { timeoutMs: 30_000, description: "every job completed" });
    const c = await counts();
    expect(c).toMatchObject({ completed: total, waiting: 0, active: 0, dead: 0, scheduled: 0 });
    // The jobs the killed worker held ran again after their leases expired, recorded as such.
    const all = await backend.list({ queue: "q" }, { limit: 1000 });
    const expired = all.filter((j) => j.history.some((h) => h.outcome === "lease-expired"));
    expect(expired.length).toBe(orphaned);
    second.child.kill("SIGTERM");
    expect(await second.exited).toBe(0);
  });

  it("SIGTERM: stops claiming at once, drains in-flight jobs, exits 0", async () => {
    await queue.addBulk(Array.from({ length: 10 }, (_, i) => ({ name: "sleep", data: { ms: 400, i } })));
    const w = startWorker(["--concurrency", "4", "--shutdown-grace-ms", "10000"]);
    await waitFor(async () => (await counts()).active === 4, { timeoutMs: 15_000 });
    w.child.kill("SIGTERM");
    expect(await w.exited).toBe(0);
    const c = await counts();
    expect(c.completed).toBe(4);
    expect(c.waiting).toBe(6);
    expect(c.active).toBe(0);
  });

  it("SIGTERM past the grace period: aborts, releases the unfinished jobs (ids logged), exits 1", async () => {
    const ids = await queue.addBulk(Array.from({ length: 3 }, (_, i) => ({ name: "sleep", data: { ms: 60_000, i } })));
    const w = startWorker(["--concurrency", "3", "--shutdown-grace-ms", "200"]);
    await waitFor(async () => (await counts()).active === 3, { timeoutMs: 15_000 });
    w.child.kill("SIGTERM");
    expect(await w.exited).toBe(1);
    for (const { id } of ids) {
      expect(w.stderr()).toContain(id);
      const job = (await backend.get(id))!;
      expect(job.state).toBe("waiting");
      expect(job.attempt).toBe(0);
    }
  });

  it("a second signal skips the grace period", async () => {
    await queue.add("stubborn", { ms: 60_000 });
    const w = startWorker(["--shutdown-grace-ms", "60000"]);
    await waitFor(async () => (await counts()).active === 1, { timeoutMs: 15_000 });
    w.child.kill("SIGTERM");
    await waitFor(() => w.stderr().includes("draining"), { description: "first signal logged" });
    w.child.kill("SIGINT");
    expect(await w.exited).toBe(1);
    expect((await counts()).waiting).toBe(1);
  });
});
