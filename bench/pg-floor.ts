/**
 * The floor: the least work any PostgreSQL queue must do per job on this server, measured in the
 * same run as Conveyor and its peers, with their batching and concurrency. It is a raw
 * node-postgres loop over the smallest table a queue can have (an id, a payload, a lock mark; the
 * primary key its only index) and the fewest statements a queue can send:
 *
 * - bulk enqueue: one `INSERT … SELECT unnest($1)` of every job, plus one NOTIFY (every subject
 *   wakes its workers through LISTEN/NOTIFY, so the floor pays it too);
 * - single enqueue: one `INSERT` and one NOTIFY per job, in one statement;
 * - processing: a claim of up to PREFETCH jobs per round trip (`UPDATE … WHERE id IN (SELECT … FOR
 *   UPDATE SKIP LOCKED LIMIT n) RETURNING`), `concurrency` no-op handlers taking jobs from the
 *   claimed buffer, and every completion made in the same tick deleted by one batched `DELETE`;
 * - latency: a LISTEN connection that claims on each notification.
 *
 * It keeps no history, no retention, no event, no count, no lease expiry, no priority or delay:
 * nothing that a job queue with those features could skip. A system's figure divided by the
 * floor's says how much of what the server can do it gets; a ratio to a peer that would need the
 * system above the floor says the goal is out of reach on this server.
 *
 * `keepFinished` gives the floor of a queue that keeps its finished jobs readable (Conveyor's
 * default: a completed job stays for its status and result until its retention runs out), where
 * the floor above deletes them as graphile-worker does. Its table adds a state, a finish time and
 * the two indexes such a queue cannot do without: the waiting rows in claim order (a claim must
 * not walk the finished rows) and the finished rows by finish time (retention prunes by age). A
 * claim moves the row out of the first, a completion updates it into the second: two row versions
 * and their index entries per job, where the deleting floor writes one version and a deletion.
 */
import pg from "pg";
import { chunks, deferred, FILL_CHUNK, latencySamples, rate, sleep, type Subject } from "./lib.js";

const SCHEMA = `
CREATE TABLE floor_jobs (
  id bigserial PRIMARY KEY,
  payload jsonb NOT NULL,
  -- The claim's mark: not indexed, so a claim is a HOT update when the page has room.
  locked_at timestamptz
);`;

const KEEP_SCHEMA = `
CREATE TABLE floor_jobs (
  id bigserial PRIMARY KEY,
  payload jsonb NOT NULL,
  state text NOT NULL DEFAULT 'waiting',
  locked_at timestamptz,
  finished_at timestamptz
);
CREATE INDEX floor_jobs_waiting ON floor_jobs (id) WHERE state = 'waiting';
CREATE INDEX floor_jobs_finished ON floor_jobs (finished_at) WHERE state = 'completed';`;

const INSERT_MANY = `WITH added AS (INSERT INTO floor_jobs (payload) SELECT unnest($1::jsonb[]) RETURNING 1)
SELECT pg_notify('floor_jobs', '') FROM (SELECT 1 FROM added LIMIT 1) AS any_added`;
const INSERT_ONE = `WITH added AS (INSERT INTO floor_jobs (payload) VALUES ($1::jsonb) RETURNING 1)
SELECT pg_notify('floor_jobs', '') FROM added`;
const CLAIM = `UPDATE floor_jobs SET locked_at = now()
WHERE id IN (SELECT id FROM floor_jobs WHERE locked_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id, payload`;
const COMPLETE = `DELETE FROM floor_jobs WHERE id = ANY($1::bigint[])`;
const KEEP_CLAIM = `UPDATE floor_jobs SET state = 'active', locked_at = now()
WHERE id IN (SELECT id FROM floor_jobs WHERE state = 'waiting' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id, payload`;
const KEEP_COMPLETE = `UPDATE floor_jobs SET state = 'completed', finished_at = now() WHERE id = ANY($1::bigint[])`;

/** The statements of one kind of floor: deleting finished jobs, or keeping them (bench/pg-contract-floor.ts runs the keeping loop over other tables). */
export interface FloorStatements {
  readonly schema: string;
  readonly claim: string;
  readonly complete: string;
}
const DELETING: FloorStatements = { schema: SCHEMA, claim: CLAIM, complete: COMPLETE };
export const KEEPING: FloorStatements = { schema: KEEP_SCHEMA, claim: KEEP_CLAIM, complete: KEEP_COMPLETE };

const payloads = (start: number, n: number): string[] => Array.from({ length: n }, (_, k) => JSON.stringify({ i: start + k }));

/**
 * The least client loop over any store: `concurrency` no-op handlers take jobs from a buffer
 * refilled by `claim` (the next claim goes out when the buffer holds fewer jobs than there are
 * handlers, as a prefetching worker does; an empty answer ends it), and every job finished in one
 * tick goes to `complete` in one call. Resolves once `n` jobs are completed; the first failed
 * completion rejects it. `oneCompletionAtATime` (default false): each tick's call waits for the one
 * before it, as Conveyor's Worker sends its batches, instead of going out at once on another
 * connection.
 */
export async function drainLoop<T>(
  store: { claim: () => Promise<readonly T[]>; complete: (batch: T[]) => Promise<unknown> },
  n: number,
  concurrency: number,
  options: { oneCompletionAtATime?: boolean } = {},
): Promise<void> {
  const buffer: T[] = [];
  let claiming: Promise<void> | null = null;
  let exhausted = false;
  const claim = (): Promise<void> =>
    (claiming ??= store
      .claim()
      .then((got) => {
        buffer.push(...got);
        if (got.length === 0) exhausted = true;
      })
      .finally(() => (claiming = null)));

  let pending: T[] = [];
  let flushScheduled = false;
  let completed = 0;
  const allCompleted = deferred();
  const failures: unknown[] = [];
  let previous: Promise<unknown> = Promise.resolve();
  const flush = () => {
    flushScheduled = false;
    const batch = pending;
    pending = [];
    const send = () => store.complete(batch);
    const sent = options.oneCompletionAtATime === true ? previous.then(send) : send();
    previous = sent.catch(() => undefined);
    sent
      .then(() => {
        completed += batch.length;
        if (completed >= n) allCompleted.resolve();
      })
      .catch((error: unknown) => {
        failures.push(error);
        allCompleted.resolve();
      });
  };
  const complete = (job: T) => {
    pending.push(job);
    if (!flushScheduled) {
      flushScheduled = true;
      setImmediate(flush);
    }
  };

  const handler = async () => {
    for (;;) {
      while (buffer.length === 0) {
        if (exhausted && claiming === null) return;
        await claim();
      }
      const job = buffer.shift()!;
      if (buffer.length < concurrency && !exhausted) void claim();
      await Promise.resolve(); // the no-op job
      complete(job);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, handler));
  await allCompleted.promise;
  if (failures.length > 0) throw failures[0];
}

/**
 * `drainLoop` over every job `sql` claims (floor_jobs for the floors), claims of `prefetch`, each
 * tick's completions in one statement (a deletion, or an update for the floor keeping them).
 */
export async function processAll(
  pool: pg.Pool,
  sql: FloorStatements,
  n: number,
  concurrency: number,
  prefetch: number,
  options: { oneCompletionAtATime?: boolean } = {},
): Promise<void> {
  await drainLoop(
    {
      claim: async () => (await pool.query<{ id: string }>({ name: "floor-claim", text: sql.claim, values: [prefetch] })).rows.map((r) => r.id),
      complete: (ids) => pool.query({ name: "floor-complete", text: sql.complete, values: [ids] }),
    },
    n,
    concurrency,
    options,
  );
}

/**
 * The floor as a benchmark subject; `freshDatabase` gives an empty database's URL per measurement.
 * `keepFinished` (default false): the floor of a queue that keeps finished jobs (see the top of
 * this file), a subject of its own beside the deleting floor.
 */
export function floorSubject(freshDatabase: () => Promise<string>, prefetch: number, options: { keepFinished?: boolean } = {}): Subject {
  const sql = options.keepFinished === true ? KEEPING : DELETING;
  const withPool = async <T>(max: number, fn: (pool: pg.Pool) => Promise<T>): Promise<T> => {
    const pool = new pg.Pool({ connectionString: await freshDatabase(), max });
    try {
      await pool.query(sql.schema);
      return await fn(pool);
    } finally {
      await pool.end();
    }
  };
  return {
    name: options.keepFinished === true ? "floor, keeping finished" : "floor",
    // The report's fractions are of the deleting floor: the least work of any queue.
    floor: options.keepFinished !== true,
    bulk: (n) => withPool(2, (pool) => rate(n, () => pool.query(INSERT_MANY, [payloads(0, n)]))),
    single: (n) =>
      withPool(2, (pool) =>
        rate(n, async () => {
          for (let i = 0; i < n; i++) await pool.query({ name: "floor-add", text: INSERT_ONE, values: [JSON.stringify({ i })] });
        }),
      ),
    // A connection per handler and two to spare, as graphile-worker's pool in bench/postgres.ts.
    processing: (n, concurrency) =>
      withPool(concurrency + 2, async (pool) => {
        for (const [start, len] of chunks(n, FILL_CHUNK)) await pool.query(INSERT_MANY, [payloads(start, len)]);
        return rate(n, () => processAll(pool, sql, n, concurrency, prefetch));
      }),
    latency: (samples) =>
      withPool(2, async (pool) => {
        const listener = await pool.connect();
        let onStart: (() => void) | null = null;
        // One claim at a time on the listening connection; a notification during a claim
        // triggers one more pass so no job waits for the next notification.
        let running = false;
        let again = false;
        const drain = async () => {
          if (running) return void (again = true);
          running = true;
          do {
            again = false;
            const { rows } = await listener.query<{ id: string }>({ name: "floor-claim", text: sql.claim, values: [10] });
            for (const _ of rows) onStart?.();
            if (rows.length > 0) await pool.query({ name: "floor-complete", text: sql.complete, values: [rows.map((r) => r.id)] });
          } while (again);
          running = false;
        };
        listener.on("notification", () => void drain().catch((error: unknown) => console.error("floor latency:", error)));
        await listener.query("LISTEN floor_jobs");
        await sleep(200);
        try {
          return await latencySamples(
            [],
            samples,
            (i) => pool.query({ name: "floor-add", text: INSERT_ONE, values: [JSON.stringify({ i })] }),
            (fn) => (onStart = fn),
          );
        } finally {
          listener.release();
        }
      }),
  };
}
