/**
 * PostgreSQL only: a claim that names one queue runs claim-one.sql, claim.sql with its search of
 * the named queues replaced by one walk of that queue (docs/performance-postgres.md, "Session
 * 32"). These tests hold it to claim.sql: built from it, sent where it should be, and claiming
 * the same jobs with the same marks in every case the search decides (paused, under flow limits
 * or not, other names, priorities, due and future scheduled jobs, keyed jobs, a limit, buffered
 * marks). Its plans beside a deep backlog and a large delayed set are checked with claim.sql's
 * in postgres-performance.test.ts.
 */
import pg from "pg";
import { describe, expect, it } from "vitest";
import { oneQueueClaimText, PostgresBackend } from "../../src/backend/postgres/backend.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { postgresTestStores } from "../helpers/postgres-stores.js";
import { CLAIM_PARAMETER_TYPES, nodes, statementsOf, type PlanNode } from "../helpers/postgres-plans.js";

const stores = postgresTestStores({ poolSize: 2 });
const { url } = stores;
const backend = () => stores.open();

const job = (queue: string, options: Parameters<typeof buildJobSpec>[0]["options"] = {}, name = "job") => buildJobSpec({ queue, name, data: null, options });
const worker = { id: "w", host: "h", pid: 1 };

/** The names of the prepared statements the backend sends from now on (statement prefix left off). */
function sentStatements(b: PostgresBackend): string[] {
  const sent: string[] = [];
  const { pool, statementPrefix } = b as unknown as { pool: pg.Pool; statementPrefix: string };
  const query = pool.query.bind(pool) as (config: pg.QueryConfig) => Promise<unknown>;
  (pool as unknown as { query: (config: pg.QueryConfig) => Promise<unknown> }).query = (config) => {
    if (config.name?.startsWith(statementPrefix) === true) sent.push(config.name.slice(statementPrefix.length));
    return query(config);
  };
  return sent;
}

describe("claim-one.sql (PostgreSQL)", () => {
  it("is claim.sql with its search of the named queues replaced, and refuses a claim.sql without the lines that bound it", () => {
    const claim = [
      "-- head",
      "WITH params AS (SELECT 1),",
      "-- ── the named queues' waiting jobs: …",
      "many AS (SELECT 2),",
      "-- ── end of the named queues' waiting jobs ──",
      "due AS (SELECT 3)",
      "SELECT 4",
    ].join("\n");
    expect(oneQueueClaimText("-- one\n{{claim_head}}\nwaiting AS (SELECT 5),\n{{claim_tail}}", claim)).toBe(
      "-- one\n-- head\nWITH params AS (SELECT 1),\nwaiting AS (SELECT 5),\ndue AS (SELECT 3)\nSELECT 4",
    );
    expect(() => oneQueueClaimText("{{claim_head}}{{claim_tail}}", "SELECT 1")).toThrow(/claim-one\.sql/);
    // A template without one of its placeholders, or with one twice, is refused too (not left unfilled).
    expect(() => oneQueueClaimText("{{claim_head}}", claim)).toThrow(/\{\{claim_tail\}\} exactly once/);
    expect(() => oneQueueClaimText("{{claim_head}}{{claim_head}}{{claim_tail}}", claim)).toThrow(/\{\{claim_head\}\} exactly once/);
    // The end before the start: refused too.
    const swapped = ["-- ── end of the named queues' waiting jobs ──", "-- ── the named queues' waiting jobs"].join("\n");
    expect(() => oneQueueClaimText("{{claim_head}}{{claim_tail}}", swapped)).toThrow(/claim-one\.sql/);
    // The shipped claim.sql holds both lines once: the backend builds it on construction.
    const b = new PostgresBackend({ connectionString: url });
    try {
      const one = statementsOf(b)["claim-one"]!;
      const code = one.replace(/--.*$/gm, "");
      expect(code).not.toContain("waiting_queues");
      // Its own walk of the queue locks what it takes, skipping rows other claimers hold.
      expect(code).toMatch(/waiting AS MATERIALIZED \([^;]*?LIMIT \(SELECT lim FROM params\)\s+FOR UPDATE SKIP LOCKED\s+\),/);
      expect(
        one
          .split(/\bRETURNING\b/)
          .at(-1)!
          .trim(),
      ).toBe(
        statementsOf(b)
          .claim!.split(/\bRETURNING\b/)
          .at(-1)!
          .trim(),
      );
    } finally {
      void b.close();
    }
  });

  // A limited queue's claim runs claim-one.sql too (flow.ts), inside the flow path's transaction.
  it("runs for a claim and a complete-and-claim of one queue; claim.sql for several", async () => {
    const b = await backend();
    await b.enqueue([job("a"), job("a"), job("a"), job("b")]);
    const sent = sentStatements(b);
    const [first] = await b.claim({ queues: ["a"], names: ["job"], worker, limit: 1, leaseMs: 30_000 });
    await b.completeAndClaim([{ lease: first!.lease, result: null }], { queues: ["a"], names: ["job"], worker, limit: 1, leaseMs: 30_000 });
    await b.claim({ queues: ["a", "b"], names: ["job"], worker, limit: 5, leaseMs: 30_000 });
    expect(sent.filter((name) => /claim/.test(name))).toEqual(["claim-one", "complete-and-claim-one", "claim"]);
  });

  it("claims what claim.sql claims for one queue, with the same buffered marks, in every case its search decides", async () => {
    const b = await backend();
    const s = pg.escapeIdentifier(b.schema);
    // q: waiting jobs of three priorities and another name, a due scheduled job, a future one.
    await b.enqueue([
      job("q", { priority: 5 }),
      job("q", { priority: 1 }),
      job("q", { priority: 5 }),
      job("q", { priority: 0 }),
      job("q", {}, "other"),
      job("q", { delayMs: 1 }),
      job("q", { delayMs: 86_400_000 }),
    ]);
    // paused: a waiting and a due job; limited: under flow limits; keyed: a job with a group (a lane).
    await b.enqueue([job("paused"), job("paused", { delayMs: 1 }), job("limited"), job("limited", { delayMs: 1 })]);
    await b.pause("paused");
    await b.setQueueLimits("limited", { rate: null, maxRunning: 5, maxRunningPerName: {} });
    await b.enqueue([job("keyed", { group: { key: "g", concurrency: 2 } }), job("keyed")]);
    await new Promise((resolve) => setTimeout(resolve, 5));

    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query(`PREPARE many(${CLAIM_PARAMETER_TYPES}) AS ${statementsOf(b).claim}`);
      await client.query(`PREPARE one(${CLAIM_PARAMETER_TYPES}) AS ${statementsOf(b)["claim-one"]}`);
      const now = Number((await client.query<{ now: string }>(`SELECT ${s}.now_ms(NULL) AS now`)).rows[0]!.now);
      /** The ids a statement claims (sorted) with their buffered marks, rolled back after. */
      const claimWith = async (statement: "many" | "one", queue: string, names: string[], limit: number, flowChecked: boolean, startsAtOnce: number | null) => {
        await client.query("BEGIN");
        try {
          const q = pg.escapeLiteral(queue);
          const { rows } = await client.query<{ id: string; marked_buffered: boolean }>(
            `EXECUTE ${statement}(${now}, ARRAY[${q}], ARRAY[${names.map((n) => pg.escapeLiteral(n)).join(", ")}], ${limit}, 30000, 'w', 'h', 1, ${flowChecked}, ${startsAtOnce ?? "NULL"}, ${q}, ${q})`,
          );
          return rows.map((r) => `${r.id}${r.marked_buffered ? " (buffered)" : ""}`).sort();
        } finally {
          await client.query("ROLLBACK");
        }
      };
      const cases: Array<[string, string[], number, boolean, number | null, number]> = [
        // queue, names, limit, flow_checked, starts_at_once, jobs claimed
        ["q", ["job"], 10, false, null, 5],
        ["q", ["job", "other"], 10, false, null, 6],
        ["q", ["job"], 3, false, null, 3],
        ["q", ["job"], 10, false, 2, 5],
        ["q", ["other"], 10, false, 0, 1],
        ["q", ["nothing"], 10, false, null, 0],
        ["paused", ["job"], 10, false, null, 0],
        ["limited", ["job"], 10, false, null, 0],
        ["limited", ["job"], 10, true, null, 2],
        // A laned queue: its keyed job is the lane path's (flow-claim-lanes.sql), its unkeyed one claimable here.
        ["keyed", ["job"], 10, false, null, 0],
        ["keyed", ["job"], 10, true, null, 1],
        ["absent", ["job"], 10, false, null, 0],
      ];
      // Each case in both plans: the custom one a connection's first five executions get, and the
      // generic one it keeps after.
      for (const mode of ["force_custom_plan", "force_generic_plan"]) {
        await client.query(`SET plan_cache_mode = ${mode}`);
        for (const [queue, names, limit, flowChecked, startsAtOnce, count] of cases) {
          const label = `${queue} ${names.join(",")} limit ${limit} flow_checked ${flowChecked} starts_at_once ${startsAtOnce} (${mode})`;
          const many = await claimWith("many", queue, names, limit, flowChecked, startsAtOnce);
          expect(many, label).toHaveLength(count);
          expect(await claimWith("one", queue, names, limit, flowChecked, startsAtOnce), label).toEqual(many);
        }
      }
      // Rows another claimer holds are skipped alike: its transaction locks q's best waiting job
      // (priority 0) and the due one; both statements take the next ones.
      const holder = new pg.Client({ connectionString: url });
      await holder.connect();
      try {
        await holder.query("BEGIN");
        await holder.query(`SELECT 1 FROM ${s}.jobs WHERE queue = 'q' AND (priority = 0 OR state = 'scheduled' AND run_at <= $1) FOR UPDATE`, [now]);
        for (const limit of [2, 10]) {
          const many = await claimWith("many", "q", ["job"], limit, false, null);
          expect(many, `held, limit ${limit}`).toHaveLength(Math.min(limit, 3));
          expect(await claimWith("one", "q", ["job"], limit, false, null), `held, limit ${limit}`).toEqual(many);
        }
      } finally {
        await holder.query("ROLLBACK");
        await holder.end();
      }
      // The marks fell where claim.sql puts them: after the first two in claim order.
      const marked = await claimWith("one", "q", ["job"], 10, false, 2);
      expect(marked.filter((m) => m.endsWith("(buffered)"))).toHaveLength(3);
    } finally {
      await client.end();
    }
  });

  // With statistics over many queues, `queue = <one of them>` is estimated at a few rows: the
  // plan must still walk jobs_claim in claim order rather than sort the deep queue's backlog.
  it("walks a deep queue's first jobs, not its backlog, beside a thousand small queues, in both plans", async () => {
    const b = await backend();
    const s = pg.escapeIdentifier(b.schema);
    await b.enqueue([job("q"), job("small")]);
    const { rows: columns } = await stores.admin.query<{ c: string }>(
      "SELECT column_name AS c FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'jobs' AND column_name NOT IN ('id', 'seq', 'queue') ORDER BY ordinal_position",
      [b.schema],
    );
    const list = columns.map((r) => pg.escapeIdentifier(r.c));
    const copy = (from: string, queue: string, n: number) =>
      stores.admin.query(
        `INSERT INTO ${s}.jobs (id, queue, ${list.join(", ")}) SELECT j.id || '-' || g, ${queue}, ${list.map((c) => `j.${c}`).join(", ")} FROM ${s}.jobs j, generate_series(1, $2::int) g WHERE j.queue = $1`,
        [from, n],
      );
    await copy("q", "'q'", 20_000);
    await copy("small", "'small-' || (g % 1000)", 2_000);
    await stores.admin.query(`VACUUM ANALYZE ${s}.jobs`);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query("SET jit = off");
      await client.query(`PREPARE one(${CLAIM_PARAMETER_TYPES}) AS ${statementsOf(b)["claim-one"]}`);
      for (const mode of ["force_generic_plan", "force_custom_plan"]) {
        await client.query(`SET plan_cache_mode = ${mode}`);
        await client.query("BEGIN");
        const { rows } = await client.query<{ "QUERY PLAN": Array<{ Plan: PlanNode }> }>(
          "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE one(NULL, '{q}', '{job}', 10, 30000, 'w', 'h', 1, false, NULL, 'q', 'q')",
        );
        await client.query("ROLLBACK");
        const all = nodes(rows[0]!["QUERY PLAN"][0]!.Plan);
        expect(all.find((n) => n["Node Type"] === "ModifyTable")!["Actual Rows"], mode).toBe(10);
        const scans = all.filter((n) => n["Index Name"] !== undefined || n["Relation Name"] === "jobs");
        expect(
          Math.max(...scans.map((n) => n["Actual Rows"] ?? 0)),
          `${mode}: ${JSON.stringify(scans.map((n) => [n["Node Type"], n["Index Name"], n["Actual Rows"]]))}`,
        ).toBeLessThanOrEqual(20);
        expect(
          all.find((n) => n["Index Name"] === "jobs_claim"),
          mode,
        ).toBeDefined();
      }
    } finally {
      await client.end();
    }
  });
});
