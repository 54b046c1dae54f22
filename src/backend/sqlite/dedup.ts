/**
 * Dedup windows on SQLite (rules: ../dedup.ts). Runs inside the enqueue transaction, which holds
 * SQLite's one write lock, so reading a window and acting on it is one atomic step even with other
 * processes writing the same file.
 */
import type Database from "better-sqlite3";
import type { EnqueueResult } from "../contract.js";
import type { JobSpec } from "../../core/job.js";

interface WindowRow {
  job_id: string;
  expires_at: number;
}

/** The decision for one spec: taken in by an open window (with the queue to wake, if any), or let through. */
export type DedupDecision = { result: EnqueueResult; wake: boolean } | null;

export class SqliteDedupWindows {
  private readonly getWindow: Database.Statement<[string, string], WindowRow>;
  private readonly openWindow: Database.Statement<[string, string, string, number]>;
  private readonly extendWindow: Database.Statement<[number, string, string]>;
  private readonly replaceJob: Database.Statement<[{ id: string; payload: string; runAt: number; now: number }]>;
  private readonly deleteEnded: Database.Statement<[number, number]>;

  constructor(db: Database.Database, prefix: string) {
    const windows = `${prefix}dedup_windows`;
    this.getWindow = db.prepare(`SELECT job_id, expires_at FROM ${windows} WHERE queue = ? AND key = ?`);
    this.openWindow = db.prepare(
      `INSERT INTO ${windows} (queue, key, job_id, expires_at) VALUES (?, ?, ?, ?)
       ON CONFLICT (queue, key) DO UPDATE SET job_id = excluded.job_id, expires_at = excluded.expires_at`,
    );
    this.extendWindow = db.prepare(`UPDATE ${windows} SET expires_at = ? WHERE queue = ? AND key = ?`);
    // Only a job that has not started: once claimed, its run uses the data it was claimed with.
    this.replaceJob = db.prepare(
      `UPDATE ${prefix}jobs
       SET payload = @payload, run_at = @runAt, state = CASE WHEN @runAt > @now THEN 'scheduled' ELSE 'waiting' END
       WHERE id = @id AND state IN ('waiting', 'scheduled')`,
    );
    this.deleteEnded = db.prepare(`DELETE FROM ${windows} WHERE (queue, key) IN (SELECT queue, key FROM ${windows} WHERE expires_at <= ? LIMIT ?)`);
  }

  /**
   * Decides `spec` (which has `dedup`) against its window at `now`. When it is let through, the
   * window has been (re)opened for `spec.id` and the caller stores the job as usual.
   */
  decide(spec: JobSpec, now: number): DedupDecision {
    const window = spec.dedup!;
    const row = this.getWindow.get(spec.queue, window.key);
    const ends = now + window.ttlMs;
    if (row !== undefined && row.expires_at > now) {
      if (window.mode === "drop") return { result: { id: row.job_id, duplicate: true, dedup: "dropped" }, wake: false };
      if (window.mode === "extend") {
        this.extendWindow.run(ends, spec.queue, window.key);
        return { result: { id: row.job_id, duplicate: true, dedup: "extended" }, wake: false };
      }
      const runAt = spec.runAt ?? now + spec.delayMs;
      if (this.replaceJob.run({ id: row.job_id, payload: spec.payload, runAt, now }).changes === 1) {
        this.extendWindow.run(ends, spec.queue, window.key);
        return { result: { id: row.job_id, duplicate: true, dedup: "replaced" }, wake: runAt <= now };
      }
    }
    this.openWindow.run(spec.queue, window.key, spec.id, ends);
    return null;
  }

  /** Deletes up to `limit` ended windows; returns how many. */
  prune(now: number, limit: number): number {
    return this.deleteEnded.run(now, limit).changes;
  }
}
