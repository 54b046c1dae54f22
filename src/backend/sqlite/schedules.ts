/**
 * The SQLite backend's schedule statements and transactions (see src/core/schedule.ts for the
 * rules). Kept beside backend.ts so the job statements there stay as they were.
 */
import type Database from "better-sqlite3";
import type { EnqueueResult } from "../contract.js";
import type { JobSpec } from "../../core/job.js";
import type { ScheduleFiring, ScheduleWrite, StoredSchedule } from "../../core/schedule.js";
import { SCHEDULE_COLUMNS, scheduleFromRow, type ScheduleRow } from "../schedule-rows.js";

/** Enqueues inside the caller's open transaction; returns the results and what to announce after commit. */
export type EnqueueInTransaction<M> = (specs: readonly JobSpec[]) => { results: EnqueueResult[]; marks: M };

export interface ScheduleTransactions<M> {
  upsert: Database.Transaction<(write: ScheduleWrite) => { created: boolean; schedule: StoredSchedule }>;
  remove(queue: string, id: string): boolean;
  list(queue?: string): StoredSchedule[];
  /** `marks`: what the enqueue inside asks the backend to announce once committed (null: nothing enqueued). */
  fire: Database.Transaction<(firing: ScheduleFiring) => { fired: boolean; jobs: EnqueueResult[]; marks: M | null }>;
}

export function scheduleTransactions<M>(db: Database.Database, prefix: string, now: () => number, enqueue: EnqueueInTransaction<M>): ScheduleTransactions<M> {
  const table = `${prefix}schedules`;
  const upsert = db.prepare<[ScheduleWrite & { now: number }], ScheduleRow & { inserted: number }>(
    `INSERT INTO ${table} (queue, id, definition, timing, anchor_at, last_tick_at, version, created_at, updated_at)
     VALUES (@queue, @id, @definition, @timing, @now, NULL, 1, @now, @now)
     ON CONFLICT (queue, id) DO UPDATE SET
       definition = excluded.definition,
       anchor_at = CASE WHEN timing = excluded.timing THEN anchor_at ELSE excluded.anchor_at END,
       timing = excluded.timing,
       version = version + 1,
       updated_at = excluded.updated_at
     RETURNING ${SCHEDULE_COLUMNS}, version = 1 AS inserted`,
  );
  const remove = db.prepare<[string, string]>(`DELETE FROM ${table} WHERE queue = ? AND id = ?`);
  const listAll = db.prepare<[], ScheduleRow>(`SELECT ${SCHEDULE_COLUMNS} FROM ${table} ORDER BY queue, id`);
  const listQueue = db.prepare<[string], ScheduleRow>(`SELECT ${SCHEDULE_COLUMNS} FROM ${table} WHERE queue = ? ORDER BY id`);
  // The compare-and-set: applies only to the version and last tick the firing was computed from.
  const advance = db.prepare<[{ tickAt: number; queue: string; id: string; version: number; expectedTickAt: number | null }]>(
    `UPDATE ${table} SET last_tick_at = @tickAt
     WHERE queue = @queue AND id = @id AND version = @version AND last_tick_at IS @expectedTickAt
       AND (last_tick_at IS NULL OR last_tick_at < @tickAt)`,
  );

  return {
    upsert: db.transaction((write: ScheduleWrite): { created: boolean; schedule: StoredSchedule } => {
      const row = upsert.get({ queue: write.queue, id: write.id, definition: write.definition, timing: write.timing, now: now() })!;
      // A version of 1 after the upsert can only be a fresh insert (updates always bump it).
      return { created: row.inserted === 1, schedule: scheduleFromRow(row) };
    }),
    remove: (queue: string, id: string): boolean => remove.run(queue, id).changes > 0,
    list: (queue?: string): StoredSchedule[] => (queue === undefined ? listAll.all() : listQueue.all(queue)).map(scheduleFromRow),
    fire: db.transaction((firing: ScheduleFiring): { fired: boolean; jobs: EnqueueResult[]; marks: M | null } => {
      const { tickAt, queue, id, version, expectedTickAt } = firing;
      const { changes } = advance.run({ tickAt, queue, id, version, expectedTickAt });
      if (changes === 0) return { fired: false, jobs: [], marks: null };
      if (firing.jobs.length === 0) return { fired: true, jobs: [], marks: null };
      const { results, marks } = enqueue(firing.jobs);
      return { fired: true, jobs: results, marks };
    }),
  };
}
