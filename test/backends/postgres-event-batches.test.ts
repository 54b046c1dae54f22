/**
 * PostgreSQL only: the event log as one row per statement (migration 0017_event_batches): a
 * statement of two events or more writes one `events` row holding them as a batch, one of a single
 * event the plain row it always did. Cursors inside a batch, the events written before the
 * migration read before the batches with the ids they had, what a reader of an earlier version
 * finds in a batch's row, and retention by whole rows.
 */
import pg from "pg";
import { describe, expect, it } from "vitest";
import type { PostgresBackend } from "../../src/backend/postgres/backend.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { InvalidInputError } from "../../src/index.js";
import type { QueueEvent } from "../../src/core/queue-events.js";
import { postgresTestStores } from "../helpers/postgres-stores.js";
import { migrateUpTo } from "../helpers/postgres-migrations.js";
import { waitFor } from "../helpers/wait-for.js";

const stores = postgresTestStores({ poolSize: 2 });
const { schemas, admin } = stores;

const job = (jobId: string) => buildJobSpec({ queue: "q", name: "job", data: null, options: { jobId } });
const jobs = (prefix: string, n: number) => Array.from({ length: n }, (_, k) => job(`${prefix}${String(k).padStart(4, "0")}`));
const worker = { id: "w1", host: "h", pid: 1 };

/**
 * Waits until readers may see every event written so far: each is read only once its transaction
 * is older than every one still running (read-events.sql), and other test files run transactions
 * on the same server meanwhile.
 */
async function readable(b: PostgresBackend): Promise<void> {
  const s = pg.escapeIdentifier(b.schema);
  await waitFor(
    async () => {
      const { rows } = await admin.query<{ ok: boolean | null }>(
        `SELECT (SELECT e.xid FROM ${s}.events AS e ORDER BY e.xid DESC, e.seq DESC LIMIT 1) < pg_snapshot_xmin(pg_current_snapshot()) AS ok`,
      );
      return rows[0]!.ok !== false;
    },
    { description: "every event written so far readable" },
  );
}

/** Every event after `cursor`, in pages of `pageSize`, each page resumed from the cursor the one before it gave. */
async function readAll(b: PostgresBackend, cursor: string, pageSize: number): Promise<QueueEvent[]> {
  await readable(b);
  const events: QueueEvent[] = [];
  for (;;) {
    const page = await b.readEvents(cursor, pageSize);
    expect(page.events.length).toBeLessThanOrEqual(pageSize);
    if (page.events.length === 0) return events;
    events.push(...page.events);
    cursor = page.cursor;
  }
}

/** Rows of `events` holding a batch, and rows holding one event. */
async function rowsOf(schema: string): Promise<{ batches: number; single: number }> {
  const { rows } = await admin.query<{ batches: string; single: string }>(
    `SELECT count(*) FILTER (WHERE batch_job_id IS NOT NULL) AS batches, count(*) FILTER (WHERE batch_job_id IS NULL) AS single FROM ${pg.escapeIdentifier(schema)}.events`,
  );
  return { batches: Number(rows[0]!.batches), single: Number(rows[0]!.single) };
}

describe("PostgreSQL: the event log in batches (migration event_batches)", () => {
  it("writes one row per statement, and a reader pages through a batch from any event of it, each event once and in order", async () => {
    const b = await stores.open();
    const start = await b.latestEventCursor();
    const ids = jobs("a", 120).map((j) => j.id);
    await b.enqueue(jobs("a", 120));
    const claimed = await b.claim({ queues: ["q"], names: ["job"], worker, limit: 50, leaseMs: 30_000 });
    await b.complete(claimed.map((c) => ({ lease: c.lease, result: { n: c.job.id } })));
    // One batch for the enqueue, one for the claim, one for the completions.
    expect(await rowsOf(b.schema)).toEqual({ batches: 3, single: 0 });

    const all = await readAll(b, start, 1000);
    // Each statement's events together, in statement order (within a claim or a completion, the
    // order of the statement's rows, which is no contract).
    expect(all.map((e) => e.type)).toEqual([...Array<string>(120).fill("added"), ...Array<string>(50).fill("active"), ...Array<string>(50).fill("completed")]);
    expect(all.slice(0, 120).map((e) => e.jobId)).toEqual(ids);
    const claimedIds = claimed.map((c) => c.job.id).sort();
    expect(
      all
        .slice(120, 170)
        .map((e) => e.jobId)
        .sort(),
    ).toEqual(claimedIds);
    expect(
      all
        .slice(170)
        .map((e) => e.jobId)
        .sort(),
    ).toEqual(claimedIds);
    for (const e of all.slice(170)) expect(e.data).toMatchObject({ result: { n: e.jobId } });
    expect(new Set(all.map((e) => e.id)).size).toBe(all.length);
    // Pages of 7 (never a whole batch): the same events.
    expect((await readAll(b, start, 7)).map((e) => e.id)).toEqual(all.map((e) => e.id));
    // Resuming from any event gives exactly the ones after it: inside a batch, at its last event,
    // and at the first event of the next.
    for (const k of [0, 1, 59, 119, 120, 169, 170, 218]) {
      expect((await readAll(b, all[k]!.id, 1000)).map((e) => e.id)).toEqual(all.slice(k + 1).map((e) => e.id));
    }
  });

  it("compresses the batches with LZ4 where the server has it", async () => {
    const b = await stores.open();
    const serverHasLz4 = await admin
      .query("CREATE TEMP TABLE lz4_probe (x text COMPRESSION lz4); DROP TABLE lz4_probe")
      .then(() => true)
      .catch(() => false);
    const { rows } = await admin.query<{ attname: string; attcompression: string }>(
      `SELECT attname, attcompression FROM pg_attribute WHERE attrelid = '${pg.escapeIdentifier(b.schema)}.events'::regclass AND attname = ANY($1) ORDER BY attname`,
      [["batch_at", "batch_attempt", "batch_data", "batch_job_id", "batch_name", "batch_queue", "batch_type"]],
    );
    expect(rows.map((r) => r.attcompression)).toEqual(Array<string>(7).fill(serverHasLz4 ? "l" : ""));
  });

  it("refuses a cursor whose place in a batch is not a number it could have issued", async () => {
    const b = await stores.open();
    for (const bad of ["1-1-", "1-1-x", "1-1-9223372036854775808", "1-1-1-1", "1--1"]) {
      await expect(b.readEvents(bad, 10)).rejects.toBeInstanceOf(InvalidInputError);
    }
    expect((await b.readEvents("1-1-9223372036854775807", 10)).events).toEqual([]);
  });

  it("reads the events written before the upgrade first, with the ids they had, then the batches; an old id resumes where it stood", async () => {
    const schema = schemas.create();
    const s = pg.escapeIdentifier(schema);
    await migrateUpTo(admin, schema, "event_batches");
    // Three jobs added one by one before the upgrade: three rows of `events`.
    for (const id of ["old1", "old2", "old3"]) await admin.query(`SELECT ${s}.add_job('q', 'job', '{}', $1)`, [JSON.stringify({ jobId: id })]);
    const oldIds = (await admin.query<{ id: string }>(`SELECT xid::text || '-' || seq AS id FROM ${s}.events ORDER BY xid, seq`)).rows.map((r) => r.id);
    expect(oldIds).toHaveLength(3);

    const b = await stores.open({ schema });
    await b.enqueue([job("new1"), job("new2")]);
    const all = await readAll(b, "0-0", 2);
    expect(all.map((e) => e.jobId)).toEqual(["old1", "old2", "old3", "new1", "new2"]);
    // The rows of `events` keep their ids; the batch's events have ids of their own.
    expect(all.slice(0, 3).map((e) => e.id)).toEqual(oldIds);
    expect(all[3]!.id).toMatch(/^\d+-\d+-1$/);
    expect(all[4]!.id).toMatch(/^\d+-\d+-2$/);
    // An id handed out before the upgrade resumes after its event.
    expect((await readAll(b, oldIds[1]!, 10)).map((e) => e.jobId)).toEqual(["old3", "new1", "new2"]);
    expect((await readAll(b, oldIds[2]!, 10)).map((e) => e.jobId)).toEqual(["new1", "new2"]);
  });

  it("writes a one-event statement as the plain row it always was, and a batch's row with its first event in the plain columns", async () => {
    const b = await stores.open();
    const s = pg.escapeIdentifier(b.schema);
    const start = await b.latestEventCursor();
    await b.enqueue([job("one")]);
    await b.enqueue([job("two"), job("three")]);
    expect(await rowsOf(b.schema)).toEqual({ batches: 1, single: 1 });
    const { rows } = await admin.query<Record<string, unknown>>(
      `SELECT type, job_id, attempt, data, batch_events, batch_job_id, batch_type FROM ${s}.events ORDER BY xid, seq`,
    );
    expect(rows[0]).toMatchObject({ type: "added", job_id: "one", attempt: 0, batch_events: null, batch_job_id: null, batch_type: null });
    expect(rows[0]!.data).toMatchObject({ state: "waiting" });
    // What a reader of an earlier version sees of the batch: its first event, without details.
    expect(rows[1]).toMatchObject({ type: "added", job_id: "two", data: null, batch_events: 2, batch_job_id: ["two", "three"] });
    const all = await readAll(b, start, 10);
    expect(all.map((e) => [e.jobId, e.data])).toEqual([
      ["one", expect.objectContaining({ state: "waiting" })],
      ["two", expect.objectContaining({ state: "waiting" })],
      ["three", expect.objectContaining({ state: "waiting" })],
    ]);
    expect(all[0]!.id).toMatch(/^\d+-\d+$/);
    expect(all.slice(1).map((e) => e.id.split("-")[2])).toEqual(["1", "2"]);
  });

  it("prunes whole batches: by count once a batch's oldest event is past the newest maxEvents, by age once its newest is older", async () => {
    const b = await stores.open();
    const start = await b.latestEventCursor();
    // Batches of 10, 10 and 5 events (the newest).
    await b.enqueue(jobs("x", 10));
    await b.enqueue(jobs("y", 10));
    await b.enqueue(jobs("z", 5));
    // The newest 25 are all of them: nothing goes.
    expect(await b.pruneEvents({ maxEvents: 25 })).toBe(0);
    // 24: the oldest batch holds the 25th newest event, and goes whole (fewer stay, never more).
    expect(await b.pruneEvents({ maxEvents: 24 })).toBe(10);
    expect((await readAll(b, start, 100)).map((e) => e.jobId)).toEqual([...jobs("y", 10), ...jobs("z", 5)].map((j) => j.id));
    // 12: the newest 12 reach into the batch of y, which goes whole too.
    expect(await b.pruneEvents({ maxEvents: 12 })).toBe(10);
    expect((await readAll(b, start, 100)).map((e) => e.jobId)).toEqual(jobs("z", 5).map((j) => j.id));
    expect(await rowsOf(b.schema)).toEqual({ batches: 1, single: 0 });
    // By age: a batch whose newest event is older than the bound.
    await admin.query(`UPDATE ${pg.escapeIdentifier(b.schema)}.events SET batch_newest_at = batch_newest_at - 7200000`);
    expect(await b.pruneEvents({ maxAgeMs: 3_600_000 })).toBe(5);
    expect(await rowsOf(b.schema)).toEqual({ batches: 0, single: 0 });
  });
});
