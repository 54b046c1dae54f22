/**
 * The schedules table's row shape, shared by the SQL backends (SQLite and PostgreSQL name and
 * type the columns alike), and its one mapping to `StoredSchedule`.
 */
import { parseScheduleDefinition, type StoredSchedule } from "../core/schedule.js";

export interface ScheduleRow {
  queue: string;
  id: string;
  definition: string;
  anchor_at: number;
  last_tick_at: number | null;
  version: number;
  created_at: number;
  updated_at: number;
}

/** The columns every schedule-returning statement selects. */
export const SCHEDULE_COLUMNS = "queue, id, definition, anchor_at, last_tick_at, version, created_at, updated_at";

export function scheduleFromRow(row: ScheduleRow): StoredSchedule {
  return {
    queue: row.queue,
    id: row.id,
    definition: parseScheduleDefinition(row.definition),
    anchorAt: Number(row.anchor_at),
    lastTickAt: row.last_tick_at === null ? null : Number(row.last_tick_at),
    version: Number(row.version),
    createdAt: Number(row.created_at),
    updatedAt: Number(row.updated_at),
  };
}
