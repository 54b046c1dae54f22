/**
 * The SQLite backend's listings: `list` (one prepared statement per filter shape, from
 * queries/list.sql) and `finishedWindow` (queries/finished-*.sql, one statement per state). The
 * facade (../checked.ts) has checked the arguments; what is left here is reading them.
 */
import type Database from "better-sqlite3";
import type { FinishedTiming, FinishedWindow, ListFilter, Page } from "../contract.js";
import { listArgsOf, staleCursor } from "../listing.js";
import type { JobRecord } from "../../core/job.js";
import { sqliteQuery } from "./queries.js";
import { toRecord, type JobRow } from "./rows.js";

/** A list filter's state, as the query sees it ("waiting" and "scheduled" depend on run_at). */
type StateFilter = "none" | "due" | "future" | "stored";

interface ListShape {
  byQueue: boolean;
  byName: boolean;
  state: StateFilter;
  /**
   * With state "stored": the state, written into the statement rather than bound, so the planner
   * can match it to a partial index of that state (jobs_waiting_children, say): statements take no
   * part of their plan from a bound value (stable-plans.ts). One statement per state, as few as
   * the states are.
   */
  storedState?: string;
  byCursor: boolean;
  from: boolean;
  until: boolean;
  newer?: true;
}

/** finishedWindow's statements for one state. */
interface FinishedStatements {
  count: Database.Statement<[string, number, number], { n: number }>;
  sample: Database.Statement<[string, number, number, number], { run_at: number; started_at: number | null; finished_at: number }>;
}

export class SqliteListing {
  private readonly listStatements = new Map<string, Database.Statement<unknown[], JobRow>>();
  /** finishedWindow's statements, prepared on its first call. */
  private finishedStatements: Record<"completed" | "dead", FinishedStatements> | undefined;

  constructor(
    private readonly db: Database.Database,
    private readonly prefix: string,
    private readonly getJob: Database.Statement<[string], JobRow>,
  ) {}

  list(filter: ListFilter, page: Page, now: number): JobRecord[] {
    const args = listArgsOf(filter, page);
    const stateFilter: StateFilter =
      filter.state === undefined ? "none" : filter.state === "waiting" ? "due" : filter.state === "scheduled" ? "future" : "stored";
    let beforeSeq: number | null = null;
    if (args.after !== null) {
      const cursor = this.getJob.get(args.after);
      if (cursor === undefined || cursor.queue !== filter.queue) throw staleCursor(args.after, filter.queue!);
      beforeSeq = cursor.seq;
    }
    // The reverse cursor: the jobs just above it, read upwards from it and turned back to newest first.
    let afterSeq: number | null = null;
    if (args.before !== null) {
      const cursor = this.getJob.get(args.before);
      if (cursor === undefined || cursor.queue !== filter.queue) throw staleCursor(args.before, filter.queue!, "before");
      afterSeq = cursor.seq;
    }
    const params: unknown[] = [];
    if (filter.queue !== undefined) params.push(filter.queue);
    if (filter.name !== undefined) params.push(filter.name);
    if (stateFilter === "due" || stateFilter === "future") params.push(now);
    if (beforeSeq !== null) params.push(beforeSeq);
    if (afterSeq !== null) params.push(afterSeq);
    if (args.createdFrom !== null) params.push(args.createdFrom);
    if (args.createdUntil !== null) params.push(args.createdUntil);
    params.push(args.limit, args.offset);
    const statement = this.listStatement({
      byQueue: filter.queue !== undefined,
      byName: filter.name !== undefined,
      state: stateFilter,
      ...(stateFilter === "stored" ? { storedState: filter.state } : {}),
      byCursor: beforeSeq !== null,
      from: args.createdFrom !== null,
      until: args.createdUntil !== null,
      ...(afterSeq !== null ? { newer: true } : {}),
    });
    const rows = statement.all(...params);
    if (afterSeq !== null) rows.reverse();
    return rows.map((row) => toRecord(row, now));
  }

  /** The window's counts and samples, from one read transaction (one snapshot). */
  finishedWindow(queue: string, fromMs: number, untilMs: number, sampleLimit: number): FinishedWindow {
    const prepare = (state: "completed" | "dead"): FinishedStatements => ({
      count: this.db.prepare(this.finishedQuery("finished-count", state)),
      sample: this.db.prepare(this.finishedQuery("finished-sample", state)),
    });
    this.finishedStatements ??= { completed: prepare("completed"), dead: prepare("dead") };
    const statements = this.finishedStatements;
    const read = this.db.transaction(() => {
      const out: FinishedWindow = { completed: 0, dead: 0, samples: [] };
      for (const state of ["completed", "dead"] as const) {
        const range = [queue, fromMs, untilMs] as const;
        out[state] = statements[state].count.get(...range)?.n ?? 0;
        if (sampleLimit === 0 || out[state] === 0) continue;
        for (const r of statements[state].sample.all(...range, sampleLimit)) {
          out.samples.push({ state, runAt: r.run_at, startedAt: r.started_at, finishedAt: r.finished_at } satisfies FinishedTiming);
        }
      }
      return out;
    });
    return read.deferred();
  }

  private finishedQuery(name: "finished-count" | "finished-sample", state: "completed" | "dead"): string {
    return sqliteQuery(name, this.prefix).replaceAll("{{state}}", state);
  }

  /** The statement of one filter shape (see queries/list.sql), prepared on first use. */
  private listStatement(shape: ListShape): Database.Statement<unknown[], JobRow> {
    const key = JSON.stringify(shape);
    let statement = this.listStatements.get(key);
    if (statement === undefined) {
      const where: string[] = [];
      if (shape.byQueue) where.push("queue = ?");
      if (shape.byName) where.push("name = ?");
      if (shape.state === "due") where.push("state IN ('waiting', 'scheduled') AND run_at <= ?");
      if (shape.state === "future") where.push("state IN ('waiting', 'scheduled') AND run_at > ?");
      if (shape.state === "stored") where.push(`state = '${shape.storedState!.replaceAll("'", "''")}'`);
      if (shape.byCursor) where.push("seq < ?");
      if (shape.newer) where.push("seq > ?");
      if (shape.from) where.push("created_at >= ?");
      if (shape.until) where.push("created_at < ?");
      const text = sqliteQuery("list", this.prefix)
        .replaceAll("{{where}}", where.length > 0 ? `WHERE ${where.join(" AND ")}` : "")
        .replaceAll("{{direction}}", shape.newer ? "ASC" : "DESC");
      statement = this.db.prepare<unknown[], JobRow>(text);
      this.listStatements.set(key, statement);
    }
    return statement;
  }
}
