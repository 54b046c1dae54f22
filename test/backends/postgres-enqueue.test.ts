/**
 * PostgreSQL only: the enqueue of jobs whose ids the producer made (JobSpec.idGenerated), which
 * inserts without looking for stored ids first (enqueue-fresh.sql, docs/performance-postgres.md,
 * "Session 11"). A duplicate can still reach it (a batch sent again after its answer was lost, a
 * hand-made spec): it is reported as one, the batch's new jobs are stored once, and the event log
 * says "added" once per stored job. Also the array literals every batch statement's parameters
 * are written as (arrays.ts), read back by the server.
 */
import pg from "pg";
import { describe, expect, it } from "vitest";
import { integerArray, jsonTextArray, textArray } from "../../src/backend/postgres/arrays.js";
import { oneJobEnqueueText, PostgresBackend } from "../../src/backend/postgres/backend.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { postgresTestStores } from "../helpers/postgres-stores.js";

const stores = postgresTestStores({ poolSize: 2 });
const { admin } = stores;
const backend = () => stores.open();

const fresh = (data: unknown = null) => buildJobSpec({ queue: "q", name: "job", data });

async function stored(b: PostgresBackend): Promise<Array<{ id: string; payload: unknown }>> {
  const s = pg.escapeIdentifier(b.schema);
  return (await admin.query<{ id: string; payload: unknown }>(`SELECT id, payload FROM ${s}.jobs ORDER BY seq`)).rows;
}

async function addedEvents(b: PostgresBackend): Promise<string[]> {
  const s = pg.escapeIdentifier(b.schema);
  return (await admin.query<{ job_id: string }>(`SELECT job_id FROM ${s}.event_log WHERE type = 'added' ORDER BY xid, seq, i`)).rows.map((r) => r.job_id);
}

describe("PostgreSQL enqueue of generated ids", () => {
  it("marks the ids the producer made, and only those", () => {
    expect(fresh().idGenerated).toBe(true);
    expect(buildJobSpec({ queue: "q", name: "job", data: null, options: { jobId: "mine" } }).idGenerated).toBe(false);
  });

  it("reports a generated id sent again as a duplicate, and stores its job once", async () => {
    const b = await backend();
    const spec = fresh({ n: 1 });
    expect(await b.enqueue([spec])).toEqual([{ id: spec.id, duplicate: false }]);
    // The same spec again, as a producer whose first answer was lost would send it.
    expect(await b.enqueue([spec])).toEqual([{ id: spec.id, duplicate: true }]);
    expect(await stored(b)).toEqual([{ id: spec.id, payload: { n: 1 } }]);
    expect(await addedEvents(b)).toEqual([spec.id]);
  });

  it("stores the new jobs of a batch that holds a stored generated id, each once, in order", async () => {
    const b = await backend();
    const [a, c, d] = [fresh({ n: 1 }), fresh({ n: 2 }), fresh({ n: 3 })];
    await b.enqueue([c]);
    const results = await b.enqueue([a, c, d]);
    expect(results).toEqual([
      { id: a.id, duplicate: false },
      { id: c.id, duplicate: true },
      { id: d.id, duplicate: false },
    ]);
    expect((await stored(b)).map((r) => r.id)).toEqual([c.id, a.id, d.id]);
    expect(await addedEvents(b)).toEqual([c.id, a.id, d.id]);
    // A caller's id equal to a generated one is a duplicate too (enqueue.sql, the caller's ids).
    expect(await b.enqueue([buildJobSpec({ queue: "q", name: "job", data: null, options: { jobId: a.id } })])).toEqual([{ id: a.id, duplicate: true }]);
  });

  it("wakes workers and leaves a claimable job, as the enqueue with a duplicate check does", async () => {
    const b = await backend();
    const spec = fresh();
    await b.enqueue([spec]);
    const claimed = await b.claim({ queues: ["q"], names: ["job"], worker: { id: "w", host: "h", pid: 1 }, limit: 5, leaseMs: 30_000 });
    expect(claimed.map((c) => c.job.id)).toEqual([spec.id]);
    expect((await b.stats("q"))[0]!.counts).toMatchObject({ waiting: 0, active: 1 });
  });
});

describe("PostgreSQL single add (enqueue-one-fresh.sql)", () => {
  /** The statements the backend sends from now on, by their text. */
  function sentTexts(b: PostgresBackend): string[] {
    const sent: string[] = [];
    const pool = (b as unknown as { pool: pg.Pool }).pool;
    const query = pool.query.bind(pool) as (config: pg.QueryConfig) => Promise<unknown>;
    (pool as unknown as { query: (config: pg.QueryConfig) => Promise<unknown> }).query = (config) => {
      sent.push(config.text);
      return query(config);
    };
    return sent;
  }

  const COLUMNS = `id, queue, name, payload, meta, state, priority, run_at - created_at AS delay, max_attempts, backoff, timeout_ms,
                   retain_completed_ms, retain_dead_ms, lane, group_key, limiter_key`;
  async function rows(b: PostgresBackend): Promise<Array<Record<string, unknown>>> {
    const s = pg.escapeIdentifier(b.schema);
    return (await admin.query<Record<string, unknown>>(`SELECT ${COLUMNS} FROM ${s}.jobs ORDER BY seq`)).rows;
  }

  it("stores one job's values without array literals, the same row a batch stores", async () => {
    const variants = [
      { data: { n: 1 } },
      { data: ["a", 'quote " and \\ backslash', null], options: { priority: 5, meta: { trace: "t" }, timeoutMs: 250, removeOnComplete: true } },
      { data: "text", options: { delayMs: 60_000, attempts: 7, backoff: { type: "fixed" as const, delayMs: 10 }, removeOnFail: false } },
    ];
    const single = await backend();
    const batched = await backend();
    const sent = sentTexts(single);
    for (const v of variants) {
      const one = buildJobSpec({ queue: "q", name: "job", data: v.data, options: v.options });
      expect(await single.enqueue([one])).toEqual([{ id: one.id, duplicate: false }]);
      // The same job in a batch of two (the array statement), with a second job after it.
      const same = buildJobSpec({ queue: "q", name: "job", data: v.data, options: { ...v.options, jobId: one.id } });
      await batched.enqueue([{ ...same, idGenerated: true }, fresh({ filler: true })]);
    }
    const enqueues = sent.filter((t) => t.includes("INSERT INTO"));
    expect(enqueues).toHaveLength(3);
    for (const text of enqueues) {
      expect(text).toContain("(VALUES ($2::text");
      expect(text.replace(/--.*$/gm, "")).not.toMatch(/\[\]|unnest|cardinality/);
    }
    const fromBatch = (await rows(batched)).filter((r) => !JSON.stringify(r.payload).includes("filler"));
    expect(await rows(single)).toEqual(fromBatch);
    expect(await addedEvents(single)).toEqual(fromBatch.map((r) => r.id));
  });

  it("builds its statement from enqueue-fresh.sql, and refuses an array use it cannot turn into one job's values", () => {
    const fresh = "SELECT * FROM unnest($2::text[], $3::int[]) AS i(a, b) WHERE cardinality($2::text[]) > 0 AND $4::text[] IS NOT NULL";
    expect(oneJobEnqueueText("-- x\n{{enqueue}}", fresh)).toBe(
      "-- x\nSELECT * FROM (VALUES ($2::text, $3::int)) AS i(a, b) WHERE 1 > 0 AND $4::text IS NOT NULL",
    );
    expect(() => oneJobEnqueueText("{{enqueue}}", "SELECT array_length($2::text[][], 1)")).toThrow(/enqueue-one-fresh/);
    expect(() => oneJobEnqueueText("{{enqueue}}", "SELECT unnest(ARRAY[1, 2])")).toThrow(/enqueue-one-fresh/);
  });
});

describe("PostgreSQL array literals (arrays.ts)", () => {
  const roundTrip = async (literal: string, type: string): Promise<unknown> =>
    (await admin.query<{ v: unknown }>(`SELECT $1::${type} AS v`, [literal])).rows[0]!.v;

  it("reads back every string as sent, with and without the characters that need a backslash", async () => {
    const plain = ["01kbf9x0000000abcdefgh", "bench", "", "NULL", "a,b", "{x}", "sp ace", "é ☃ 𝄞"];
    const awkward = [...plain, 'quo"te', "back\\slash", null];
    expect(await roundTrip(textArray(plain), "text[]")).toEqual(plain);
    expect(await roundTrip(textArray(awkward), "text[]")).toEqual(awkward);
    expect(await roundTrip(textArray([]), "text[]")).toEqual([]);
    expect(await roundTrip(textArray([null]), "text[]")).toEqual([null]);
  });

  it("reads back JSON texts and integers, nulls included", async () => {
    const texts = [JSON.stringify({ s: 'a "quoted" \\ line\nbreak' }), null, "[]", JSON.stringify("NULL")];
    expect(await roundTrip(jsonTextArray(texts), "text[]")).toEqual(texts);
    expect(await roundTrip(jsonTextArray([]), "text[]")).toEqual([]);
    expect(await roundTrip(integerArray([0, -5, 9_007_199_254_740_991]), "bigint[]")).toEqual(["0", "-5", "9007199254740991"]);
    expect(await roundTrip(integerArray([1, null, 3]), "bigint[]")).toEqual(["1", null, "3"]);
    expect(await roundTrip(integerArray([]), "bigint[]")).toEqual([]);
  });
});
