import type Database from "better-sqlite3";
import type { SettleResult } from "../contract.js";
import { inQueue } from "../contract.js";
import type { Lease } from "../../core/job.js";
import { boundLogLines, JOB_LOG_MAX_LINES, type JobLogLine } from "../../core/job-log.js";

interface LogRow {
  attempt: number;
  at: number;
  line: string;
}

/**
 * Job logs on SQLite (table `<prefix>job_logs`, migration 0003): an append is one IMMEDIATE
 * transaction that checks the lease, inserts the lines and drops the oldest beyond the bound.
 */
export class SqliteJobLogs {
  private readonly append: (lease: Lease, lines: readonly string[], now: number) => SettleResult;
  private readonly read: Database.Statement<[string], LogRow>;
  private readonly queueOf: Database.Statement<[string], string>;

  constructor(
    db: Database.Database,
    prefix: string,
    private readonly nowMs: () => number,
    private readonly storeError: (error: unknown) => unknown,
  ) {
    const jobs = `${prefix}jobs`;
    const logs = `${prefix}job_logs`;
    const fenced = db.prepare<[string, number], number>(`SELECT attempt FROM ${jobs} WHERE id = ? AND lease_token = ? AND state = 'active'`).pluck();
    const insert = db.prepare<[string, number, number, string]>(`INSERT INTO ${logs} (job_id, attempt, at, line) VALUES (?, ?, ?, ?)`);
    // Deletes every line older than the newest JOB_LOG_MAX_LINES of the job.
    const trim = db.prepare<[string, string, number]>(
      `DELETE FROM ${logs} WHERE job_id = ? AND seq <= (
         SELECT seq FROM ${logs} WHERE job_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)`,
    );
    this.read = db.prepare<[string], LogRow>(`SELECT attempt, at, line FROM ${logs} WHERE job_id = ? ORDER BY seq`);
    this.queueOf = db.prepare<[string], string>(`SELECT queue FROM ${jobs} WHERE id = ?`).pluck();
    const append = db.transaction((lease: Lease, lines: readonly string[], now: number): SettleResult => {
      const attempt = fenced.get(lease.jobId, lease.token);
      if (attempt === undefined) return "stale";
      for (const line of lines) insert.run(lease.jobId, attempt, now, line);
      trim.run(lease.jobId, lease.jobId, JOB_LOG_MAX_LINES);
      return "applied";
    });
    this.append = (lease, lines, now) => append.immediate(lease, lines, now);
  }

  appendLogs(lease: Lease, lines: readonly string[]): SettleResult {
    const bounded = boundLogLines(lines);
    try {
      return this.append(lease, bounded, this.nowMs());
    } catch (error) {
      throw this.storeError(error);
    }
  }

  logs(id: string, queue: string | undefined): JobLogLine[] {
    try {
      if (!inQueue(this.queueOf.get(id), queue)) return [];
      return this.read.all(id).map((row) => ({ at: row.at, attempt: row.attempt, line: row.line }));
    } catch (error) {
      throw this.storeError(error);
    }
  }
}
