/**
 * `npm run bench -- --backend sqlite --scale [--sizes 10000,100000,1000000] [--runs 3] [--samples 100] [--retained N]`
 *
 * How SQLite claim+complete throughput and enqueue-to-start latency grow with the backlog
 * (bench/scale.ts: the shapes, the loop, the table, the curves). Conveyor alone: no peer embeds
 * SQLite. Each cell gets a fresh database file in a temp dir of its own. The latency producer is
 * a second SqliteBackend on the same file (its own connection), so a start is woken the way
 * another connection's commit wakes it. `--retained N` copies one completed job N times with
 * one INSERT … SELECT over a recursive counter. Writes docs/performance-sqlite-scale.svg.
 *
 * Before measuring, each cell's file is settled (settleFile): its WAL checkpointed into it and
 * the file written to disk. A 10M fill leaves a 6 GB file and gigabytes of the kernel's dirty
 * pages; measured at once, a cell timed the writeback as much as the claims (session 14: two
 * runs of the same cells disagreed, 0.71x against 1.09x).
 */
import { closeSync, fsyncSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { SqliteBackend } from "../src/backend/sqlite/index.js";
import { conveyorScale, runScale, type ScaleOptions } from "./scale.js";

/** The default table prefix of SqliteBackend. */
const JOBS = "conveyor_jobs";

/** Copies completed job `templateId` `n` times with fresh ids: every column as the template has it except id and seq (the rowid, left to SQLite). */
function retainCopies(path: string, templateId: string, n: number): void {
  const db = new Database(path, { timeout: 30_000 });
  try {
    const columns = (db.prepare(`PRAGMA table_info(${JOBS})`).all() as Array<{ name: string }>).map((c) => c.name).filter((c) => c !== "id" && c !== "seq");
    const list = columns.map((c) => `"${c}"`).join(", ");
    db.prepare(
      `WITH RECURSIVE g(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM g WHERE k < ?) ` +
        `INSERT INTO ${JOBS} (id, ${list}) SELECT j.id || '-r' || g.k, ${columns.map((c) => `j."${c}"`).join(", ")} FROM ${JOBS} j, g WHERE j.id = ?`,
    ).run(n, templateId);
  } finally {
    db.close();
  }
}

/** Dirty and being-written pages of the whole machine, bytes (/proc/meminfo). */
function unwrittenBytes(): number {
  const info = readFileSync("/proc/meminfo", "utf8");
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(info)?.[1] ?? 0);
  return (kb("Dirty") + kb("Writeback")) * 1024;
}

/** Settled when the machine has less than this left to write back. */
const SETTLED_BYTES = 64 * 2 ** 20;
/** Gives up waiting for the writeback after this long (and says so). */
const SETTLE_LIMIT_MS = 300_000;

/**
 * Checkpoints the WAL into the database file (TRUNCATE: the WAL is emptied), syncs the file, and
 * waits until the kernel has written back its dirty pages (below SETTLED_BYTES), so that the
 * measurement that follows is not the fill's writeback.
 */
async function settleFile(path: string): Promise<void> {
  const t0 = performance.now();
  const db = new Database(path, { timeout: 30_000 });
  try {
    db.pragma("wal_checkpoint(TRUNCATE)");
  } finally {
    db.close();
  }
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  while (unwrittenBytes() > SETTLED_BYTES && performance.now() - t0 < SETTLE_LIMIT_MS) await new Promise((r) => setTimeout(r, 250));
  const left = unwrittenBytes();
  process.stderr.write(
    `  .. settled ${path} in ${((performance.now() - t0) / 1000).toFixed(1)} s (${(left / 2 ** 20).toFixed(0)} MB left to write back` +
      `${left > SETTLED_BYTES ? `: gave up after ${SETTLE_LIMIT_MS / 1000} s` : ""})\n`,
  );
}

export async function main(options: ScaleOptions & { svgPath: string }): Promise<void> {
  const dirs: string[] = [];
  const conveyor = conveyorScale(
    "Conveyor (SQLite)",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "conveyor-scale-"));
      dirs.push(dir);
      const path = join(dir, "bench.db");
      const backend = new SqliteBackend({ path });
      return {
        backend,
        producer: () => new SqliteBackend({ path }),
        retain: async (templateId, n) => retainCopies(path, templateId, n),
        settle: () => settleFile(path),
        async drop() {
          await backend.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
    // No prefetch: one process owns the file, so a claim is a local call, not a round trip.
    { prefetch: 0 },
  );
  try {
    await runScale("SQLite growth", "Conveyor alone (no peer embeds SQLite)", [conveyor], options);
  } finally {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
}
