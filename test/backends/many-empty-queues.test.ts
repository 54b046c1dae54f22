/**
 * Issue #12, "many queues": a claim naming 1,000 queues of which 999 are empty must not pay for
 * the empty ones (docs/performance-growth.md, "Fifth pass"). Each fast path is pinned here by a
 * test that fails without it, beside the claims' results (the merged order, queues not named
 * left alone, a job arriving in a queue that was empty found by the next claim):
 * - PostgreSQL: no node of the claim's plan reads the 1,000 names (the old plan de-duplicated
 *   and intersected all of them on every claim);
 * - SQLite: the claim probes only the named queues that hold pending jobs (queuesToProbe);
 * - the checking facade: an unchanged list is checked once and handed on as the same frozen
 *   array, while a list changed in place is checked again (a name made invalid is refused).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import pg from "pg";
import { afterAll, afterEach, describe, expect, inject, it } from "vitest";
import { CheckedLists, preparedFor } from "../../src/backend/checked-lists.js";
import { bytewiseBefore, byteOrderRange } from "../../src/backend/named-range.js";
import { PostgresBackend } from "../../src/backend/postgres/index.js";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { PENDING_SCAN_LIMIT, queuesToProbe } from "../../src/backend/sqlite/pending-queues.js";
import { prepareStatements } from "../../src/backend/sqlite/statements.js";
import { normalizeQueueLimits } from "../../src/core/flow.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { InvalidInputError } from "../../src/core/errors.js";
import { silentLogger } from "../../src/index.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";
import { nodes, statementsOf, type PlanNode } from "../helpers/postgres-plans.js";

const worker = { id: "w", host: "h", pid: 1 };
const job = (queue: string, priority = 5) => buildJobSpec({ queue, name: "job", data: null, options: { priority } });
const names = (n: number) => Array.from({ length: n }, (_, i) => `q${String(i).padStart(4, "0")}`);

describe("a claim naming 1,000 queues, 999 of them empty (PostgreSQL)", () => {
  const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
  const schemas = new TestSchemas(url);
  const toClose: PostgresBackend[] = [];
  afterEach(async () => {
    for (const b of toClose.splice(0)) await b.close();
    await schemas.dropAll();
  });

  /*
   * PostgreSQL's claim keeps the queue list's literal and byte-order range once
   * per list (preparedFor on the frozen list the checking facade hands over: "not per claim",
   * backend.ts claimParams). But claim() hands claimParams `request.queues.filter(...)` whenever
   * ANY queue of the schema has a flow row (limits, a hold, keyed jobs): a fresh array each claim,
   * never frozen, so the 1,000-name literal and range are rebuilt on every claim of every worker,
   * even when none of the named queues is limited.
   */
  /** The queue lists the store's own claim was given (behind the facade). */
  function recordLists(): { seen: Set<readonly string[]>; restore(): void } {
    const seen = new Set<readonly string[]>();
    const proto = PostgresBackend.prototype as unknown as { claim: PostgresBackend["claim"] };
    const original = proto.claim;
    proto.claim = function (this: PostgresBackend, request) {
      seen.add(request.queues);
      return original.call(this, request);
    };
    return { seen, restore: () => void (proto.claim = original) };
  }

  describe("PostgreSQL claim's prepared queue list (review9)", () => {
    for (const otherLimited of [false, true]) {
      it(`is made once per list ${otherLimited ? "when another queue of the schema has limits" : "with no flow row anywhere"}`, async () => {
        const b = new PostgresBackend({ connectionString: url, schema: schemas.create(), logger: silentLogger });
        toClose.push(b);
        await b.migrate();
        if (otherLimited) await b.setQueueLimits("elsewhere", normalizeQueueLimits({ maxRunning: 5 }));
        const queues = Array.from({ length: 50 }, (_, i) => `q${i}`);
        const rec = recordLists();
        try {
          for (let i = 0; i < 3; i++) await b.claim({ queues, names: ["job"], worker, limit: 1, leaseMs: 30_000 });
        } finally {
          rec.restore();
        }
        expect(rec.seen.size).toBe(1);
        const [list] = [...rec.seen];
        // The form the backend made for this list, if it made one; a new one ("none") if it never did.
        const form = preparedFor(list!, "postgres-claim-queues", () => "none");
        expect(form, "claimParams never prepared the facade's list: rebuilt on every claim").not.toBe("none");
      });
    }
  });

  it("reads none of the 1,000 names in its plan, and still takes the right jobs", async () => {
    const schema = schemas.create();
    const b = new PostgresBackend({ connectionString: url, schema, logger: silentLogger });
    toClose.push(b);
    await b.migrate();
    const queues = names(1_000);
    // Every queue known to the store (it had a job), all but q0000 empty now; q0500x, not named
    // and inside the named range, holds better jobs that the claim must leave alone.
    // One enqueue and one DELETE (not 999 cancels: a loaded machine ran out of time on those).
    await b.enqueue(queues.slice(1).map((queue) => job(queue)));
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    try {
      await admin.query(`DELETE FROM ${pg.escapeIdentifier(schema)}.jobs`);
      await b.enqueue(Array.from({ length: 20 }, () => job("q0000")));
      await b.enqueue([job("q0500x", 0), job("q0500x", 0)]);
      await admin.query(`VACUUM ANALYZE ${pg.escapeIdentifier(schema)}.jobs, ${pg.escapeIdentifier(schema)}.queues`);
      const claimSql = statementsOf(b).claim!;
      await admin.query("BEGIN");
      const { rows } = await admin.query<{ "QUERY PLAN": Array<{ Plan: PlanNode }> }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${claimSql}`, [
        null,
        `{${queues.join(",")}}`,
        "{job}",
        5,
        30_000,
        "w",
        "h",
        1,
        false,
        null,
        byteOrderRange(queues)!.first,
        byteOrderRange(queues)!.last,
      ]);
      await admin.query("ROLLBACK");
      // The queues table (one row per known queue) is read for paused ones; nothing else may
      // touch a row per named queue. The old claim de-duplicated (HashAggregate, 1,000 rows) and
      // intersected (HashSetOp, 1,001) every name on every claim.
      const wide = nodes(rows[0]!["QUERY PLAN"][0]!.Plan)
        .filter((n) => n["Actual Rows"]! * n["Actual Loops"]! >= 100)
        .map((n) => `${n["Node Type"]} ${n["Actual Rows"]}×${n["Actual Loops"]}`);
      expect(wide).toEqual([]);
    } finally {
      await admin.end();
    }
    const first = await b.claim({ queues, names: ["job"], worker, limit: 5, leaseMs: 30_000 });
    expect(first.map((c) => c.job.queue)).toEqual(["q0000", "q0000", "q0000", "q0000", "q0000"]);
    // A job arriving in a queue the last claim found empty: the next claim finds it, first (priority 0).
    await b.enqueue([job("q0700", 0)]);
    const second = await b.claim({ queues, names: ["job"], worker, limit: 2, leaseMs: 30_000 });
    expect(second.map((c) => `${c.job.queue}/${c.job.priority}`)).toEqual(["q0700/0", "q0000/5"]);
  }, 120_000);
});

describe("a claim naming many queues probes only those with pending jobs (SQLite)", () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  const store = async () => {
    const dir = mkdtempSync(join(tmpdir(), "conveyor-empty-queues-"));
    dirs.push(dir);
    const path = join(dir, "t.db");
    const backend = new SqliteBackend({ path });
    await backend.migrate();
    const db = new Database(path);
    return { backend, db, probe: (queues: readonly string[]) => queuesToProbe(prepareStatements(db, "conveyor_").pendingQueues, queues) };
  };

  it("finds the named queues with waiting or scheduled jobs, not the empty or unnamed ones", async () => {
    const { backend, db, probe } = await store();
    try {
      const queues = names(1_000);
      await backend.enqueue([job("q0003"), job("q0500x"), job("zzz")]);
      await backend.enqueue([buildJobSpec({ queue: "q0900", name: "job", data: null, options: { delayMs: 3_600_000 } })]);
      expect(probe(queues)).toEqual(["q0003", "q0900"]);
      // A queue that had jobs and has none left is not probed.
      const [claimed] = await backend.claim({ queues: ["q0003"], names: ["job"], worker, limit: 1, leaseMs: 30_000 });
      await backend.complete([{ lease: claimed!.lease, result: null }]);
      expect(probe(queues)).toEqual(["q0900"]);
      // One named queue is probed as it is; more pending queues than the scan's bound: every named one.
      expect(probe(["q0001"])).toEqual(["q0001"]);
      for (let i = 0; i < PENDING_SCAN_LIMIT + 1; i++) await backend.enqueue([job(queues[i * 10]!)]);
      expect(probe(queues)).toEqual(queues);
    } finally {
      db.close();
      await backend.close();
    }
  });

  it("claims in the merged order from the few busy queues among 1,000, and finds a job added to an empty one", async () => {
    const { backend, db } = await store();
    try {
      const queues = names(1_000);
      await backend.enqueue([job("q0010", 3), job("q0999", 1), job("q0500", 2), job("q0500x", 0)]);
      const claimed = await backend.claim({ queues, names: ["job"], worker, limit: 2, leaseMs: 30_000 });
      expect(claimed.map((c) => `${c.job.queue}/${c.job.priority}`)).toEqual(["q0999/1", "q0500/2"]);
      await backend.enqueue([job("q0001", 0)]);
      const next = await backend.claim({ queues, names: ["job"], worker, limit: 5, leaseMs: 30_000 });
      expect(next.map((c) => `${c.job.queue}/${c.job.priority}`)).toEqual(["q0001/0", "q0010/3"]);
    } finally {
      db.close();
      await backend.close();
    }
  });
});

describe("the checking facade checks an unchanged claim list once", () => {
  it("hands on the same frozen array for an equal list, and checks a list changed in place again", () => {
    let checks = 0;
    const lists = new CheckedLists((values) => {
      checks++;
      return [...new Set(values)].map((v) => {
        if (v.includes(" ")) throw new InvalidInputError(`bad name ${v}`);
        return v;
      });
    });
    const given = ["a", "b", "a"];
    const first = lists.of(given);
    expect(first).toEqual(["a", "b"]);
    expect(Object.isFrozen(first)).toBe(true);
    expect(lists.of(["a", "b", "a"])).toBe(first);
    expect(lists.of(given)).toBe(first);
    expect(checks).toBe(1);
    // The caller changes its own array after a claim: the cached check must not vouch for it.
    given[1] = "bad name";
    expect(() => lists.of(given)).toThrow(InvalidInputError);
    expect(lists.of(["c"])).toEqual(["c"]);
    expect(checks).toBe(3);
  });

  it("gives a backend's claim the same array each time, so its prepared form is made once", async () => {
    const dir = mkdtempSync(join(tmpdir(), "conveyor-empty-queues-"));
    const backend = new SqliteBackend({ path: join(dir, "t.db") });
    try {
      await backend.migrate();
      const seen = new Set<readonly string[]>();
      const raw = Object.getPrototypeOf(backend) as { claim: SqliteBackend["claim"] };
      const original = raw.claim;
      // The store's own claim (behind the facade) records the arrays it is given.
      raw.claim = function (this: SqliteBackend, request) {
        seen.add(request.queues);
        return original.call(this, request);
      };
      try {
        for (let i = 0; i < 3; i++) await backend.claim({ queues: ["x", "y", "z"], names: ["job"], worker, limit: 1, leaseMs: 30_000 });
      } finally {
        raw.claim = original;
      }
      expect(seen.size).toBe(1);
      let made = 0;
      const [list] = [...seen];
      for (let i = 0; i < 3; i++) preparedFor(list!, "test", () => made++);
      expect(made).toBe(1);
    } finally {
      await backend.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("byte order of names (the scan's range)", () => {
  it("orders by UTF-8 bytes, where JavaScript's order differs", () => {
    // U+FFFD is EF BF BD in UTF-8, U+1D11E is F0 9D 84 9E: byte-wise U+FFFD comes first; as
    // UTF-16 code units (0xFFFD against 0xD834) JavaScript puts it last.
    expect("\uFFFD" < "\u{1D11E}").toBe(false);
    expect(bytewiseBefore("\uFFFD", "\u{1D11E}")).toBe(true);
    expect(byteOrderRange(["b", "\u{1D11E}", "\uFFFD", "a"])).toEqual({ first: "a", last: "\u{1D11E}" });
    expect(byteOrderRange([])).toBeNull();
  });
});
