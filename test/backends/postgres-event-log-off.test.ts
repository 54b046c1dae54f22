/**
 * The PostgreSQL event log switched off per schema (PostgresBackendOptions.eventLog,
 * `?eventLog=off`, migration event_log_switch): no event is written by any path (insert, claim,
 * completion, retry, death, deletion on completion or death, rescue), every reader refuses by name
 * exactly as on Redis, the schema records the setting so a process configured otherwise refuses to
 * start, and per-job event streams still work (by polling). The whole conformance suite also runs
 * on a schema with the log off (postgres-event-log-off-conformance.test.ts).
 */
import pg from "pg";
import { afterAll, afterEach, describe, expect, inject, it } from "vitest";
import { openBackend } from "../../src/backend/open.js";
import { PostgresBackend, type PostgresBackendOptions } from "../../src/backend/postgres/backend.js";
import { FakeClock } from "../../src/core/clock.js";
import { silentLogger, Worker, type Backend } from "../../src/index.js";
import { expectEventLogReadersRefused, expectJobEventStreamByPolling, runEveryEventPath } from "../helpers/event-log-off.js";
import { migrateUpTo } from "../helpers/postgres-migrations.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";
import { claimOne, enqueueOne } from "../conformance/fixtures.js";

const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const schemas = new TestSchemas(url);
const admin = new pg.Pool({ connectionString: url, max: 2 });

const backends: Backend[] = [];
const workers: Worker[] = [];

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.close({ force: true })));
  await Promise.all(backends.splice(0).map((b) => b.close()));
});

afterAll(async () => {
  await schemas.dropAll();
  await admin.end();
});

function backend(options: Partial<PostgresBackendOptions> & { schema: string }): PostgresBackend {
  const b = new PostgresBackend({ connectionString: url, logger: silentLogger, poolSize: 4, ...options });
  backends.push(b);
  return b;
}

async function count(schema: string, sql: string): Promise<number> {
  const { rows } = await admin.query<{ n: string }>(sql.replaceAll("{{schema}}", pg.escapeIdentifier(schema)));
  return Number(rows[0]!.n);
}

const eventRows = (schema: string) => count(schema, "SELECT count(*) AS n FROM {{schema}}.event_log");
const eventTriggers = (schema: string) =>
  count(schema, "SELECT count(*) AS n FROM pg_trigger WHERE tgrelid = '{{schema}}.jobs'::regclass AND tgname IN ('jobs_events_added', 'jobs_events_changed')");

describe("PostgreSQL event log off (eventLog: false)", () => {
  it("writes no event while jobs are added, run, retried, removed and dead; the same run with the log on writes them", async () => {
    const offSchema = schemas.create("evoff");
    const off = backend({ schema: offSchema, eventLog: false });
    expect(off.capabilities.eventLog).toBe(false);
    await off.migrate();
    expect(await eventTriggers(offSchema)).toBe(0);
    await runEveryEventPath(off, 20, workers);
    expect(await eventRows(offSchema)).toBe(0);

    const onSchema = schemas.create("evon");
    const on = backend({ schema: onSchema });
    expect(on.capabilities.eventLog).toBe(true);
    await on.migrate();
    expect(await eventTriggers(onSchema)).toBe(2);
    await runEveryEventPath(on, 20, workers);
    // added, active and completed/retrying/dead for each of the 22 jobs (one runs twice)
    expect(await eventRows(onSchema)).toBeGreaterThanOrEqual(22 * 3);
    // one terminal event per job, also for the 11 deleted as they finished (written by the statement itself)
    expect(await count(onSchema, "SELECT count(*) AS n FROM {{schema}}.event_log WHERE type IN ('completed', 'dead')")).toBe(22);
  });

  it("a lease rescued into death writes no event either (rescue.sql)", async () => {
    const schema = schemas.create("evoff");
    const clock = new FakeClock(1_000_000);
    const b = backend({ schema, eventLog: false, clock });
    await b.migrate();
    const id = await enqueueOne(b, { attempts: 1, removeOnFail: true });
    await claimOne(b, { leaseMs: 1_000 });
    clock.advance(5_000);
    await b.rescueExpired();
    expect(await b.get(id)).toBeNull();
    expect(await eventRows(schema)).toBe(0);
  });

  it("refuses every reader by name, as on Redis: readEvents, queue.events(), GET /v1/events (501); no event tail", async () => {
    const b = backend({ schema: schemas.create("evoff"), eventLog: false });
    await b.migrate();
    await expectEventLogReadersRefused(b, { cursor: "0-0", scope: "schema" });
  });

  it("a job's own event stream (GET /v1/jobs/{id}/events) still reports its completion, by polling", async () => {
    const b = backend({ schema: schemas.create("evoff"), eventLog: false });
    await b.migrate();
    await expectJobEventStreamByPolling(b, workers);
  });

  it("one setting per schema: the first process records it, a process configured otherwise refuses to start", async () => {
    const schema = schemas.create("evset");
    await backend({ schema, eventLog: false }).migrate();
    expect(await count(schema, "SELECT count(*) AS n FROM {{schema}}.settings WHERE name = 'event_log' AND value = 'off'")).toBe(1);
    await expect(backend({ schema }).migrate()).rejects.toThrow(
      /schema "evset[^"]*" keeps its event log off.*pass eventLog: false \(\?eventLog=off in a URL\)/,
    );
    // a process that does not migrate is refused at its first call
    await expect(backend({ schema }).stats("q")).rejects.toThrow(/keeps its event log off/);
    await backend({ schema, eventLog: false }).migrate();

    const other = schemas.create("evset");
    await backend({ schema: other }).migrate();
    expect(await eventTriggers(other)).toBe(2);
    await expect(backend({ schema: other, eventLog: false }).migrate()).rejects.toThrow(/keeps its event log on/);
    expect(await eventTriggers(other)).toBe(2);
  });

  it("turned back on by deleting the record while no process runs: the next process with the log on restores the triggers", async () => {
    const schema = schemas.create("evback");
    const off = backend({ schema, eventLog: false });
    await off.migrate();
    await off.close();
    expect(await eventTriggers(schema)).toBe(0);
    await admin.query(`DELETE FROM ${pg.escapeIdentifier(schema)}.settings WHERE name = 'event_log'`);
    const on = backend({ schema });
    await on.migrate();
    expect(await eventTriggers(schema)).toBe(2);
    const start = await on.latestEventCursor();
    await enqueueOne(on);
    expect(await eventRows(schema)).toBe(1);
    expect(start).toMatch(/^\d+-0$/);
  });

  it("a schema holding jobs from before the setting existed is recorded as on", async () => {
    const schema = schemas.create("evold");
    const quoted = pg.escapeIdentifier(schema);
    // The state of a schema before the switch existed, with one event in it: every migration
    // before the switch applied, then the rest left to the backend's migrate().
    await migrateUpTo(admin, schema, "event_log_switch");
    await admin.query(`INSERT INTO ${quoted}.events (at, type, queue, name, job_id, attempt) VALUES (1, 'added', 'q', 'n', 'j', 0)`);
    await expect(backend({ schema, eventLog: false }).migrate()).rejects.toThrow(/keeps its event log on/);
    expect(await eventTriggers(schema)).toBe(2);
  });

  it("?eventLog=off in a postgres:// URL (the CLI's --db) turns it off; another value is refused", async () => {
    const schema = schemas.create("evurl");
    const b = await openBackend(`${url}${url.includes("?") ? "&" : "?"}schema=${schema}&eventLog=off`);
    backends.push(b);
    expect(b.capabilities.eventLog).toBe(false);
    expect(await eventTriggers(schema)).toBe(0);
    await expect(openBackend(`${url}${url.includes("?") ? "&" : "?"}schema=${schema}&eventLog=no`)).rejects.toThrow(/\?eventLog= takes on or off/);
  });

  it("?eventLog= in a postgres:// URL is read before or after ?schema=; a URL that disagrees with the schema's record is refused, saying what to pass", async () => {
    const schema = schemas.create("evurl");
    const withParams = (params: string) => `${url}${url.includes("?") ? "&" : "?"}${params}`;
    // eventLog first: the schema parameter after it must still be taken out and applied.
    const off = await openBackend(withParams(`eventLog=off&schema=${schema}`));
    backends.push(off);
    expect(off.capabilities.eventLog).toBe(false);
    expect(await count(schema, "SELECT count(*) AS n FROM {{schema}}.settings WHERE name = 'event_log' AND value = 'off'")).toBe(1);
    // The schema keeps its log off: a URL asking for it on, or saying nothing (default on), is refused.
    for (const params of [`schema=${schema}&eventLog=on`, `schema=${schema}`]) {
      await expect(openBackend(withParams(params)), params).rejects.toThrow(/keeps its event log off.*\(\?eventLog=off in a URL\)/);
    }
    // An empty value and another case are refused by name, not read as a default.
    for (const value of ["", "OFF", "false"]) {
      await expect(openBackend(withParams(`schema=${schema}&eventLog=${value}`)), value).rejects.toThrow(/\?eventLog= takes on or off/);
    }
    expect(await eventTriggers(schema)).toBe(0);
  });
});
