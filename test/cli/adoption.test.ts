/**
 * CLI behaviour a new user meets first: --version, help that names every store URL, replaying a
 * large dead-letter queue, and `serve --handlers` choosing its queues and logging through one logger.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { Queue } from "../../src/index.js";
import { runCli, spawnCli } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const temp = new TempDirs();
afterAll(() => temp.removeAll());

/** Stores `count` dead jobs on `queue`, made the way a worker makes them (claim, fail for good). */
async function deadJobs(backend: SqliteBackend, queue: string, count: number): Promise<void> {
  await new Queue(queue, { backend }).addBulk(Array.from({ length: count }, (_, i) => ({ name: "welcome", data: { i } })));
  const claimed = await backend.claim({ queues: [queue], names: ["welcome"], worker: { id: "w", host: "h", pid: 1 }, limit: count, leaseMs: 60_000 });
  expect(claimed).toHaveLength(count);
  await backend.fail(claimed.map((c) => ({ lease: c.lease, error: { name: "Error", message: "boom", stack: "Error: boom" }, retryDelayMs: null })));
}

describe("conveyor CLI for new users", () => {
  it("--version prints the package version; help lists sqlite:, postgres:// and redis:// URLs", { timeout: 90_000 }, async () => {
    const { version } = (await import("../../package.json", { with: { type: "json" } })).default;
    const printed = await runCli(["--version"]);
    expect(printed.code).toBe(0);
    expect(printed.stdout.trim()).toBe(version);
    for (const args of [["--help"], ["worker", "--help"], ["serve", "--help"], ["dlq", "--help"]]) {
      const help = await runCli(args);
      expect(help.code, args.join(" ")).toBe(0);
      expect(help.stdout).toMatch(/sqlite:PATH/);
      expect(help.stdout).toMatch(/postgres:\/\/.*\?schema=NAME/);
      expect(help.stdout).toMatch(/redis:\/\/.*\?prefix=NAME/);
    }
  });

  it("dlq replay --all replays every dead job of the queue in pages, with progress on stderr", { timeout: 90_000 }, async () => {
    const path = await temp.file("dlq.db");
    const backend = new SqliteBackend({ path });
    try {
      await deadJobs(backend, "mail", 1_234);
      await deadJobs(backend, "other", 3);
    } finally {
      await backend.close();
    }
    const replay = await runCli(["dlq", "replay", "--all", "--queue", "mail", "--db", `sqlite:${path}`]);
    expect(replay.code, replay.stderr).toBe(0);
    expect(replay.stdout.trim()).toBe("replayed 1234 dead job(s)");
    // Not a TTY: one progress line per page of 500.
    expect(replay.stderr.trim().split("\n")).toEqual(["replayed 500 of 1234", "replayed 1000 of 1234", "replayed 1234 of 1234"]);
    const after = new SqliteBackend({ path });
    try {
      const stats = Object.fromEntries((await after.stats()).map((s) => [s.queue, s.counts]));
      expect(stats.mail).toMatchObject({ dead: 0, waiting: 1_234 });
      expect(stats.other).toMatchObject({ dead: 3 });
    } finally {
      await after.close();
    }
  });
});

describe("conveyor serve --handlers", () => {
  it("without --queue takes the queues the handlers module names, and logs the worker through Fastify's logger", { timeout: 90_000 }, async () => {
    const dir = await temp.make();
    const handlers = join(dir, "handlers.mjs");
    writeFileSync(
      handlers,
      `export const queues = ["mail", "billing"];
export default { doomed: async () => { throw new Error("no such user"); } };\n`,
    );
    const db = `sqlite:${join(dir, "serve.db")}`;
    const seed = new SqliteBackend({ path: join(dir, "serve.db") });
    await new Queue("billing", { backend: seed }).add("doomed", {}, { attempts: 1 });
    await seed.close();

    const server = spawnCli(["serve", "--db", db, "--port", "0", "--no-auth", "--handlers", handlers, "--log-level", "warn"]);
    try {
      await waitFor(() => server.stderr().includes("worker on mail,billing"), { timeoutMs: 20_000, description: "serve started with the module's queues" });
      // The dead job's warning comes from the worker, written by pino (numeric level, pid, hostname).
      const line = await waitFor(
        () =>
          server
            .stdout()
            .split("\n")
            .find((l) => l.includes('"job dead"')),
        { timeoutMs: 20_000, description: "the worker's job-dead warning" },
      );
      const entry = JSON.parse(line) as { level: unknown; msg: unknown; name: unknown; pid: unknown; hostname: unknown };
      expect(entry).toMatchObject({ level: 40, msg: "job dead", name: "doomed" });
      expect(typeof entry.pid).toBe("number");
      expect(typeof entry.hostname).toBe("string");
      // Nothing went around pino to stderr as the CLI's own JSON lines.
      expect(server.stderr()).not.toMatch(/"level":"(warn|info)"/);
    } finally {
      server.child.kill("SIGTERM");
    }
    expect(await server.exited).toBe(0);
  });

  it("--log-level error silences the worker's warnings too", { timeout: 90_000 }, async () => {
    const dir = await temp.make();
    const handlers = join(dir, "handlers.mjs");
    writeFileSync(handlers, `export const queues = "billing";\nexport default { doomed: async () => { throw new Error("no such user"); } };\n`);
    const seed = new SqliteBackend({ path: join(dir, "serve.db") });
    const queue = new Queue("billing", { backend: seed });
    const { id } = await queue.add("doomed", {}, { attempts: 1 });
    const server = spawnCli(["serve", "--db", `sqlite:${join(dir, "serve.db")}`, "--port", "0", "--no-auth", "--handlers", handlers, "--log-level", "error"]);
    try {
      await waitFor(async () => (await queue.getJob(id))?.state === "dead", { timeoutMs: 20_000, description: "the job ran and died" });
    } finally {
      server.child.kill("SIGTERM");
    }
    expect(await server.exited).toBe(0);
    await seed.close();
    expect(server.stdout() + server.stderr()).not.toContain("job dead");
  });

  it("without --queue and without a queues export says what to do", { timeout: 90_000 }, async () => {
    const dir = await temp.make();
    const handlers = join(dir, "handlers.mjs");
    writeFileSync(handlers, `export default { welcome: async () => {} };\n`);
    const result = await runCli(["serve", "--db", `sqlite:${join(dir, "x.db")}`, "--no-auth", "--handlers", handlers]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("--queue");
    expect(result.stderr).toContain("export const queues");
  });
});

describe("conveyor worker without --queue", () => {
  it("takes the queues the handlers module names and runs their jobs", { timeout: 90_000 }, async () => {
    const dir = await temp.make();
    const handlers = join(dir, "handlers.mjs");
    writeFileSync(handlers, `export const queues = ["mail", "billing"];\nexport default { charge: async (job) => ({ charged: job.data.cents }) };\n`);
    const seed = new SqliteBackend({ path: join(dir, "w.db") });
    const billing = new Queue("billing", { backend: seed });
    const { id } = await billing.add("charge", { cents: 1200 });
    const worker = spawnCli(["worker", "--db", `sqlite:${join(dir, "w.db")}`, "--handlers", handlers, "--poll-interval-ms", "50"]);
    try {
      await waitFor(async () => (await billing.getJob(id))?.state === "completed", { timeoutMs: 20_000, description: "the billing job ran" });
      expect((await billing.getJob(id))?.result).toEqual({ charged: 1200 });
      expect(worker.stderr()).toContain("queues mail,billing");
    } finally {
      worker.child.kill("SIGTERM");
    }
    expect(await worker.exited).toBe(0);
    await seed.close();
  });

  it("says what to do without a queues export, and with --sandbox", { timeout: 90_000 }, async () => {
    const dir = await temp.make();
    const handlers = join(dir, "handlers.mjs");
    writeFileSync(handlers, `export default { welcome: async () => {} };\n`);
    const plain = await runCli(["worker", "--db", `sqlite:${join(dir, "x.db")}`, "--handlers", handlers]);
    expect(plain.code).toBe(2);
    expect(plain.stderr).toContain("--queue");
    expect(plain.stderr).toContain("export const queues");
    const sandboxed = await runCli(["worker", "--db", `sqlite:${join(dir, "x.db")}`, "--handlers", handlers, "--sandbox"]);
    expect(sandboxed.code).toBe(2);
    expect(sandboxed.stderr).toContain("with --sandbox");
  });
});
