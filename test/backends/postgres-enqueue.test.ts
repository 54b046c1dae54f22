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
import { PostgresBackend } from "../../src/backend/postgres/backend.js";
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
  return (await admin.query<{ job_id: string }>(`SELECT job_id FROM ${s}.events WHERE type = 'added' ORDER BY xid, seq`)).rows.map((r) => r.job_id);
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
