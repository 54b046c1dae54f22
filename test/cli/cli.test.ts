/**
 * The CLI as a contract: commands, exit codes, JSON output. Run as a real process.
 */
import Database from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { buildJobSpec } from "../../src/core/spec.js";
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

  it("human output prints control characters of stored ids, names, errors and worker ids escaped; --json keeps them exact", async () => {
    const path2 = await temp.file("controls.db");
    const db2 = `sqlite:${path2}`;
    // U+009B is CSI (ESC [ in one character), as an id stored by an earlier version may hold it.
    const id = "evil-\u009b2J-\u001b[31m-1";
    const shownId = String.raw`evil-\u009b2J-\u001b[31m-1`;
    const backend = new SqliteBackend({ path: path2 });
    try {
      await backend.enqueue([buildJobSpec({ queue: "mail", name: "welcome", data: { note: "\u0085" }, options: { jobId: "evil-1", attempts: 1 } })]);
      const [claimed] = await backend.claim({ queues: ["mail"], names: ["welcome"], worker: { id: "w-1", host: "h", pid: 1 }, limit: 1, leaseMs: 1000 });
      await backend.fail([
        {
          lease: claimed!.lease,
          error: { name: "TypeError", message: "boom \u001b]0;owned\u0007 \u009b2J", stack: "TypeError: boom\n    at \u001b[1mhandler" },
          retryDelayMs: null,
        },
      ]);
    } finally {
      await backend.close();
    }
    // What a store written by an earlier version holds: the id and the worker id as they were taken then.
    const sql = new Database(path2);
    try {
      sql.prepare("UPDATE conveyor_jobs SET id = ?, history = json_set(history, '$[0].workerId', ?) WHERE id = ?").run(id, "w-\u009b1", "evil-1");
    } finally {
      sql.close();
    }
    const raw = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/;
    const ls = await runCli(["jobs", "ls", "--db", db2]);
    expect(ls.code).toBe(0);
    expect(ls.stdout).not.toMatch(raw);
    expect(ls.stdout).toContain(shownId);
    // The shown id is the id as a JSON string writes it (and as bash's $'…' reads it) when it holds
    // no backslash of its own: printable() escapes control characters only, so an id spelling
    // "\u009b" with a real backslash prints the same (`--json` tells them apart).
    const shownIdLs = /^(evil-\S+)\s/m.exec(ls.stdout)![1]!;
    expect(JSON.parse(`"${shownIdLs}"`)).toBe(id);
    expect(ls.stdout).toContain(String.raw`TypeError: boom \u001b]0;owned\u0007 \u009b2J`);
    for (const args of [
      ["jobs", "show", id],
      ["dlq", "show", id],
    ]) {
      const show = await runCli([...args, "--db", db2]);
      expect(show.code, show.stderr).toBe(0);
      expect(show.stdout).not.toMatch(raw);
      expect(show.stdout).toContain(`id           ${shownId}\n`);
      expect(show.stdout).toContain(String.raw`payload      {"note":"\u0085"}`);
      expect(show.stdout).toContain(String.raw`error        TypeError: boom \u001b]0;owned\u0007 \u009b2J`);
      expect(show.stdout).toContain(String.raw`at \u001b[1mhandler`);
      expect(show.stdout).toMatch(/1\s+dead\s+w-\\u009b1\s+h\s+1/);
    }
    const dead = await runCli(["dlq", "ls", "--db", db2]);
    expect(dead.stdout).not.toMatch(raw);
    expect(dead.stdout).toContain(shownId);
    // --json stays exact: the id as stored.
    expect((JSON.parse((await runCli(["jobs", "ls", "--db", db2, "--json"])).stdout) as JobRecord[]).map((j) => j.id)).toEqual([id]);
    expect((JSON.parse((await runCli(["jobs", "show", id, "--db", db2, "--json"])).stdout) as JobRecord).history[0]!.workerId).toBe("w-\u009b1");
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
