import type Database from "better-sqlite3";
import { badEventCursor, eventFromRow, eventPrunePolicy, type EventLogPage, type EventLogRow, type EventPrunePolicy } from "../../core/queue-events.js";
import { positiveInt } from "../../core/checks.js";

/**
 * The event log on SQLite (table `<prefix>events`, filled by the triggers of migrations 0004 and
 * 0013). One writer at a time makes `seq` commit order, so the cursor is simply the last seq seen.
 * `seq` is a plain rowid (migration 0016): a new event gets one more than the largest seq in the
 * table, so pruning keeps the newest event, and no seq is ever handed out twice.
 */
export class SqliteEventLog {
  private readonly read: Database.Statement<[number, number], EventLogRow>;
  private readonly latest: Database.Statement<[], number>;
  private readonly prune: (now: number, policy: Required<EventPrunePolicy>) => number;

  constructor(
    db: Database.Database,
    prefix: string,
    private readonly nowMs: () => number,
    private readonly storeError: (error: unknown) => unknown,
  ) {
    const events = `${prefix}events`;
    this.read = db.prepare<[number, number], EventLogRow>(
      // A '(cursor)' row (migration 0016) only holds a position; it is no event.
      `SELECT seq, at, type, queue, name, job_id, attempt, data FROM ${events} WHERE seq > ? AND type <> '(cursor)' ORDER BY seq LIMIT ?`,
    );
    this.latest = db.prepare<[], number>(`SELECT coalesce(max(seq), 0) FROM ${events}`).pluck();
    // Everything below a bound goes: the first event young enough to keep, or the start of the
    // newest maxEvents, whichever is later, but never the newest event, whose seq the next one
    // counts from (migration 0016). Old events sit at the front, so the scan for the first young
    // one reads about as many rows as it deletes.
    const firstYoung = db.prepare<[number], number>(`SELECT seq FROM ${events} WHERE at >= ? ORDER BY seq LIMIT 1`).pluck();
    const remove = db.prepare<[number, number]>(`DELETE FROM ${events} WHERE seq IN (SELECT seq FROM ${events} WHERE seq < ? ORDER BY seq LIMIT ?)`);
    const prune = db.transaction((now: number, policy: Required<EventPrunePolicy>): number => {
      const newest = this.latest.get()!;
      const byAge = firstYoung.get(now - policy.maxAgeMs) ?? newest + 1;
      const byCount = newest - policy.maxEvents + 1;
      return remove.run(Math.min(Math.max(byAge, byCount), newest), policy.limit).changes;
    });
    this.prune = (now, policy) => prune.immediate(now, policy);
  }

  readEvents(cursor: string, limit: number): EventLogPage {
    if (!/^\d{1,15}$/.test(cursor)) throw badEventCursor(cursor);
    positiveInt("limit", limit);
    const rows = this.guard(() => this.read.all(Number(cursor), limit));
    return {
      events: rows.map((row) => eventFromRow(String(row.seq), row)),
      cursor: rows.length > 0 ? String(rows[rows.length - 1]!.seq) : cursor,
    };
  }

  latestEventCursor(): string {
    return String(this.guard(() => this.latest.get()!));
  }

  pruneEvents(policy?: EventPrunePolicy): number {
    const checked = eventPrunePolicy(policy);
    return this.guard(() => this.prune(this.nowMs(), checked));
  }

  private guard<T>(fn: () => T): T {
    try {
      return fn();
    } catch (error) {
      throw this.storeError(error);
    }
  }
}
