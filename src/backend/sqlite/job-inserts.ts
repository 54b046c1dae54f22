/**
 * The inserts of an enqueue: rows are stored in order, as many as possible per statement. One
 * multi-row INSERT (queries/enqueue-many.sql) of {@link ROWS_PER_STATEMENT} rows costs about half
 * the CPU of as many single-row ones (enqueue.sql), chiefly because the event log's
 * AUTOINCREMENT counter is written back once per statement rather than once per row
 * (docs/performance-sqlite.md has the measurements).
 */
import type Database from "better-sqlite3";
import { sqliteQuery } from "./queries.js";
import type { InsertJob } from "./statements.js";

/**
 * Rows per multi-row statement, largest first; a remainder below the smallest goes one row per
 * statement. 64 rows of 14 parameters stay far below SQLite's limit of 32,766 parameters; past
 * about 50 rows a larger statement saved nothing measurable.
 */
const ROWS_PER_STATEMENT = [64, 8] as const;

/** enqueue.sql's parameter count: the length of every {@link InsertJob}. */
const PARAMETERS_PER_ROW = 14;

export class JobInserts {
  private readonly many: { rows: number; statement: Database.Statement<unknown[], string> }[];

  /** @param one enqueue.sql prepared on `db` (Statements.insertJob), for the rows no batch takes */
  constructor(
    db: Database.Database,
    prefix: string,
    private readonly one: Database.Statement<InsertJob>,
  ) {
    const text = sqliteQuery("enqueue-many", prefix);
    const row = `(${new Array<string>(PARAMETERS_PER_ROW).fill("?").join(", ")})`;
    this.many = ROWS_PER_STATEMENT.map((rows) => ({
      rows,
      statement: db.prepare<unknown[], string>(text.replace("{{rows}}", new Array<string>(rows).fill(row).join(",\n"))).pluck(),
    }));
  }

  /**
   * Stores `rows` in their order (so `seq` follows it) inside the caller's transaction. Returns,
   * per row, whether it was stored: false when its id was taken, by an existing job or by an
   * earlier row of the same call.
   */
  insert(rows: readonly InsertJob[]): boolean[] {
    const stored = new Array<boolean>(rows.length);
    let next = 0;
    for (const { rows: size, statement } of this.many) {
      for (; rows.length - next >= size; next += size) {
        const params = new Array<unknown>(size * PARAMETERS_PER_ROW);
        for (let r = 0; r < size; r++) {
          const row = rows[next + r]!;
          for (let p = 0; p < PARAMETERS_PER_ROW; p++) params[r * PARAMETERS_PER_ROW + p] = row[p];
        }
        // RETURNING lists each stored id once; the first row naming it is the one stored.
        const ids = new Set(statement.all(params));
        for (let r = 0; r < size; r++) stored[next + r] = ids.delete(rows[next + r]![0]);
      }
    }
    for (; next < rows.length; next++) stored[next] = this.one.run(...rows[next]!).changes === 1;
    return stored;
  }
}
