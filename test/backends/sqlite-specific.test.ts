/**
 * What only the SQLite backend has: its migrations, its file settings (WAL, busy timeout),
 * several OS processes sharing one file, wake-ups through the file, and openBackend's URLs.
 * Everything every backend must do is in the conformance suite (sqlite.test.ts).
 */
import { spawn, type ChildProcess } from "node:child_process";
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { SchemaTooNewError } from "../../src/backend/migration-files.js";
import { openBackend } from "../../src/backend/open.js";
import { SchemaTooNewError as PostgresSchemaTooNewError } from "../../src/backend/postgres/index.js";
import { SqliteBackend, type SqliteBackendOptions } from "../../src/backend/sqlite/index.js";
import { FakeClock } from "../../src/core/clock.js";
import { InvalidInputError } from "../../src/core/errors.js";
import type { JobSpec } from "../../src/core/job.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { ROOT } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const temp = new TempDirs("conveyor-sqlite-specific-");
const closeAfterTest: Array<{ close(): unknown }> = [];
const childrenOfTest: ChildProcess[] = [];

afterEach(async () => {
  for (const child of childrenOfTest.splice(0)) if (child.exitCode === null) child.kill("SIGKILL");
  for (const item of closeAfterTest.splice(0).reverse()) await item.close();
});
afterAll(() => temp.removeAll());

function open(options: SqliteBackendOptions): SqliteBackend {
  const backend = new SqliteBackend(options);
  closeAfterTest.push(backend);
  return backend;
}

/** A plain better-sqlite3 connection to inspect the file from outside the backend. */
function raw(path: string): Database.Database {
  const db = new Database(path);
  closeAfterTest.push(db);
  return db;
}

function spec(queue = "q", data: unknown = {}): JobSpec {
  return buildJobSpec({ queue, name: "job", data });
}

const WORKER = { id: "w", host: "h", pid: 1 };

describe("migrations", () => {
  it("create the schema once: reopening and calling migrate() again change nothing", async () => {
    const path = await temp.file("jobs.db");
    const first = open({ path });
    const job = spec();
    await first.enqueue([job]);
    await first.migrate();
    await first.migrate();
    await first.close();

    const second = open({ path });
    await second.migrate();
    expect((await second.get(job.id))?.state).toBe("waiting");
    const versions = raw(path).prepare("SELECT version FROM conveyor_migrations ORDER BY version").pluck().all();
    expect(versions).toEqual(versions.map((_, i) => i + 1));
    expect(versions.length).toBeGreaterThanOrEqual(1);
  });

  it("refuse a database whose schema is newer than the code, naming both versions", async () => {
    const path = await temp.file("jobs.db");
    const current = open({ path });
    raw(path).prepare("INSERT INTO conveyor_migrations (version, applied_at) VALUES (999, 0)").run();

    const message = /is at version 999, newer than this Conveyor knows \(up to \d+\); upgrade conveyor/;
    expect(() => new SqliteBackend({ path })).toThrow(message);
    await expect(current.migrate()).rejects.toThrow(message);
    // One type for every SQL store (the PostgreSQL backend throws the same class).
    expect(() => new SqliteBackend({ path })).toThrow(SchemaTooNewError);
    expect(SchemaTooNewError).toBe(PostgresSchemaTooNewError);
  });

  it("keep backends with different table prefixes apart in one file", async () => {
    const path = await temp.file("shared.db");
    const a = open({ path, tablePrefix: "app_jobs_" });
    const b = open({ path, tablePrefix: "" });
    await a.enqueue([spec("only-in-a")]);

    expect((await a.stats()).map((s) => s.queue)).toEqual(["only-in-a"]);
    expect(await b.stats()).toEqual([]);
    const tables = raw(path).prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name").pluck().all();
    expect(tables).toEqual(expect.arrayContaining(["app_jobs_jobs", "app_jobs_migrations", "jobs", "migrations"]));
  });

  it("refuse a table prefix that is not a plain identifier", async () => {
    const path = await temp.file("jobs.db");
    expect(() => new SqliteBackend({ path, tablePrefix: "x; DROP TABLE users; --" })).toThrow(InvalidInputError);
  });
});

describe("file settings", () => {
  it("a file database is in WAL mode", async () => {
    const path = await temp.file("jobs.db");
    open({ path });
    expect(raw(path).pragma("journal_mode", { simple: true })).toBe("wal");
  });

  it("busyTimeoutMs: a write waits that long for another connection's lock, then fails with StoreUnavailableError (cause SQLITE_BUSY)", async () => {
    const path = await temp.file("jobs.db");
    const backend = open({ path, busyTimeoutMs: 200 });
    const other = raw(path);
    other.exec("BEGIN IMMEDIATE");

    const started = Date.now();
    await expect(backend.enqueue([spec()])).rejects.toMatchObject({ name: "StoreUnavailableError", cause: { code: "SQLITE_BUSY" } });
    expect(Date.now() - started).toBeGreaterThanOrEqual(150);

    other.exec("ROLLBACK");
    expect(await backend.enqueue([spec()])).toHaveLength(1);
  });

  it("rejects a synchronous level other than NORMAL and FULL", async () => {
    const path = await temp.file("jobs.db");
    expect(() => new SqliteBackend({ path, synchronous: "OFF" as "NORMAL" })).toThrow(InvalidInputError);
    expect(open({ path, synchronous: "FULL" }).description).toBe(`sqlite:${path}`);
  });

  it(":memory: is one process only and needs no file", () => {
    const backend = open({ path: ":memory:" });
    expect(backend.capabilities).toMatchObject({ multiProcess: false, crossProcessWakeups: false });
  });
});

describe("several OS processes on one file", () => {
  interface Claimer {
    child: ChildProcess;
    stdout: () => string;
    stderr: () => string;
    exited: Promise<number | null>;
  }

  function startClaimer(path: string, workerId: string): Claimer {
    const child = spawn(process.execPath, ["--import", "tsx", "test/helpers/sqlite-claimer.ts", path, workerId], {
      cwd: ROOT,
      stdio: ["pipe", "pipe", "pipe"],
    });
    childrenOfTest.push(child);
    let out = "";
    let err = "";
    child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (err += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    return { child, stdout: () => out, stderr: () => err, exited };
  }

  it("three processes claiming from one file never claim the same attempt of a job", { timeout: 120_000 }, async () => {
    // The file does not exist yet: the children race to create and migrate it.
    const path = await temp.file("shared.db");
    const claimers = ["p1", "p2", "p3"].map((id) => startClaimer(path, id));
    for (const c of claimers) {
      await waitFor(
        () => {
          if (c.child.exitCode !== null) throw new Error(`a claimer exited early: ${c.stderr()}`);
          return c.stdout().startsWith("ready\n");
        },
        { timeoutMs: 60_000, description: "claimer ready" },
      );
    }

    const producer = open({ path, wakeups: false });
    const results = await producer.enqueue(Array.from({ length: 3_000 }, (_, i) => spec("shared", { i })));
    const ids = results.map((r) => r.id);
    for (const c of claimers) c.child.stdin!.end("go\n");

    const granted: Array<{ id: string; token: number }> = [];
    for (const c of claimers) {
      expect(await c.exited, c.stderr()).toBe(0);
      const lines = c.stdout().trim().split("\n");
      const own = JSON.parse(lines.at(-1)!) as Array<{ id: string; token: number }>;
      // Every process took part: one that claimed nothing would leave nothing to contend over.
      expect(own.length, `a claimer was granted nothing: ${c.stderr()}`).toBeGreaterThan(0);
      granted.push(...own);
    }

    expect(granted).toHaveLength(ids.length);
    expect(new Set(granted.map((g) => g.id))).toEqual(new Set(ids));
    expect(granted.every((g) => g.token === 1)).toBe(true);
    const [stats] = await producer.stats("shared");
    expect(stats?.counts).toMatchObject({ waiting: 0, active: 0, completed: 3_000 });
  });
});

describe("wake-ups through the file", () => {
  it("a subscriber hears which queue another connection made claimable, and nothing for its claims and settles", async () => {
    const path = await temp.file("jobs.db");
    const listening = open({ path });
    const writing = open({ path });
    const woken: string[] = [];
    listening.subscribe((queue) => woken.push(queue));

    await writing.enqueue([spec("remote")]);
    await waitFor(() => woken.includes("remote"), { timeoutMs: 10_000, description: "wake-up for queue remote" });

    const claimed = await writing.claim({ queues: ["remote"], names: ["job"], worker: WORKER, limit: 1, leaseMs: 30_000 });
    await writing.heartbeat(
      claimed.map((c) => c.lease),
      30_000,
    );
    await writing.complete(claimed.map((c) => ({ lease: c.lease, result: null })));
    // Commits are seen in order, so once "marker" arrives the claim, heartbeat and complete have
    // been looked at too: none of them may have woken anyone.
    await writing.enqueue([spec("marker")]);
    await waitFor(() => woken.includes("marker"), { timeoutMs: 10_000, description: "wake-up for queue marker" });
    expect(woken).toEqual(["remote", "marker"]);
  });

  it("does not report this process's own commits twice", async () => {
    const path = await temp.file("jobs.db");
    const backend = open({ path });
    const other = open({ path });
    const woken: string[] = [];
    backend.subscribe((queue) => woken.push(queue));

    await backend.enqueue([spec("own")]);
    expect(woken).toEqual(["own"]);
    await other.enqueue([spec("foreign")]);
    await waitFor(() => woken.includes("foreign"), { timeoutMs: 10_000, description: "wake-up for queue foreign" });
    expect(woken).toEqual(["own", "foreign"]);
  });

  it("a listener that throws does not stop the others or the enqueue", async () => {
    const backend = open({ path: ":memory:" });
    const woken: string[] = [];
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on("warning", onWarning);
    try {
      backend.subscribe(() => {
        throw new Error("listener bug");
      });
      backend.subscribe((queue) => woken.push(queue));
      expect(await backend.enqueue([spec("q")])).toHaveLength(1);
      expect(woken).toEqual(["q"]);
      await waitFor(() => warnings.some((m) => m.includes("listener bug")), { description: "warning emitted" });
    } finally {
      process.off("warning", onWarning);
    }
  });

  it("wakeups: false turns cross-process wake-ups off, and the capability says so", async () => {
    const path = await temp.file("jobs.db");
    expect(open({ path, wakeups: false }).capabilities.crossProcessWakeups).toBe(false);
    expect(open({ path }).capabilities.crossProcessWakeups).toBe(true);
  });
});

describe("completed jobs", () => {
  it("the completed attempt is not written into the history column (the row holds it); a read shows it once, after a failed one", async () => {
    const path = await temp.file("done.db");
    const b = open({ path });
    await b.migrate();
    await b.enqueue([buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId: "once" } })]);
    const [first] = await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 1, leaseMs: 10_000 });
    await b.complete([{ lease: first!.lease, result: 1 }]);
    const stored = () => raw(path).prepare<[string], { history: string }>("SELECT history FROM conveyor_jobs WHERE id = ?").get("once")!.history;
    // Before, complete rewrote the history's JSON with the record appended on every job.
    expect(JSON.parse(stored())).toEqual([]);
    const job = (await b.get("once"))!;
    expect(job.history).toEqual([
      { attempt: 1, workerId: "w", host: "h", pid: 1, startedAt: job.startedAt, finishedAt: job.finishedAt, outcome: "completed", error: null },
    ]);
    // A row completed by an earlier version holds the record already: read once, not twice.
    raw(path)
      .prepare(
        "UPDATE conveyor_jobs SET history = json_array(json_object('attempt', 1, 'workerId', 'w', 'host', 'h', 'pid', 1, 'startedAt', started_at, 'finishedAt', finished_at, 'outcome', 'completed', 'error', NULL)) WHERE id = 'once'",
      )
      .run();
    expect((await b.get("once"))!.history).toEqual(job.history);
  });
});

describe("openBackend", () => {
  it("opens sqlite::memory:, sqlite:PATH and a bare .db path", async () => {
    const memory = await openBackend("sqlite::memory:");
    closeAfterTest.push(memory);
    expect(memory.description).toBe("sqlite::memory:");
    expect(memory.capabilities.multiProcess).toBe(false);

    const path = await temp.file("jobs.db");
    const file = await openBackend(`sqlite:${path}`);
    closeAfterTest.push(file);
    expect(file.description).toBe(`sqlite:${path}`);
    await file.enqueue([spec()]);

    const bare = await openBackend(path);
    closeAfterTest.push(bare);
    expect((await bare.stats("q"))[0]?.counts.waiting).toBe(1);
  });

  it("uses the clock it is given", async () => {
    const clock = new FakeClock();
    const backend = await openBackend("sqlite::memory:", { clock });
    closeAfterTest.push(backend);
    clock.advance(1_234);
    expect(await backend.now()).toBe(clock.now());
  });

  it("refuses unknown schemes without echoing credentials", async () => {
    for (const url of ["mysql://app:s3cret@db.internal/app", "mongodb://app:s3cret@db.internal:27017/app"]) {
      const error = await openBackend(url).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidInputError);
      expect((error as Error).message).toMatch(/unsupported backend URL scheme/);
      expect((error as Error).message).toMatch(/sqlite:PATH/);
      expect((error as Error).message).not.toContain("s3cret");
    }
  });

  it("refuses sqlite://, an empty sqlite: and anything it cannot place, listing what it accepts", async () => {
    for (const url of ["sqlite://jobs.db", "sqlite:", "nats://broker:4222", "jobs.txt", ""]) {
      await expect(openBackend(url), url).rejects.toThrow(/supported: sqlite:PATH/);
    }
  });
});
