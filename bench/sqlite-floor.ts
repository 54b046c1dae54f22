/**
 * SQLite's floors, measured in the same run as Conveyor (bench/sqlite.ts): what SQLite itself
 * costs on this machine, by raw better-sqlite3 statements with the settings Conveyor runs with
 * (WAL, synchronous=NORMAL, every statement planned once), so the report's "as a fraction of the
 * floor" says how much of SQLite's own rate Conveyor gets, and the floor over Conveyor's schema
 * says how much of the rest its rows cost.
 *
 * - "floor": the least a SQLite queue must do per job. A table of an id (the rowid), a payload
 *   and a lock mark, no other index; a bulk enqueue is multi-row INSERTs in one transaction, a
 *   single one an INSERT; processing claims up to `concurrency` jobs per statement (`UPDATE …
 *   WHERE id IN (SELECT … LIMIT n) RETURNING`), runs them as no-op handlers and deletes the
 *   claim's jobs in one statement as they finish.
 * - "floor, Conveyor's rows": the same loop over Conveyor's own tables (its migrations, on a
 *   fresh file), writing what a waiting job needs there: the row with Conveyor's columns, its id,
 *   claim and listing index entries and its `added` event row (the trigger), 64 rows per INSERT
 *   as the backend does; a claim leases rows in claim order and a completion marks them
 *   completed, moving them between the same partial indexes and firing the same event triggers.
 *   No history, no fencing check, no wake-up, no JavaScript of Conveyor's: a bulk figure of
 *   Conveyor's above this one would need SQLite to do less than it does here for the same rows.
 *
 * Latency is the time from an INSERT to the claim that takes the job, in one process (a wake-up
 * here is a function call): the statements alone.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { SqliteBackend } from "../src/backend/sqlite/index.js";
import { planOnce } from "../src/backend/sqlite/stable-plans.js";
import { newJobId } from "../src/core/ids.js";
import { chunks, FILL_CHUNK, latencySamples, rate, type Subject } from "./lib.js";

/** Rows per multi-row INSERT: the backend's largest batch (job-inserts.ts). */
const ROWS_PER_INSERT = 64;

/** One floor: its table, how a job's row is written, and the claim and completion statements. */
export interface FloorKind {
  readonly name: string;
  /** Creates the tables on a fresh file (`path`) before the connection opens. */
  setup(db: Database.Database, path: string): Promise<void>;
  readonly columns: string;
  /** One job's values, in `columns` order. */
  row(i: number, now: number): unknown[];
  /** `@limit`, `@now`: leases up to @limit jobs, returning each one's key as `k`. */
  readonly claim: string;
  /** `@keys`: a JSON array of the keys to finish; `@now` where the row records it. */
  readonly complete: string;
  readonly table: string;
}

export const MINIMAL: FloorKind = {
  name: "floor",
  setup: async (db) => {
    db.exec(`CREATE TABLE floor_jobs (id INTEGER PRIMARY KEY, payload TEXT NOT NULL, locked_at INTEGER) STRICT`);
  },
  table: "floor_jobs",
  columns: "payload",
  row: (i) => [JSON.stringify({ i })],
  claim: `UPDATE floor_jobs SET locked_at = @now
          WHERE id IN (SELECT id FROM floor_jobs WHERE locked_at IS NULL ORDER BY id LIMIT @limit)
          RETURNING id AS k`,
  complete: `DELETE FROM floor_jobs WHERE id IN (SELECT value FROM json_each(@keys))`,
};

/** A waiting job's backoff as the backend stores its default. */
const BACKOFF = JSON.stringify({ type: "exponential", delayMs: 1000, maxDelayMs: 3_600_000 });

export const CONVEYOR_ROWS: FloorKind = {
  name: "floor, Conveyor's rows",
  // The backend's own migrations, then its connection closed: the floor writes through its own.
  setup: async (_db, path) => {
    const backend = new SqliteBackend({ path });
    await backend.close();
  },
  table: "conveyor_jobs",
  columns: "id, queue, name, payload, meta, state, priority, run_at, created_at, max_attempts, backoff, timeout_ms, retain_completed_ms, retain_dead_ms",
  row: (i, now) => [newJobId(), "bench", "noop", JSON.stringify({ i }), null, "waiting", 0, now, now, 3, BACKOFF, null, 86_400_000, 604_800_000],
  claim: `UPDATE conveyor_jobs
          SET state = 'active', attempt = attempt + 1, lease_token = lease_token + 1, lease_expires_at = @now + 30000,
              worker_id = 'floor', started_at = @now
          WHERE seq IN (SELECT seq FROM conveyor_jobs
                        WHERE queue = 'bench' AND state IN ('waiting', 'scheduled') AND lane IS NULL AND run_at <= @now
                        ORDER BY priority, run_at, seq LIMIT @limit)
          RETURNING seq AS k`,
  complete: `UPDATE conveyor_jobs
             SET state = 'completed', finished_at = @now, expires_at = @now + retain_completed_ms, lease_expires_at = NULL, result = 'null'
             WHERE seq IN (SELECT value FROM json_each(@keys)) AND state = 'active'`,
};

/** A connection as the backend opens one (WAL, synchronous=NORMAL, statements planned once). */
export function connect(path: string): Database.Database {
  const db = planOnce(new Database(path));
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = NORMAL");
  return db;
}

function insertStatements(db: Database.Database, kind: FloorKind): { many: Database.Statement<unknown[]>; one: Database.Statement<unknown[]> } {
  const width = kind.columns.split(",").length;
  const values = `(${new Array<string>(width).fill("?").join(", ")})`;
  const text = (rows: number) => `INSERT INTO ${kind.table} (${kind.columns}) VALUES ${new Array<string>(rows).fill(values).join(", ")}`;
  return { many: db.prepare(text(ROWS_PER_INSERT)), one: db.prepare(text(1)) };
}

/** Stores `rows` in one transaction, ROWS_PER_INSERT rows per statement (the rest one by one). */
export function fill(db: Database.Database, kind: FloorKind, rows: readonly unknown[][]): void {
  const { many, one } = insertStatements(db, kind);
  db.transaction(() => {
    let next = 0;
    for (; rows.length - next >= ROWS_PER_INSERT; next += ROWS_PER_INSERT) many.run(rows.slice(next, next + ROWS_PER_INSERT).flat());
    for (; next < rows.length; next++) one.run(rows[next]);
  })();
}

/**
 * `concurrency` no-op handlers over every job: a claim of as many jobs as handlers are free, each
 * job run as a microtask, the claim's jobs finished together in one statement once all ran.
 */
export async function processAll(db: Database.Database, kind: FloorKind, n: number, concurrency: number): Promise<void> {
  const claim = db.prepare<[{ limit: number; now: number }], { k: number }>(kind.claim);
  const complete = db.prepare<[{ keys: string; now: number }]>(kind.complete);
  let done = 0;
  while (done < n) {
    const claimed = claim.all({ limit: concurrency, now: Date.now() });
    if (claimed.length === 0) throw new Error(`floor: ${n - done} jobs left but none claimable`);
    await Promise.all(claimed.map(() => Promise.resolve()));
    complete.run({ keys: JSON.stringify(claimed.map((r) => r.k)), now: Date.now() });
    done += claimed.length;
  }
}

/** Jobs `start`…`start + n - 1` as `kind`'s rows. */
export function rowsOf(kind: FloorKind, start: number, n: number): unknown[][] {
  const now = Date.now();
  return Array.from({ length: n }, (_, k) => kind.row(start + k, now));
}

function floorSubject(kind: FloorKind): Subject {
  const withFresh = async <T>(fn: (db: Database.Database) => Promise<T>): Promise<T> => {
    const dir = mkdtempSync(join(tmpdir(), "conveyor-bench-floor-"));
    const path = join(dir, "floor.db");
    const db = connect(path);
    try {
      await kind.setup(db, path);
      return await fn(db);
    } finally {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    }
  };
  const rows = (start: number, n: number) => rowsOf(kind, start, n);
  return {
    name: kind.name,
    floor: kind === MINIMAL,
    bulk: (n) =>
      withFresh((db) => {
        const all = rows(0, n);
        // fill() prepares its two INSERTs inside the timed call: microseconds, where the backend prepares them once per connection.
        return rate(n, async () => fill(db, kind, all));
      }),
    single: (n) =>
      withFresh((db) => {
        const { one } = insertStatements(db, kind);
        const all = rows(0, n);
        return rate(n, async () => {
          for (const row of all) {
            one.run(row);
            // A caller awaits each add, as Queue.add is awaited.
            await Promise.resolve();
          }
        });
      }),
    processing: (n, concurrency) =>
      withFresh(async (db) => {
        for (const [start, length] of chunks(n, FILL_CHUNK)) fill(db, kind, rows(start, length));
        return rate(n, () => processAll(db, kind, n, concurrency));
      }),
    latency: (samples) =>
      withFresh(async (db) => {
        const { one } = insertStatements(db, kind);
        const claim = db.prepare<[{ limit: number; now: number }], { k: number }>(kind.claim);
        let onStart: (() => void) | null = null;
        return latencySamples(
          [],
          samples,
          async (i) => {
            one.run(kind.row(i, Date.now()));
            // The wake-up: in one process a call, as the backend's in-memory signal.
            queueMicrotask(() => {
              if (claim.all({ limit: 1, now: Date.now() }).length > 0) onStart?.();
            });
          },
          (fn) => (onStart = fn),
        );
      }),
  };
}

/** The two floors, as benchmark subjects: the least a queue must do, and the same over Conveyor's rows. */
export function sqliteFloorSubjects(): Subject[] {
  return [floorSubject(MINIMAL), floorSubject(CONVEYOR_ROWS)];
}
