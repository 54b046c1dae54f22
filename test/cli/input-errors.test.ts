/**
 * Bad command-line input gets one line on stderr that says what to do, no stack trace, and a
 * non-zero exit: 2 with the help for a usage mistake, 1 for a store that cannot be opened.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { Queue } from "../../src/index.js";
import { runCli, spawnCli } from "../helpers/cli.js";
import { freePort } from "../helpers/ports.js";
import { waitFor } from "../helpers/wait-for.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs();
let dir: string;
let db: string;

const worker = { id: "w", host: "h", pid: 1 };

beforeAll(async () => {
  dir = await temp.make();
  db = `sqlite:${join(dir, "jobs.db")}`;
  const backend = new SqliteBackend({ path: join(dir, "jobs.db") });
  try {
    // One dead job in "mail", so a command that ignored --queue '' would find something to act on.
    await new Queue("mail", { backend }).add("welcome", {}, { attempts: 1 });
    const [claimed] = await backend.claim({ queues: ["mail"], names: ["welcome"], worker, limit: 1, leaseMs: 60_000 });
    await backend.fail([{ lease: claimed!.lease, error: { name: "Error", message: "boom", stack: "Error: boom" }, retryDelayMs: null }]);
  } finally {
    await backend.close();
  }
});
afterAll(() => temp.removeAll());

/**
 * How long a one-shot command on a store that cannot be reached may take, startup included: one
 * reconnect attempt (about 0.1 s) and a tsx start on a busy machine.
 */
const ONE_SHOT_BOUND_MS = 20_000;

/** Runs `conveyor ARGS` to the end, or kills it after `ms` (its code is then "SIGKILL"). */
async function runCliWithin(ms: number, args: string[]): Promise<{ code: number | string; stdout: string; stderr: string }> {
  const s = spawnCli(args);
  const timer = setTimeout(() => s.child.kill("SIGKILL"), ms);
  try {
    const code = await s.exited;
    return { code, stdout: s.stdout(), stderr: s.stderr() };
  } finally {
    clearTimeout(timer);
  }
}

/** The first line of stderr, and whether anything that looks like a stack trace followed it. */
function oneLine(stderr: string): { first: string; stack: boolean } {
  return { first: stderr.split("\n")[0]!, stack: /^\s+at /m.test(stderr) };
}

describe("CLI input errors", () => {
  it("a --db SQLite path that cannot be opened: one line naming --db and what is wrong, exit 1", { timeout: 60_000 }, async () => {
    const notADatabase = join(dir, "notes.txt");
    await writeFile(notADatabase, "these are not the pages of a SQLite database\n".repeat(100));
    const aDirectory = join(dir, "a-directory");
    await mkdir(aDirectory);
    const cases: Array<[string, RegExp]> = [
      [`sqlite:${join(dir, "missing", "x.db")}`, /directory does not exist/],
      [`sqlite:${aDirectory}`, /is a directory/],
      [`sqlite:${notADatabase}`, /not a SQLite database/],
    ];
    const runs = cases.flatMap(([url, problem]) =>
      [
        ["migrate", "--db", url],
        ["enqueue", "--db", url, "--queue", "q", "--name", "n"],
        ["relay", "--db", url, "--target", "https://example.invalid/hook"],
      ].map(async (argv) => ({ argv, url, problem, result: await runCli(argv) })),
    );
    for (const { argv, url, problem, result } of await Promise.all(runs)) {
      const { first, stack } = oneLine(result.stderr);
      expect({ argv, code: result.code, stack }).toEqual({ argv, code: 1, stack: false });
      expect(first).toContain(`--db ${url}`);
      expect(first).toMatch(problem);
      expect(result.stderr.trim()).toBe(first);
    }
  });

  it("jobs, dlq and schedules with an option where the subcommand goes: a usage error naming the subcommands", { timeout: 60_000 }, async () => {
    const runs = [
      { argv: ["jobs", "--db", db], subcommands: /ls, show, cancel or rm/ },
      { argv: ["dlq", "--db", db], subcommands: /ls, show or replay/ },
      { argv: ["schedules", "--db", db], subcommands: /ls, add or rm/ },
      { argv: ["jobs", "--db", db, "ls"], subcommands: /ls, show, cancel or rm/ },
    ].map(async ({ argv, subcommands }) => ({ argv, subcommands, result: await runCli(argv) }));
    for (const { argv, subcommands, result } of await Promise.all(runs)) {
      expect({ argv, code: result.code }).toEqual({ argv, code: 2 });
      expect(result.stderr).toMatch(subcommands);
      expect(result.stderr).not.toMatch(/no database/);
    }
  });

  it("an empty --queue is refused by every command that takes one, and nothing is done", { timeout: 60_000 }, async () => {
    const runs = [
      ["dlq", "replay", "--all", "--db", db, "--queue", ""],
      ["dlq", "ls", "--db", db, "--queue", ""],
      ["jobs", "ls", "--db", db, "--queue", ""],
      ["stats", "--db", db, "--queue", ""],
      ["schedules", "ls", "--db", db, "--queue", ""],
      ["enqueue", "--db", db, "--queue", "", "--name", "n"],
      ["enqueue", "--db", db, "--queue", "mail", "--name", "n", "--id", ""],
      ["jobs", "ls", "--db", db, "--state", " "],
    ].map(async (argv) => ({ argv, result: await runCli(argv) }));
    for (const { argv, result } of await Promise.all(runs)) {
      expect({ argv, code: result.code }).toEqual({ argv, code: 2 });
      const option = argv[argv.findIndex((a) => a.trim() === "") - 1];
      expect(oneLine(result.stderr).first).toMatch(new RegExp(`${option} is empty`));
    }
    const dead = await runCli(["dlq", "ls", "--db", db, "--json"]);
    expect((JSON.parse(dead.stdout) as unknown[]).length).toBe(1);
  });

  it("integer options take decimal integers only, and the message quotes what was given", { timeout: 60_000 }, async () => {
    const runs = [
      {
        argv: ["enqueue", "--db", db, "--queue", "q", "--name", "n", "--attempts", "0x10"],
        refused: /--attempts must be an integer >= 1; got "0x10"/,
      },
      {
        argv: ["enqueue", "--db", db, "--queue", "q", "--name", "n", "--delay-ms", "1e3"],
        refused: /--delay-ms must be an integer >= 0; got "1e3"/,
      },
      {
        argv: ["enqueue", "--db", db, "--queue", "q", "--name", "n", "--priority", "abc"],
        refused: /--priority must be an integer >= -1000000; got "abc"/,
      },
      {
        argv: ["enqueue", "--db", db, "--queue", "q", "--name", "n", "--priority", "1.5"],
        refused: /--priority must be an integer >= -1000000; got "1.5"/,
      },
      {
        argv: ["schedules", "add", "s", "--db", db, "--queue", "q", "--cron", "* * * * *", "--name", "n", "--priority", "abc"],
        refused: /--priority must be an integer >= -1000000; got "abc"/,
      },
      { argv: ["jobs", "ls", "--db", db, "--limit", "1e1"], refused: /--limit must be an integer >= 1; got "1e1"/ },
    ].map(async ({ argv, refused }) => ({ argv, refused, result: await runCli(argv) }));
    for (const { argv, refused, result } of await Promise.all(runs)) {
      expect({ argv, code: result.code }).toEqual({ argv, code: 2 });
      expect(oneLine(result.stderr).first).toMatch(refused);
    }
    // Negative priorities run first, so the sign is part of a decimal integer.
    const negative = await runCli(["enqueue", "--db", db, "--queue", "q", "--name", "n", "--priority=-5", "--attempts", "16", "--json"]);
    expect(negative.code).toBe(0);
  });

  it("stats refuses a --window of no time, and a bare 0 still leaves the window out", { timeout: 60_000 }, async () => {
    const [minutes, fraction, noWindow] = await Promise.all(
      [
        ["--window", "0m"],
        ["--window", "0.1ms"],
        ["--window", "0"],
      ].map((window) => runCli(["stats", "--db", db, ...window])),
    );
    expect(minutes!.code).toBe(2);
    expect(oneLine(minutes!.stderr).first).toMatch(/--window 0m is no time: give a duration such as 90s, 5m or 1h, or 0 to leave the window out/);
    expect(fraction!.code).toBe(2);
    expect(oneLine(fraction!.stderr).first).toMatch(/--window 0\.1ms is no time/);
    expect(noWindow!.code).toBe(0);
    expect(noWindow!.stdout).not.toMatch(/finished jobs the store keeps/);
  });

  it(
    "worker: a lease under the watchdog's 200 ms minimum still starts (its watchdog at 200); an explicit --watchdog-ms under 200 names that option",
    { timeout: 60_000 },
    async () => {
      const refused = await runCli(["worker", "--db", db, "--queue", "short", "--handlers", "test/fixtures/handlers.ts", "--watchdog-ms", "150"]);
      expect(refused.code).toBe(2);
      expect(oneLine(refused.stderr).first).toMatch(/--watchdog-ms must be 0 \(off\) or from 200 .*; got 150/);
      const noResult = await runCli(["worker", "--db", db, "--queue", "short", "--handlers", "test/fixtures/handlers.ts", "--max-result-bytes", "0"]);
      expect(noResult.code).toBe(2);
      expect(oneLine(noResult.stderr).first).toMatch(/--max-result-bytes/);
      const longLease = await runCli(["worker", "--db", db, "--queue", "short", "--handlers", "test/fixtures/handlers.ts", "--lease-ms", "3000000000"]);
      expect(longLease.code).toBe(2);
      expect(oneLine(longLease.stderr).first).toMatch(/--lease-ms must be at most 2147483647 .*; got 3000000000/);

      const backend = new SqliteBackend({ path: join(dir, "jobs.db") });
      try {
        const { id } = await new Queue("short", { backend }).add("sleep", { ms: 10 });
        const worker = spawnCli([
          "worker",
          "--db",
          db,
          "--queue",
          "short",
          "--handlers",
          "test/fixtures/handlers.ts",
          "--lease-ms",
          "150",
          "--poll-interval-ms",
          "50",
        ]);
        try {
          await waitFor(async () => (await backend.get(id))?.state === "completed", { timeoutMs: 30_000 });
        } finally {
          worker.child.kill("SIGTERM");
          expect(await worker.exited).toBe(0);
        }
        expect(worker.stderr()).not.toMatch(/watchdog option/);
      } finally {
        await backend.close();
      }
    },
  );

  it(
    "a redis:// store that cannot be reached: one line naming the connection error, after one reconnect attempt, no warnings",
    { timeout: 60_000 },
    async () => {
      const url = `redis://127.0.0.1:${await freePort()}`;
      const runs = [["stats"], ["jobs", "ls"], ["enqueue", "--queue", "q", "--name", "n"]].map((argv) => runCli([...argv, "--db", url]));
      for (const result of await Promise.all(runs)) {
        expect(result.code).toBe(1);
        const { first, stack } = oneLine(result.stderr);
        expect(stack).toBe(false);
        expect(first).toMatch(/is unreachable or busy \(connect ECONNREFUSED 127\.0\.0\.1:\d+; check the URL and that Redis is running\); retry shortly/);
        // Before: two JSON "reconnecting" warnings over ioredis' 20 attempts (about 15 s), then ioredis' own message.
        expect(result.stderr.trim()).toBe(first);
      }
    },
  );

  it(
    "a redis-cluster:// or redis-sentinel:// store that cannot be reached: one line naming what was unreachable, within seconds, no warnings",
    { timeout: 60_000 },
    async () => {
      const port = await freePort();
      const stores: Array<[string, RegExp]> = [
        [
          `redis-cluster://127.0.0.1:${port}`,
          /the job store redis-cluster:\/\/127\.0\.0\.1:\d+ \(prefix conveyor\) is unreachable or busy \(none of the cluster's startup nodes answered; check the URL and that the cluster's nodes are running\); retry shortly$/,
        ],
        [
          `redis-sentinel://127.0.0.1:${port}/mymaster`,
          /the job store redis-sentinel:\/\/127\.0\.0\.1:\d+\/mymaster \(prefix conveyor\) is unreachable or busy \(no sentinel answered with the primary's address; check the URL and that the sentinels are running\); retry shortly$/,
        ],
      ];
      const runs = stores.flatMap(([url, line]) =>
        [["stats"], ["enqueue", "--queue", "q", "--name", "n"]].map(async (argv) => ({
          run: `${argv.join(" ")} --db ${url}`,
          line,
          result: await runCliWithin(ONE_SHOT_BOUND_MS, [...argv, "--db", url]),
        })),
      );
      for (const { run, line, result } of await Promise.all(runs)) {
        // Before: no output at all, ioredis retrying the startup nodes or the sentinels for ever.
        expect(result.code, `${run}: ${result.stderr}`).toBe(1);
        const { first, stack } = oneLine(result.stderr);
        expect(stack, run).toBe(false);
        expect(first, run).toMatch(line);
        expect(result.stderr.trim(), run).toBe(first);
        expect(result.stdout, run).toBe("");
      }
    },
  );
  it("a worker whose redis-cluster:// store cannot be reached stops on one SIGTERM: nothing claimed, exit 0", { timeout: 90_000 }, async () => {
    // It waits for the store at start-up (an outage is waited out), and a cluster client retries
    // its startup nodes for ever: one SIGTERM set the stop aside until the connect answered,
    // which it never did (the worker was still running ten minutes after it).
    const worker = spawnCli(["worker", "--db", `redis-cluster://127.0.0.1:${await freePort()}`, "--queue", "q", "--handlers", "test/fixtures/handlers.ts"]);
    const killer = setTimeout(() => worker.child.kill("SIGKILL"), 60_000);
    try {
      // Not in silence: it says it is waiting (every 5 s), then stops on the signal.
      await waitFor(() => /the store \(--db\) has not answered yet; waiting for it/.test(worker.stderr()), { timeoutMs: 30_000 });
      const signalled = Date.now();
      worker.child.kill("SIGTERM");
      expect(await worker.exited).toBe(0);
      expect(Date.now() - signalled).toBeLessThan(15_000);
      expect(worker.stderr()).toMatch(/stopped before the worker started; nothing was claimed; exiting 0/);
    } finally {
      clearTimeout(killer);
    }
  });
});
