/**
 * A real Prometheus (the Debian package's server) scrapes a running `conveyor worker
 * --metrics-port` and `conveyor serve --metrics-port` on loopback; PromQL through its HTTP API
 * returns the depth, oldest waiting age and completed count the store and the worker have.
 */
import { readFile } from "node:fs/promises";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { Queue } from "../../src/index.js";
import { ROOT, spawnCli, type Spawned } from "../helpers/cli.js";
import { freePort } from "../helpers/ports.js";
import { PrometheusServer } from "../helpers/prometheus.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const temp = new TempDirs();
const children: Spawned[] = [];
let prometheus: PrometheusServer | null = null;

afterEach(async () => {
  await prometheus?.stop();
  prometheus = null;
  for (const c of children.splice(0)) {
    if (c.child.exitCode === null) {
      c.child.kill("SIGTERM");
      await Promise.race([c.exited, new Promise((r) => setTimeout(r, 10_000))]);
      if (c.child.exitCode === null) c.child.kill("SIGKILL");
    }
  }
});
afterAll(() => temp.removeAll());

function start(args: string[], ready: RegExp): Promise<{ child: Spawned; match: RegExpExecArray }> {
  const child = spawnCli(args);
  children.push(child);
  return waitFor(
    () => {
      if (child.child.exitCode !== null) throw new Error(`conveyor ${args[0]} exited ${child.child.exitCode}: ${child.stderr()}`);
      const match = ready.exec(child.stderr());
      return match ? { child, match } : null;
    },
    { timeoutMs: 25_000, intervalMs: 50, description: `conveyor ${args[0]} to start` },
  );
}

describe("Prometheus scraping conveyor worker and conveyor serve", () => {
  it("answers PromQL with the store's depth and oldest age and the worker's completed count", { timeout: 60_000 }, async () => {
    const db = `sqlite:${await temp.file("jobs.db")}`;
    const backend = new SqliteBackend({ path: db.slice("sqlite:".length) });
    const backlogAgeSeconds = 120;
    try {
      // A queue nobody works on: 4 jobs, the oldest due two minutes ago.
      const idle = new Queue("backlog", { backend });
      const now = Date.now();
      for (let i = 0; i < 4; i++) await idle.add("sleep", { i }, { runAt: now - backlogAgeSeconds * 1000 + i * 1000 });
    } finally {
      await backend.close();
    }

    const workerMetricsPort = await freePort();
    const serveMetricsPort = await freePort();
    await start(
      [
        "worker",
        "--db",
        db,
        "--queue",
        "work",
        "--handlers",
        "test/fixtures/handlers.ts",
        "--poll-interval-ms",
        "100",
        "--metrics-port",
        String(workerMetricsPort),
      ],
      /worker metrics on http:/,
    );
    const serve = await start(
      ["serve", "--db", db, "--no-auth", "--port", "0", "--log-level", "warn", "--metrics-port", String(serveMetricsPort), "--metrics-store-cache-ms", "1000"],
      /conveyor serve on (http:\/\/\S+?)\/v1 /,
    );
    const api = serve.match[1]!;

    // Three jobs through the HTTP API (counted by serve as enqueued), run by the worker.
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${api}/v1/queues/work/jobs`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name: "sleep", data: { ms: 5, i } }),
      });
      expect(res.status).toBe(202);
    }

    prometheus = await PrometheusServer.start({ worker: [`127.0.0.1:${workerMetricsPort}`], serve: [`127.0.0.1:${serveMetricsPort}`] }, 1);
    const prom = prometheus;
    await waitFor(async () => (await prom.targets()).filter((t) => t.health === "up").length === 2, {
      timeoutMs: 20_000,
      intervalMs: 250,
      description: `both targets up (${JSON.stringify(await prom.targets().catch(() => []))}; ${prom.logTail()})`,
    });

    // Completed by the worker process (per-process counter), enqueued by the serve process.
    await waitFor(async () => (await prom.value('sum(conveyor_jobs_completed_total{job="worker",queue="work",name="sleep"})')) === 3, {
      timeoutMs: 25_000,
      intervalMs: 250,
      description: "three completions scraped from the worker",
    });
    expect(await prom.value('sum(conveyor_jobs_enqueued_total{job="serve",queue="work"})')).toBe(3);
    expect(await prom.value('sum(conveyor_job_duration_seconds_count{job="worker",queue="work"})')).toBe(3);

    // Store gauges: both processes report the same store; the recording takes the max per queue.
    await waitFor(async () => (await prom.value('max(conveyor_queue_jobs{queue="work",state="completed"})')) === 3, {
      timeoutMs: 15_000,
      intervalMs: 250,
      description: "the store's completed count",
    });
    expect(await prom.value('max(conveyor_queue_jobs{queue="backlog",state="waiting"})')).toBe(4);
    expect(await prom.value('max(conveyor_queue_jobs{queue="work",state="waiting"})')).toBe(0);
    const age = await prom.value('max(conveyor_queue_oldest_waiting_age_seconds{queue="backlog"})');
    expect(age).toBeGreaterThanOrEqual(backlogAgeSeconds);
    expect(age).toBeLessThan(backlogAgeSeconds + 60);
    expect(await prom.value('max(conveyor_queue_oldest_waiting_age_seconds{queue="work"})')).toBe(0);
    // Each target has its own series: both scrapes reached the store.
    expect((await prom.query('conveyor_queue_jobs{queue="backlog",state="waiting"}')).map((s) => s.metric.job).sort()).toEqual(["serve", "worker"]);
    expect(await prom.value('max(conveyor_worker_slots{job="worker"})')).toBe(10);

    // Every query of the Grafana dashboard is valid PromQL for this Prometheus, and the first of
    // each panel on what this run produced returns data (no job failed, so failures have none).
    const dashboard = JSON.parse(await readFile(`${ROOT}/deploy/grafana/conveyor-dashboard.json`, "utf8")) as {
      panels: Array<{ title: string; targets: Array<{ expr: string }> }>;
    };
    const produced = new Set([
      "Oldest waiting job",
      "Backlog by state",
      "Throughput",
      "Run time p50 / p95 / p99",
      "Wait time p50 / p95 / p99",
      "Worker slots",
      "Store statistics query",
    ]);
    for (const panel of dashboard.panels) {
      for (const [i, { expr }] of panel.targets.entries()) {
        const promql = expr.replaceAll("$queue", ".*").replaceAll("$__rate_interval", "1m");
        await prom.query(promql); // throws on invalid PromQL
        // A rate needs two scrapes of the series: wait for them rather than assume.
        if (produced.has(panel.title) && i === 0)
          await waitFor(async () => (await prom.query(promql)).length > 0, {
            timeoutMs: 10_000,
            intervalMs: 250,
            description: `${panel.title}: ${expr} returns data`,
          });
      }
    }

    // The KEDA endpoint on the same listener.
    const scaling = (await (await fetch(`http://127.0.0.1:${serveMetricsPort}/scaling?queue=backlog`)).json()) as {
      backlog: number;
      oldestWaitingAgeSeconds: number;
    };
    expect(scaling.backlog).toBe(4);
    expect(scaling.oldestWaitingAgeSeconds).toBeGreaterThanOrEqual(backlogAgeSeconds);
  });
});
