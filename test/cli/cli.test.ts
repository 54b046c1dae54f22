/**
 * The CLI as a contract: commands, exit codes, JSON output. Run as a real process.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import type { JobRecord, QueueStats } from "../../src/index.js";
import { runCli } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs();
let db: string;
let path: string;

beforeAll(async () => {
  path = await temp.file("cli.db");
  db = `sqlite:${path}`;
});
afterAll(() => temp.removeAll());

describe("conveyor CLI", () => {
  it("migrate creates the schema and is idempotent", async () => {
    for (let i = 0; i < 2; i++) {
      const r = await runCli(["migrate", "--db", db]);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain("schema is up to date");
    }
  });

  it("enqueue prints the id, reports duplicates, and --count adds many with i in the data", async () => {
    const one = await runCli(["enqueue", "--db", db, "--queue", "mail", "--name", "welcome", "--data", '{"userId":"u1"}', "--id", "welcome:u1"]);
    expect(one.code).toBe(0);
    expect(one.stdout.trim()).toBe("welcome:u1");
    const dup = await runCli(["enqueue", "--db", db, "--queue", "mail", "--name", "welcome", "--id", "welcome:u1", "--json"]);
    expect(JSON.parse(dup.stdout)).toEqual({ id: "welcome:u1", duplicate: true });
    const many = await runCli([
      "enqueue",
      "--db",
      db,
      "--queue",
      "bulk",
      "--name",
      "n",
      "--data",
      '{"x":1}',
      "--count",
      "25",
      "--priority",
      "2",
      "--attempts",
      "4",
    ]);
    expect(many.code).toBe(0);
    expect(many.stdout).toContain("enqueued 25 job(s)");
    const backend = new SqliteBackend({ path });
    try {
      const jobs = await backend.list({ queue: "bulk" }, { limit: 100 });
      expect(jobs).toHaveLength(25);
      expect(jobs.map((j) => (j.data as { i: number }).i).sort((a, b) => a - b)).toEqual([...Array(25).keys()]);
      expect(jobs.every((j) => j.priority === 2 && j.maxAttempts === 4 && (j.data as { x: number }).x === 1)).toBe(true);
    } finally {
      await backend.close();
    }
  });

  it("stats prints a table, or JSON with counts and the oldest waiting age", async () => {
    const table = await runCli(["stats", "--db", db]);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/queue\s+waiting\s+scheduled\s+active/);
    expect(table.stdout).toMatch(/bulk\s+25/);
    const json = JSON.parse((await runCli(["stats", "--db", db, "--json"])).stdout) as QueueStats[];
    const bulk = json.find((s) => s.queue === "bulk")!;
    expect(bulk.counts.waiting).toBe(25);
    expect(bulk.oldestWaitingAgeMs).toBeGreaterThanOrEqual(0);
  });

  it("jobs ls / show, and dlq ls / replay on a dead job", async () => {
    const ls = JSON.parse((await runCli(["jobs", "ls", "--db", db, "--queue", "mail", "--json"])).stdout) as JobRecord[];
    expect(ls.map((j) => j.id)).toEqual(["welcome:u1"]);
    const show = await runCli(["jobs", "show", "welcome:u1", "--db", db]);
    expect(show.stdout).toContain('payload      {"userId":"u1"}');
    // --queue names the job's queue: another queue's job with this id is not it.
    expect((await runCli(["jobs", "show", "welcome:u1", "--queue", "mail", "--db", db])).code).toBe(0);
    expect((await runCli(["jobs", "show", "welcome:u1", "--queue", "other", "--db", db])).code).toBe(1);
    expect((await runCli(["jobs", "cancel", "welcome:u1", "--queue", "other", "--db", db])).stdout).toContain("welcome:u1: not-found");

    // Make a dead job the way a worker would: claim it and fail it for good.
    const backend = new SqliteBackend({ path });
    try {
      const [claimed] = await backend.claim({ queues: ["mail"], names: ["welcome"], worker: { id: "w", host: "h", pid: 1 }, limit: 1, leaseMs: 1000 });
      await backend.fail([
        { lease: claimed!.lease, error: { name: "TypeError", message: "boom", stack: "TypeError: boom\n    at handler" }, retryDelayMs: null },
      ]);
    } finally {
      await backend.close();
    }
    const dead = await runCli(["dlq", "ls", "--db", db]);
    expect(dead.stdout).toContain("welcome:u1");
    expect(dead.stdout).toContain("TypeError: boom");
    const forensics = await runCli(["dlq", "show", "welcome:u1", "--db", db]);
    expect(forensics.stdout).toContain("at handler");
    expect(forensics.stdout).toMatch(/1\s+dead\s+w\s+h\s+1/);
    const replay = await runCli(["dlq", "replay", "welcome:u1", "--db", db]);
    expect(replay.code).toBe(0);
    expect(replay.stdout).toContain("welcome:u1: replayed");
    expect((await runCli(["dlq", "ls", "--db", db])).stdout).toContain("the dead-letter queue is empty");
    const rm = await runCli(["jobs", "rm", "welcome:u1", "--db", db]);
    expect(rm.code).toBe(1);
    expect(rm.stdout).toContain("welcome:u1: not-finished (cancel it first)");
    expect((await runCli(["jobs", "cancel", "welcome:u1", "--db", db])).code).toBe(0);
    expect((await runCli(["jobs", "rm", "welcome:u1", "--db", db])).stdout).toContain("welcome:u1: removed");
    expect((await runCli(["jobs", "show", "welcome:u1", "--db", db])).code).toBe(1);
  });

  it("usage mistakes exit 2 and say what to do", async () => {
    const noDb = await runCli(["stats"], { CONVEYOR_DB: "" });
    expect(noDb.code).toBe(2);
    expect(noDb.stderr).toContain("pass --db sqlite:PATH");
    const badData = await runCli(["enqueue", "--db", db, "--queue", "q", "--name", "n", "--data", "{nope"]);
    expect(badData.code).toBe(2);
    expect(badData.stderr).toContain("--data is not valid JSON");
    const unknown = await runCli(["frobnicate"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('unknown command "frobnicate"');
    const badScheme = await runCli(["stats", "--db", "mysql://x"]);
    expect(badScheme.code).not.toBe(0);
    expect(badScheme.stderr).toMatch(/sqlite:/);
  });

  it("invalid job options are refused with a clear error and nothing stored", async () => {
    const r = await runCli(["enqueue", "--db", db, "--queue", "bad", "--name", "n", "--priority", "2000000"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("option priority must be an integer from -1000000 to 1000000");
    const stats = JSON.parse((await runCli(["stats", "--db", db, "--queue", "bad", "--json"])).stdout) as QueueStats[];
    expect(stats[0]!.counts.waiting).toBe(0);
  });
});
