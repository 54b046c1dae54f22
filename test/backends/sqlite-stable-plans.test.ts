/**
 * SQLite statements are planned once (src/backend/sqlite/stable-plans.ts): every bound parameter
 * is written `+param`, so SQLite does not compile a statement again each time its parameters are
 * bound. What must hold: the rewrite touches parameters only, a pinned parameter compares and
 * returns exactly what a bare one does, every statement the backend runs is pinned, and a plan
 * that depended on a bound value (a partial index of one state) keeps its index.
 */
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { parameterPositions, pinParameters, planOnce } from "../../src/backend/sqlite/stable-plans.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { statementsRun } from "../helpers/sqlite-statements.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs("conveyor-sqlite-plans-");
const closeAfterTest: Array<{ close(): unknown }> = [];
afterEach(async () => {
  for (const c of closeAfterTest.splice(0)) await c.close();
});
afterAll(() => temp.removeAll());

const WORKER = { id: "w", host: "h", pid: 1 };

describe("pinParameters", () => {
  it("writes every kind of parameter as +param", () => {
    expect(pinParameters("SELECT * FROM t WHERE a = ? AND b <= ?2 AND c = @c AND d = :d AND e = $e LIMIT ? OFFSET ?")).toBe(
      "SELECT * FROM t WHERE a = +? AND b <= +?2 AND c = +@c AND d = +:d AND e = +$e LIMIT +? OFFSET +?",
    );
    expect(pinParameters("SELECT value FROM json_each(?) WHERE x IN (?,?)")).toBe("SELECT value FROM json_each(+?) WHERE x IN (+?,+?)");
  });

  it("leaves strings, quoted identifiers, comments and words with : or $ in them as they are", () => {
    const untouched = [
      `SELECT json_extract(x, '$.a[0]'), 'what?', 'it''s @here ?', "col?", [odd ?name], \`tick@\``,
      "SELECT 1 -- a comment with ?1 and @name\n",
      "SELECT 1 /* ? @x :y $z */",
      "SELECT a:b, c$d FROM t",
      "SELECT @, :, $",
    ];
    for (const sql of untouched) expect(pinParameters(sql)).toBe(sql);
    expect(pinParameters("SELECT 'a''?' || ? -- ?\n, ?")).toBe("SELECT 'a''?' || +? -- ?\n, +?");
    expect(parameterPositions("SELECT ?, '?', ?")).toEqual([7, 15]);
  });

  it("pinned parameters bind, compare and return exactly what bare ones do", () => {
    const db = new Database(":memory:");
    closeAfterTest.push(db);
    db.exec("CREATE TABLE t (s TEXT, i INTEGER, r REAL, b BLOB, n)");
    db.exec("CREATE INDEX t_s ON t (s)");
    db.prepare("INSERT INTO t VALUES (?, ?, ?, ?, ?)").run("007", 7, 1.5, Buffer.from([1, 2]), "x");
    const pinned = planOnce(new Database(":memory:"));
    closeAfterTest.push(pinned);
    const values: unknown[] = ["007", 7, 7n, 1.5, "7", Buffer.from([1, 2]), null, "x"];
    for (const value of values) {
      // What a bare and a pinned parameter return as a value, and what each column's comparison makes of it.
      const row = (sql: string) => db.prepare(sql).get(value, value, value, value, value, value);
      const sql =
        "SELECT ? AS v, typeof(?) AS t, (SELECT count(*) FROM t WHERE s = ?) AS s, (SELECT count(*) FROM t WHERE i = ?) AS i, (SELECT count(*) FROM t WHERE b = ?) AS b, (SELECT count(*) FROM t WHERE n = ?) AS n";
      expect(row(pinParameters(sql)), String(value)).toEqual(row(sql));
    }
    expect(pinned.prepare<[string], { v: string }>("SELECT ? AS v").get("a")?.v).toBe("a");
    expect(pinned.prepare("SELECT ? AS v").source).toBe("SELECT +? AS v");
  });
});

describe("the SQLite backend's statements", () => {
  it("are all pinned: enqueue, claim (plain and laned), complete, fail, list, stats, events", async () => {
    const backend: Backend = new SqliteBackend({ path: await temp.file("jobs.db") });
    closeAfterTest.push(backend);
    const sources = new Set(
      await statementsRun(async () => {
        await backend.enqueue([0, 1, 2].map((i) => buildJobSpec({ queue: "plain", name: "job", data: { i } })));
        await backend.enqueue(
          [0, 1, 2, 3].map((i) => buildJobSpec({ queue: "laned", name: "job", data: { i }, options: { group: { key: `g${i % 2}`, concurrency: 5 } } })),
        );
        await backend.setQueueLimits("laned", { rate: { max: 100, durationMs: 1_000 }, maxRunning: 10, maxRunningPerName: {} });
        const claimed = await backend.claim({ queues: ["plain", "laned"], names: ["job"], limit: 10, leaseMs: 60_000, worker: WORKER });
        expect(claimed.length).toBe(7);
        await backend.complete(claimed.slice(0, 5).map((c) => ({ lease: c.lease, result: null })));
        await backend.fail(claimed.slice(5).map((c) => ({ lease: c.lease, error: { name: "Error", message: "no", stack: null }, retryDelayMs: null })));
        await backend.list({ queue: "plain", state: "completed" }, { limit: 10 });
        await backend.stats();
        await backend.readEvents!("0", 100);
      }),
    );
    expect(sources.size).toBeGreaterThan(15);
    const bare = [...sources].filter((source) => parameterPositions(source).some((at) => source[at - 1] !== "+"));
    expect(bare).toEqual([]);
  });

  it("a listing by a state with a partial index of its own keeps that index (the state is written in, not bound)", async () => {
    const backend = new SqliteBackend({ path: await temp.file("jobs.db") });
    closeAfterTest.push(backend);
    const sources = await statementsRun(() => backend.list({ queue: "q", state: "waiting-children" }, { limit: 10 }));
    const list = [...sources].find((source) => source.includes("ORDER BY seq"))!;
    expect(list).toContain("state = 'waiting-children'");
    const db = new Database(backend.description.slice("sqlite:".length), { readonly: true });
    closeAfterTest.push(db);
    const plan = (db.prepare(`EXPLAIN QUERY PLAN ${list}`).all("q", 10, 0) as Array<{ detail: string }>).map((row) => row.detail);
    expect(plan.join("\n")).toContain("conveyor_jobs_waiting_children");
  });
});
