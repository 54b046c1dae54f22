/**
 * The chaos runner's look at SQLite's write lock (chaos/stores.ts, holdsWalWriteLock): a worker
 * SIGSTOPped inside a write transaction blocks every other process, and the checker counts that
 * stop as store downtime. Checked against a real process holding (and then not holding) the lock.
 */
import { spawn } from "node:child_process";
import { stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { once } from "node:events";
import { afterAll, describe, expect, it } from "vitest";
import { holdsWalWriteLock } from "../../chaos/stores.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs("conveyor-write-lock-");
afterAll(() => temp.removeAll());

/** A child that opens `file` in WAL mode, then enters a write transaction on "begin" and commits on "commit". */
const CHILD = `
const Database = require("better-sqlite3");
const db = new Database(process.argv[1]);
db.pragma("journal_mode = WAL");
db.exec("CREATE TABLE IF NOT EXISTS t (x)");
process.stdin.setEncoding("utf8");
process.stdin.on("data", (line) => {
  for (const cmd of line.trim().split("\\n")) {
    if (cmd === "begin") { db.exec("BEGIN IMMEDIATE"); db.exec("INSERT INTO t VALUES (1)"); }
    if (cmd === "commit") db.exec("COMMIT");
    process.stdout.write(cmd + "\\n");
  }
});
process.stdout.write("ready\\n");
`;

describe("holdsWalWriteLock", () => {
  it("sees a process inside a write transaction, and not before or after it", async () => {
    const dir = await temp.make();
    const file = join(dir, "store.db");
    const child = spawn(process.execPath, ["-e", CHILD, file], { stdio: ["pipe", "pipe", "inherit"] });
    const lines: string[] = [];
    const exited = once(child, "exit").then(([code]) => {
      throw new Error(`the child exited (${String(code)}) before saying it`);
    });
    exited.catch(() => undefined);
    const said = async (word: string) => {
      while (!lines.includes(word)) {
        const [chunk] = (await Promise.race([once(child.stdout, "data"), exited])) as [Buffer];
        lines.push(...chunk.toString().trim().split("\n"));
      }
    };
    try {
      await said("ready");
      expect(holdsWalWriteLock(child.pid!, file)).toBe(false);
      child.stdin.write("begin\n");
      await said("begin");
      expect(holdsWalWriteLock(child.pid!, file)).toBe(true);
      // Another pid, or another database, is not the holder.
      expect(holdsWalWriteLock(process.pid, file)).toBe(false);
      expect(holdsWalWriteLock(child.pid!, join(dir, "other.db"))).toBe(false);
      child.stdin.write("commit\n");
      await said("commit");
      expect(holdsWalWriteLock(child.pid!, file)).toBe(false);
    } finally {
      child.kill("SIGKILL");
    }
  });

  it("reads /proc/locks lines: a write lock whose range covers byte 120 of the -shm file, EOF ends included", async () => {
    const dir = await temp.make();
    const file = join(dir, "x.db");
    await writeFile(`${file}-shm`, "");
    const ino = (await stat(`${file}-shm`)).ino;
    const table = (line: string) => `1: POSIX  ADVISORY  READ 7 fe:00:${ino} 128 128\n2: ${line}\n`;
    expect(holdsWalWriteLock(7, file, table(`POSIX  ADVISORY  WRITE 7 fe:00:${ino} 120 120`))).toBe(true);
    expect(holdsWalWriteLock(7, file, table(`POSIX  ADVISORY  WRITE 7 fe:00:${ino} 100 EOF`))).toBe(true);
    expect(holdsWalWriteLock(7, file, table(`POSIX  ADVISORY  READ 7 fe:00:${ino} 120 120`))).toBe(false);
    expect(holdsWalWriteLock(7, file, table(`POSIX  ADVISORY  WRITE 7 fe:00:${ino} 124 124`))).toBe(false);
    expect(holdsWalWriteLock(7, file, table(`POSIX  ADVISORY  WRITE 8 fe:00:${ino} 120 120`))).toBe(false);
    expect(holdsWalWriteLock(7, file, table(`POSIX  ADVISORY  WRITE 7 fe:00:${ino + 1} 120 120`))).toBe(false);
    // No -shm file (not in WAL mode, or never opened): nothing is held.
    expect(holdsWalWriteLock(7, join(dir, "none.db"), table(`POSIX  ADVISORY  WRITE 7 fe:00:${ino} 120 120`))).toBe(false);
  });
});
