/**
 * `conveyor stats --window`: rates and run/wait percentiles over a window, from the finished jobs
 * the store keeps — for a person without Prometheus.
 */
import { afterAll, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { windowFigures } from "../../src/cli/stats.js";
import { Queue, silentLogger, UnrecoverableError, Worker, type JobRecord } from "../../src/index.js";
import { runCli } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const temp = new TempDirs();
afterAll(() => temp.removeAll());

function finished(state: "completed" | "dead", runAt: number, startedAt: number, finishedAt: number): JobRecord {
  return { state, runAt, startedAt, finishedAt } as JobRecord;
}

describe("conveyor stats --window", () => {
  it("computes rates over the window and nearest-rank percentiles of run and wait time", () => {
    const now = 1_000_000;
    const jobs = [
      // 100 completions inside a 100 s window: run time 1..100 ms, waited 5 ms each.
      ...Array.from({ length: 100 }, (_, i) => finished("completed", now - 50_000 - 5, now - 50_000, now - 50_000 + i + 1)),
      finished("dead", now - 20_000, now - 20_000, now - 19_000),
      // Finished before the window: not counted, and proof that the window is fully kept.
      finished("completed", now - 500_000, now - 500_000, now - 400_000),
    ];
    const w = windowFigures(jobs, now, 100_000, false);
    expect(w).toMatchObject({ completed: 100, dead: 1, coveredMs: 100_000, completedPerSecond: 1, deadPerSecond: 0.01, sampled: false });
    expect(w.runMs).toEqual({ p50: 50, p95: 95, p99: 99 });
    expect(w.waitMs).toEqual({ p50: 5, p95: 5, p99: 5 });
    // Everything kept finished inside the window: retention may have pruned its start, so the
    // rate covers only the span from the oldest kept finish.
    const pruned = windowFigures(jobs.slice(0, 100), now, 100_000, false);
    expect(pruned.coveredMs).toBe(50_000 - 1);
    expect(pruned.completedPerSecond).toBeCloseTo(100 / 49.999, 6);
  });

  it("prints completions, dead letters and percentiles of a real run, in the table and as JSON", async () => {
    const path = await temp.file("jobs.db");
    const backend = new SqliteBackend({ path });
    try {
      const queue = new Queue("thumbs", { backend });
      for (let i = 0; i < 12; i++) await queue.add("resize", { ms: 20 });
      await queue.add("broken", {});
      const worker = new Worker({
        backend,
        queues: "thumbs",
        pollIntervalMs: 20,
        logger: silentLogger,
        handlers: {
          resize: async (job) => new Promise((r) => setTimeout(r, (job.data as { ms: number }).ms)),
          broken: async () => {
            throw new UnrecoverableError("bad image");
          },
        },
      });
      await waitFor(
        async () => {
          const [s] = await backend.stats("thumbs");
          return s!.counts.completed === 12 && s!.counts.dead === 1;
        },
        { timeoutMs: 15_000 },
      );
      await worker.close();
    } finally {
      await backend.close();
    }
    const json = await runCli(["stats", "--db", `sqlite:${path}`, "--json", "--window", "10m"]);
    expect(json.code).toBe(0);
    const [thumbs] = JSON.parse(json.stdout) as Array<{
      queue: string;
      counts: { completed: number };
      window: { completed: number; dead: number; windowMs: number; coveredMs: number; completedPerSecond: number; runMs: { p50: number; p99: number } };
    }>;
    expect(thumbs!.counts.completed).toBe(12);
    expect(thumbs!.window).toMatchObject({ completed: 12, dead: 1, windowMs: 600_000 });
    expect(thumbs!.window.runMs.p50).toBeGreaterThanOrEqual(19);
    // Every kept job finished within the last seconds: the rate covers that span, not 10 minutes.
    expect(thumbs!.window.coveredMs).toBeLessThan(600_000);
    expect(thumbs!.window.completedPerSecond).toBeGreaterThan(12 / 600);

    const text = await runCli(["stats", "--db", `sqlite:${path}`, "--window", "10m"]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/last 10m 0s \(finished jobs the store keeps\):/);
    expect(text.stdout).toMatch(/completed\/s\s+dead\/s\s+run p50 \/ p95 \/ p99\s+wait p50 \/ p95 \/ p99/);
    expect(text.stdout).toMatch(/thumbs\s+~\d/);

    const bad = await runCli(["stats", "--db", `sqlite:${path}`, "--window", "ten minutes"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--window takes a duration such as 90s, 5m or 1h/);
  });
});
