/**
 * `conveyor serve --metrics-port`: after SIGTERM the in-process worker drains its running jobs,
 * and Prometheus must still be able to scrape that drain; the metrics listener closes after it.
 */
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { Queue } from "../../src/index.js";
import { spawnCli } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const temp = new TempDirs();
afterAll(() => temp.removeAll());

describe("conveyor serve shutdown", () => {
  it("keeps /metrics answering while the worker drains a slow job after SIGTERM, then exits 0", { timeout: 90_000 }, async () => {
    const dir = await temp.make();
    const started = join(dir, "started");
    const release = join(dir, "release");
    const handlers = join(dir, "handlers.mjs");
    // The job runs until the test lets it finish: the drain lasts as long as the test needs.
    writeFileSync(
      handlers,
      `import { existsSync, writeFileSync } from "node:fs";
export const queues = ["slow"];
export default {
  slow: async () => {
    writeFileSync(${JSON.stringify(started)}, "");
    while (!existsSync(${JSON.stringify(release)})) await new Promise((r) => setTimeout(r, 50));
  },
};\n`,
    );
    const path = join(dir, "serve.db");
    const seed = new SqliteBackend({ path });
    const queue = new Queue("slow", { backend: seed });
    const { id } = await queue.add("slow", {});
    const server = spawnCli([
      "serve",
      "--db",
      `sqlite:${path}`,
      "--port",
      "0",
      "--no-auth",
      "--handlers",
      handlers,
      "--metrics-port",
      "0",
      "--log-level",
      "warn",
    ]);
    try {
      const [, metricsUrl] = await waitFor(() => /conveyor serve metrics on (http:\/\/\S+\/metrics)/.exec(server.stderr()), {
        timeoutMs: 30_000,
        description: "the metrics listener",
      });
      const [, apiUrl] = await waitFor(() => /conveyor serve on (http:\/\/\S+\/v1)/.exec(server.stderr()), {
        timeoutMs: 30_000,
        description: "the API listener",
      });
      await waitFor(() => existsSync(started), { timeoutMs: 30_000, description: "the slow job started" });

      server.child.kill("SIGTERM");
      // The API stops accepting requests: the drain has begun.
      await waitFor(
        async () =>
          fetch(`${apiUrl!}/queues`).then(
            () => false,
            () => true,
          ),
        { timeoutMs: 30_000, description: "the API closed" },
      );
      const scrape = await fetch(metricsUrl!);
      expect(scrape.status).toBe(200);
      // The scrape sees the drain: the job's slot still busy.
      expect(await scrape.text()).toMatch(/^conveyor_worker_slots_busy 1$/m);
      expect(existsSync(release)).toBe(false);
    } finally {
      writeFileSync(release, "");
    }
    expect(await server.exited).toBe(0);
    expect((await queue.getJob(id))?.state).toBe("completed");
    await seed.close();
    // The job finished inside the drain; nothing was released back to the store.
    expect(server.stderr()).not.toMatch(/released/);
  });
});
