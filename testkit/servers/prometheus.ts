/**
 * A throwaway Prometheus server (the Debian package's /usr/bin/prometheus) on a free loopback
 * port, with its own config and data directory, for tests that scrape Conveyor for real.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { waitFor } from "../../src/testing/index.js";
import { freePort } from "./ports.js";

export const PROMETHEUS_BIN = process.env.PROMETHEUS_BIN ?? "/usr/bin/prometheus";
export const PROMTOOL_BIN = process.env.PROMTOOL_BIN ?? "/usr/bin/promtool";

export interface PromSample {
  metric: Record<string, string>;
  value: [number, string];
}

export class PrometheusServer {
  private constructor(
    private readonly child: ChildProcess,
    private readonly dir: string,
    readonly url: string,
    private readonly log: () => string,
  ) {}

  /** Starts Prometheus scraping `targets` (job name -> host:port list) every `scrapeIntervalSeconds`. */
  static async start(targets: Record<string, string[]>, scrapeIntervalSeconds = 1): Promise<PrometheusServer> {
    if (!existsSync(PROMETHEUS_BIN)) throw new Error(`${PROMETHEUS_BIN} is missing: apt-get install prometheus (or set PROMETHEUS_BIN)`);
    const dir = await mkdtemp(join(tmpdir(), "conveyor-prometheus-"));
    const scrapeConfigs = Object.entries(targets)
      .map(([job, hosts]) => `  - job_name: ${job}\n    static_configs:\n      - targets: [${hosts.map((h) => `"${h}"`).join(", ")}]`)
      .join("\n");
    const config = `global:\n  scrape_interval: ${scrapeIntervalSeconds}s\n  scrape_timeout: ${scrapeIntervalSeconds}s\n  evaluation_interval: ${scrapeIntervalSeconds}s\nscrape_configs:\n${scrapeConfigs}\n`;
    await writeFile(join(dir, "prometheus.yml"), config);
    const port = await freePort();
    const child = spawn(
      PROMETHEUS_BIN,
      [
        `--config.file=${join(dir, "prometheus.yml")}`,
        `--storage.tsdb.path=${join(dir, "data")}`,
        `--web.listen-address=127.0.0.1:${port}`,
        "--log.level=warn",
      ],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    let log = "";
    child.stderr.on("data", (d: Buffer) => (log = (log + d.toString()).slice(-8_000)));
    const server = new PrometheusServer(child, dir, `http://127.0.0.1:${port}`, () => log);
    try {
      await waitFor(
        async () => {
          if (child.exitCode !== null) throw new Error(`prometheus exited ${child.exitCode}: ${log}`);
          return (await fetch(`${server.url}/-/ready`)).ok;
        },
        { timeoutMs: 20_000, intervalMs: 100, description: "Prometheus ready" },
      );
    } catch (error) {
      await server.stop();
      throw error;
    }
    return server;
  }

  /** An instant PromQL query; the result vector. */
  async query(promql: string): Promise<PromSample[]> {
    const res = await fetch(`${this.url}/api/v1/query?query=${encodeURIComponent(promql)}`);
    const body = (await res.json()) as { status: string; error?: string; data?: { resultType: string; result: PromSample[] } };
    if (body.status !== "success") throw new Error(`PromQL ${promql} failed: ${body.error}`);
    return body.data!.result;
  }

  /** The single value of a query returning one sample, or null when it returns none. */
  async value(promql: string): Promise<number | null> {
    const result = await this.query(promql);
    if (result.length === 0) return null;
    if (result.length > 1) throw new Error(`PromQL ${promql} returned ${result.length} series, expected one: ${JSON.stringify(result)}`);
    return Number(result[0]!.value[1]);
  }

  /** Scrape target health, per job. */
  async targets(): Promise<Array<{ job: string; health: string; lastError: string }>> {
    const res = await fetch(`${this.url}/api/v1/targets`);
    const body = (await res.json()) as { data: { activeTargets: Array<{ labels: { job: string }; health: string; lastError: string }> } };
    return body.data.activeTargets.map((t) => ({ job: t.labels.job, health: t.health, lastError: t.lastError }));
  }

  logTail(): string {
    return this.log();
  }

  async stop(): Promise<void> {
    if (this.child.exitCode === null) {
      const exited = new Promise((resolve) => this.child.once("exit", resolve));
      this.child.kill("SIGTERM");
      const timer = setTimeout(() => this.child.kill("SIGKILL"), 5_000);
      await exited;
      clearTimeout(timer);
    }
    await rm(this.dir, { recursive: true, force: true });
  }
}
