/**
 * `npm run bench -- --backend sqlite --scale [--sizes 10000,100000,1000000] [--runs 3] [--samples 100] [--retained N]`
 *
 * How SQLite claim+complete throughput and enqueue-to-start latency grow with the backlog
 * (bench/scale.ts: the shapes, the loop, the table, the curves). Conveyor alone: no peer embeds
 * SQLite. Each cell gets a fresh database file in a temp dir of its own. The latency producer is
 * a second SqliteBackend on the same file (its own connection), so a start is woken the way
 * another connection's commit wakes it. `--retained N` copies one completed job N times with
 * one INSERT … SELECT over a recursive counter. Writes docs/performance-sqlite-scale.svg.
 */
import { mkdtempSync, rmSync } from "node:fs";
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
