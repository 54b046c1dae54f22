/**
 * PostgreSQL's laned claim (groups, limiter keys) and the jobs without a lane in such a queue.
 * jobs_claim holds only jobs without a lane (migration flow_unkeyed_claim), so the laned read
 * (flow-read-lanes.sql) walks a laned queue's unkeyed jobs alone instead of its keyed ones: these
 * tests check that it finds them behind any backlog of keyed jobs and reads no keyed row to do
 * it, that no unkeyed job is ever left unclaimable when the queue turns laned around it (an
 * enqueue racing the queue's first keyed job, one held open in a caller's transaction, a retry of
 * a job started before), that stats() still sees keyed jobs, and that the migration upgrades a
 * schema holding waiting unkeyed jobs of laned queues.
 */
import pg from "pg";
import { afterAll, afterEach, describe, expect, inject, it } from "vitest";
import { PostgresBackend } from "../../src/backend/postgres/index.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { silentLogger, type Clock } from "../../src/index.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";
import { migrateUpTo } from "../helpers/postgres-migrations.js";
import { nodes, statementsOf, type PlanNode } from "../helpers/postgres-plans.js";

const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const schemas = new TestSchemas(url);
const admin = new pg.Pool({ connectionString: url, max: 2 });
const toClose: Array<{ close(): Promise<unknown> }> = [];

afterEach(async () => {
  for (const c of toClose.splice(0).reverse()) await c.close();
  await schemas.dropAll();
});
afterAll(() => admin.end());

async function backend(schema: string, clock?: Clock): Promise<PostgresBackend> {
  const b = new PostgresBackend({ connectionString: url, schema, logger: silentLogger, ...(clock === undefined ? {} : { clock }) });
  toClose.push(b);
  await b.migrate();
  return b;
}

type Options = Parameters<typeof buildJobSpec>[0]["options"];
const job = (queue: string, options: Options = {}) => buildJobSpec({ queue, name: "job", data: null, options });
const keyed = (queue: string, group: string, options: Options = {}) => job(queue, { group: { key: group, concurrency: 1_000 }, ...options });
const worker = { id: "w", host: "h", pid: 1 };

/** Claims `limit` jobs of `queue` and returns their ids. */
async function claimIds(b: PostgresBackend, queue: string, limit: number): Promise<string[]> {
  return (await b.claim({ queues: [queue], names: ["job"], worker, limit, leaseMs: 60_000 })).map((c) => c.job.id);
}

/** Claims and completes every job of `queue` (up to `most` claims), returning the ids in claim order. */
async function drain(b: PostgresBackend, queue: string, most = 1_000): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < most; i++) {
    const got = await b.claim({ queues: [queue], names: ["job"], worker, limit: 50, leaseMs: 60_000 });
    if (got.length === 0) break;
    await b.complete(got.map((c) => ({ lease: c.lease, result: null })));
    ids.push(...got.map((c) => c.job.id));
  }
  return ids;
}

describe("a laned queue's unkeyed jobs (PostgreSQL)", () => {
  it("are claimed in their turn behind any backlog of keyed jobs, and the read walks no keyed job to find them", async () => {
    const schema = schemas.create();
    const b = await backend(schema);
    // 600 keyed jobs in two groups, then three unkeyed ones: in claim order the unkeyed jobs
    // come after every keyed one (the read used to look at the first 256 only).
    for (let i = 0; i < 3; i++) await b.enqueue(Array.from({ length: 200 }, (_, k) => keyed("q", k % 2 === 0 ? "a" : "b")));
    const unkeyed = (await b.enqueue([job("q"), job("q"), job("q")])).map((r) => r.id);
    await admin.query(`VACUUM ANALYZE ${pg.escapeIdentifier(schema)}.jobs`);

    // The read a claim of 6 makes, explained: no scan of jobs returns more rows than the claim
    // could take (the old look-ahead returned 256 keyed rows; a sort of the backlog, 603).
    const sql = statementsOf(b)["flow-read-lanes"]!;
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query("BEGIN");
      const heads = Array.from({ length: 9 }, (_, lanes) => (lanes <= 4 ? 6 : Math.ceil(6 / lanes) + 2));
      const { rows } = await client.query<{ "QUERY PLAN": Array<{ Plan: PlanNode }> }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${sql}`, [
        "q",
        Date.now(),
        8,
        ["job"],
        heads,
        6,
        "q\nk:",
      ]);
      await client.query("ROLLBACK");
      const waitingScans = nodes(rows[0]!["QUERY PLAN"][0]!.Plan).filter(
        (n) => n["Relation Name"] === "jobs" && n["Index Name"] !== "jobs_lanes" && n["Index Name"] !== "jobs_active",
      );
      expect(waitingScans.length).toBeGreaterThan(0);
      for (const scan of waitingScans) expect({ index: scan["Index Name"], rows: scan["Actual Rows"]! * scan["Actual Loops"]! }).toMatchObject({ rows: 3 });
      // The lane walk probes jobs_lanes with plain index scans: an index-only scan steps slowly
      // over the entries claimed jobs leave at the head of each lane until a vacuum.
      const laneScans = nodes(rows[0]!["QUERY PLAN"][0]!.Plan).filter((n) => n["Index Name"] === "jobs_lanes");
      expect(laneScans.length).toBeGreaterThan(0);
      expect(laneScans.filter((n) => n["Node Type"] !== "Index Scan")).toEqual([]);
    } finally {
      await client.end();
    }

    // Lanes in turn: the unkeyed jobs ("") first, then a, then b: a claim of 6 takes two of each.
    const first = await claimIds(b, "q", 6);
    expect(first.filter((id) => unkeyed.includes(id))).toHaveLength(2);
    const rest = await drain(b, "q");
    expect([...first, ...rest].sort()).toEqual(
      (await admin.query<{ id: string }>(`SELECT id FROM ${pg.escapeIdentifier(schema)}.jobs ORDER BY id`)).rows.map((r) => r.id),
    );
  });

  it("are never left unclaimable while their queue turns laned: racing enqueues, one held in a caller's transaction, a retry", async () => {
    const schema = schemas.create();
    const b = await backend(schema);
    const s = pg.escapeIdentifier(schema);
    // A job started before the queue had keys, to be retried after.
    await b.enqueue([job("q")]);
    const [started] = await b.claim({ queues: ["q"], names: ["job"], worker, limit: 1, leaseMs: 60_000 });
    // An unkeyed enqueue in a caller's transaction, open across the queue's first keyed job: it
    // read the queue as it was before (no keys) and commits after.
    const heldPool = new pg.Pool({ connectionString: url, max: 1 });
    const held = await heldPool.connect();
    try {
      await held.query("BEGIN");
      const heldId = (await b.enqueue([job("q")], { tx: held }))[0]!.id;
      // Twenty unkeyed batches racing the first keyed enqueues, on the backend's pool.
      const racing = await Promise.all([
        ...Array.from({ length: 20 }, () => b.enqueue([job("q"), job("q"), job("q")])),
        b.enqueue([keyed("q", "a"), keyed("q", "b")]),
        ...Array.from({ length: 20 }, () => b.enqueue([job("q"), keyed("q", "c")])),
      ]);
      await held.query("COMMIT");
      const lanes = await admin.query<{ lanes: boolean }>(`SELECT lanes FROM ${s}.flow_queues WHERE queue = 'q'`);
      expect(lanes.rows).toEqual([{ lanes: true }]);
      // The started job fails and comes back for a retry in the laned queue.
      await b.fail([{ lease: started!.lease, error: { name: "Error", message: "again", stack: null }, retryDelayMs: 0 }]);
      const expected = [heldId, started!.job.id, ...racing.flat().map((r) => r.id)].sort();
      expect(new Set(expected).size).toBe(2 + 20 * 3 + 2 + 20 * 2);
      // A backend of its own: b's view of which queues have flow rows is up to a second old.
      const claimed = await drain(await backend(schema), "q");
      expect(claimed.sort()).toEqual(expected);
      // Nothing left waiting or scheduled.
      const left = await admin.query(`SELECT id, state, lane FROM ${s}.jobs WHERE state IN ('waiting', 'scheduled')`);
      expect(left.rows).toEqual([]);
    } finally {
      held.release();
      await heldPool.end();
    }
  });

  it("stats() counts a laned queue's keyed jobs in the age of the oldest waiting job", async () => {
    let now = 1_000_000;
    const b = await backend(schemas.create(), { now: () => now });
    await b.enqueue([keyed("q", "a", { priority: 1 })]);
    now += 1_000;
    await b.enqueue([keyed("q", "b", { priority: 5 }), job("q", { priority: 0 })]);
    now += 1_000;
    await b.enqueue([keyed("q", "a", { priority: 9 })]);
    now += 4_000;
    // The oldest waiting job is the first keyed one (6 s), older than the unkeyed one (5 s).
    expect((await b.stats("q"))[0]!.oldestWaitingAgeMs).toBe(6_000);
    // A claim of 2 takes lane "" (the unkeyed job) and a's head, the oldest: b's job (priority 5)
    // is the oldest now (5 s), older than a's other one (priority 9, 4 s).
    expect(await claimIds(b, "q", 2)).toHaveLength(2);
    expect((await b.stats("q"))[0]!.oldestWaitingAgeMs).toBe(5_000);
  });
});

describe("keyed jobs enqueued (PostgreSQL)", () => {
  it("are inserted with their lane and flow columns: no entry in jobs_claim, one row version each", async () => {
    const schema = schemas.create();
    const s = pg.escapeIdentifier(schema);
    const b = await backend(schema);
    await admin.query("CREATE EXTENSION IF NOT EXISTS pageinspect");
    // The index entries a relation's only page holds (all of them while it is that small).
    const entries = async (index: string) =>
      Number((await admin.query<{ n: string }>(`SELECT count(*) AS n FROM bt_page_items($1, 1)`, [`${s}.${index}`])).rows[0]!.n);
    // 30 keyed jobs (three groups, one of them also limited by key; one limiter key alone) and
    // 10 unkeyed ones, in one batch.
    const specs = [
      ...Array.from({ length: 20 }, (_, k) => keyed("q", `g${k % 3}`, k % 2 === 0 ? { limiter: { key: "api", max: 1_000, durationMs: 1_000 } } : {})),
      ...Array.from({ length: 10 }, () => job("q", { limiter: { key: "solo", max: 700, durationMs: 2_000 } })),
      ...Array.from({ length: 10 }, () => job("q")),
    ];
    await b.enqueue(specs);
    // Every job is one index entry in the primary key (an update of its lane after the insert
    // left a second one each, and the first in jobs_claim), and only the unkeyed ones are in
    // jobs_claim.
    expect(await entries("jobs_pkey")).toBe(40);
    expect(await entries("jobs_claim")).toBe(10);
    expect(await entries("jobs_lanes")).toBe(30);
    const rows = await admin.query<Record<string, unknown>>(
      `SELECT id, lane, group_key, group_concurrency, limiter_key, limiter_max, limiter_duration_ms FROM ${s}.jobs ORDER BY seq`,
    );
    expect(rows.rows.map(({ id: _id, ...flow }) => flow)).toEqual(
      specs.map((spec) => ({
        lane: spec.flow === undefined ? null : spec.flow.group !== null ? `g:${spec.flow.group.key}` : `k:${spec.flow.limiter!.key}`,
        group_key: spec.flow?.group?.key ?? null,
        group_concurrency: spec.flow?.group?.concurrency ?? null,
        limiter_key: spec.flow?.limiter?.key ?? null,
        limiter_max: spec.flow?.limiter?.max ?? null,
        limiter_duration_ms: spec.flow?.limiter?.durationMs === undefined ? null : String(spec.flow.limiter.durationMs),
      })),
    );
    expect((await admin.query(`SELECT queue, lanes FROM ${s}.flow_queues`)).rows).toEqual([{ queue: "q", lanes: true }]);
    // A second keyed batch, duplicates included, changes nothing it should not; every job is claimed once.
    expect((await b.enqueue([specs[0]!, keyed("q", "g9")])).map((r) => r.duplicate)).toEqual([true, false]);
    expect(await entries("jobs_claim")).toBe(10);
    const claimed = await drain(b, "q");
    expect(claimed).toHaveLength(41);
    expect(new Set(claimed).size).toBe(41);
  });
});

describe("the optimistic laned claim (PostgreSQL)", () => {
  /** Runs `between` once, right after `b`'s next laned read (flow-read-lanes.sql) answers. */
  function afterNextRead(b: PostgresBackend, between: () => Promise<void>): { reads: string[] } {
    const target = b as unknown as { query: (name: string, values: unknown[], on?: unknown) => Promise<unknown[]> };
    const query = target.query.bind(b);
    const seen = { reads: [] as string[], pending: true };
    target.query = async (name, values, on) => {
      const rows = await query(name, values, on);
      if (name.startsWith("flow-") && name !== "flow-queues") seen.reads.push(`${name}${on === undefined ? "" : " (in a transaction)"}`);
      if (name === "flow-read-lanes" && seen.pending) {
        seen.pending = false;
        await between();
      }
      return rows;
    };
    return seen;
  }

  it("claims in two statements without a transaction, and when another claim commits between its read and its claim, claims under the lock: a group's concurrency holds", async () => {
    const schema = schemas.create();
    const s = pg.escapeIdentifier(schema);
    const a = await backend(schema);
    const other = await backend(schema);
    // Group g runs at most 3 at once, whatever the name: a claims jobs named "job", the other
    // backend jobs named "side", so the job it takes is never the one a picked.
    const g = { group: { key: "g", concurrency: 3 } };
    await a.enqueue([
      ...Array.from({ length: 4 }, () => job("q", g)),
      ...Array.from({ length: 2 }, () => buildJobSpec({ queue: "q", name: "side", data: null, options: g })),
    ]);
    const running = async () => Number((await admin.query<{ n: string }>(`SELECT count(*) AS n FROM ${s}.jobs WHERE state = 'active'`)).rows[0]!.n);
    // A first claim under the lock: the queue is laned, so a's next claims try without it.
    expect(await claimIds(a, "q", 1)).toHaveLength(1);
    // Uncontended: the read, then the claim, each on its own (no BEGIN, lock or COMMIT).
    const quiet = afterNextRead(a, async () => {});
    expect(await claimIds(a, "q", 1)).toHaveLength(1);
    expect(quiet.reads).toEqual(["flow-read-lanes", "flow-claim-lanes"]);
    expect(await running()).toBe(2);
    // a's read sees two of g running (room for one), then another backend takes that room
    // before a's claim statement runs.
    let overtaken: string[] = [];
    const contended = afterNextRead(a, async () => {
      overtaken = (await other.claim({ queues: ["q"], names: ["side"], worker, limit: 2, leaseMs: 60_000 })).map((c) => c.job.id);
    });
    const got = await claimIds(a, "q", 2);
    expect(overtaken).toHaveLength(1);
    // a's version check failed: nothing claimed without the lock, and under it the group is full.
    expect(got).toEqual([]);
    expect(await running()).toBe(3);
    expect(contended.reads).toEqual(["flow-read-lanes", "flow-claim-lanes", "flow-lock (in a transaction)", "flow-read-lanes (in a transaction)"]);
  });
});

describe("limiter windows and keyed jobs the code before the optimistic claim left (PostgreSQL)", () => {
  it("are read and claimed: lanes given after the insert, a window holding a start that left it", async () => {
    let now = 10_000_000;
    const schema = schemas.create();
    const s = pg.escapeIdentifier(schema);
    const b = await backend(schema, { now: () => now });
    const bucket = "q\nk:api";
    // Six jobs limited by key "api" (3 per second) as the old enqueue stored them: inserted
    // without flow columns, then given them by an UPDATE (flow-enqueue.sql, gone now).
    const ids = (await b.enqueue(Array.from({ length: 6 }, () => job("q")))).map((r) => r.id);
    await admin.query(`UPDATE ${s}.jobs SET lane = 'k:api', limiter_key = 'api', limiter_max = 3, limiter_duration_ms = 1000`);
    await admin.query(`INSERT INTO ${s}.flow_queues (queue, lanes) VALUES ('q', true)`);
    // The key's window as the old claims left it: a start that has left it (1.5 s ago; the old
    // read forgot such starts, the claim does now) and two 0.5 s ago, all three counted.
    await admin.query(`INSERT INTO ${s}.flow_starts (queue, at, n) VALUES ($1, $2, 1), ($1, $3, 2)`, [bucket, now - 1_500, now - 500]);
    await admin.query(`INSERT INTO ${s}.flow_counts (bucket, n) VALUES ($1, 3)`, [bucket]);
    const windowRows = async () =>
      (await admin.query<{ at: string; n: number }>(`SELECT at, n FROM ${s}.flow_starts WHERE queue = $1 ORDER BY at`, [bucket])).rows.map((r) => [
        Number(r.at) - now,
        r.n,
      ]);
    const counted = async () => (await admin.query<{ n: number }>(`SELECT n FROM ${s}.flow_counts WHERE bucket = $1`, [bucket])).rows[0]!.n;

    // Two starts in the window: room for one (under the lock: the backend's first claim).
    const first = await claimIds(b, "q", 5);
    expect(first).toHaveLength(1);
    expect(await windowRows()).toEqual([
      [-500, 2],
      [0, 1],
    ]);
    expect(await counted()).toBe(3);
    // 0.6 s later the two have left: room for two (without the lock now).
    now += 600;
    const second = await claimIds(b, "q", 5);
    expect(second).toHaveLength(2);
    expect(await windowRows()).toEqual([
      [-600, 1],
      [0, 2],
    ]);
    expect(await counted()).toBe(3);
    now += 1_000;
    const third = await claimIds(b, "q", 5);
    expect(third).toHaveLength(3);
    expect([...first, ...second, ...third].sort()).toEqual([...ids].sort());
    expect(await counted()).toBe(3);
  });
});

describe("queues without lanes (PostgreSQL)", () => {
  it("claim through jobs_claim as before: the walk reads the jobs it takes, not the backlog", async () => {
    const schema = schemas.create();
    const b = await backend(schema);
    for (let i = 0; i < 4; i++) await b.enqueue(Array.from({ length: 500 }, (_, k) => job("plain", { priority: k % 3 })));
    await admin.query(`VACUUM ANALYZE ${pg.escapeIdentifier(schema)}.jobs`);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      // claim.sql, and claim-one.sql: what the backend runs for a claim of one queue.
      for (const name of ["claim", "claim-one"]) {
        const sql = statementsOf(b)[name]!;
        await client.query("BEGIN");
        const { rows } = await client.query<{ "QUERY PLAN": Array<{ Plan: PlanNode }> }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${sql}`, [
          null,
          ["plain"],
          ["job"],
          10,
          30_000,
          "w",
          "h",
          1,
          false,
          null,
          "plain",
          "plain",
        ]);
        await client.query("ROLLBACK");
        // claim.sql says `lane IS NULL` (jobs_claim's predicate since flow_unkeyed_claim): without it
        // the planner cannot use jobs_claim and sorts the 2,000 waiting jobs.
        const walks = nodes(rows[0]!["QUERY PLAN"][0]!.Plan).filter(
          (n) => n["Relation Name"] === "jobs" && n["Index Name"] !== "jobs_pkey" && n["Actual Loops"]! > 0,
        );
        const waiting = walks.filter((n) => n["Index Name"] === "jobs_claim");
        expect(waiting, name).toHaveLength(1);
        expect(waiting[0]!["Actual Rows"], name).toBe(10);
        for (const walk of walks) expect(walk["Actual Rows"]!, name).toBeLessThanOrEqual(10);
      }
    } finally {
      await client.end();
    }
  });
});

describe("migration flow_unkeyed_claim (PostgreSQL)", () => {
  it("upgrades a schema holding waiting unkeyed and keyed jobs of a laned queue: every job is claimed after it", async () => {
    const schema = schemas.create();
    const s = pg.escapeIdentifier(schema);
    await migrateUpTo(admin, schema, "flow_unkeyed_claim");
    // A laned queue as the schema before held it: unkeyed jobs before and after its keyed ones,
    // and a plain queue beside it.
    const add = async (queue: string) => (await admin.query<{ id: string }>(`SELECT ${s}.add_job($1, 'job') AS id`, [queue])).rows[0]!.id;
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await add("q"));
    for (let i = 0; i < 300; i++) {
      const id = await add("q");
      await admin.query(`UPDATE ${s}.jobs SET lane = $2, group_key = $3, group_concurrency = 1000 WHERE id = $1`, [id, `g:${i % 3}`, String(i % 3)]);
      ids.push(id);
    }
    for (let i = 0; i < 5; i++) ids.push(await add("q"));
    await admin.query(`INSERT INTO ${s}.flow_queues (queue, lanes) VALUES ('q', true)`);
    const plain = [await add("plain"), await add("plain")];

    const b = await backend(schema);
    const index = await admin.query<{ indexdef: string }>(`SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'jobs_claim'`, [schema]);
    expect(index.rows[0]!.indexdef).toMatch(/WHERE \(\(state = 'waiting'::text\) AND \(lane IS NULL\)\)/);
    // Lanes in turn ("", g:0, g:1, g:2): a claim of 8 takes two unkeyed jobs.
    const first = await claimIds(b, "q", 8);
    expect(first.filter((id) => ids.slice(0, 5).includes(id) || ids.slice(-5).includes(id))).toHaveLength(2);
    expect([...first, ...(await drain(b, "q"))].sort()).toEqual([...ids].sort());
    expect((await drain(b, "plain")).sort()).toEqual([...plain].sort());
  });
});

describe("a laned claim's lane heads (PostgreSQL)", () => {
  it("are read from the first waiting entry the lane walk found: the read costs no more after many claimed jobs left their entries at each lane's head", async () => {
    const schema = schemas.create();
    const b = await backend(schema);
    for (let i = 0; i < 4; i++) await b.enqueue(Array.from({ length: 500 }, (_, k) => keyed("q", k % 2 === 0 ? "a" : "b")));
    const sql = statementsOf(b)["flow-read-lanes"]!;
    /** Buffers the heads' scans of jobs_lanes (one per lane: `lane = `) read in the read a claim of 6 makes now. */
    const headBuffers = async () => {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        const heads = Array.from({ length: 9 }, (_, lanes) => (lanes <= 4 ? 6 : Math.ceil(6 / lanes) + 2));
        const { rows } = await client.query<{ "QUERY PLAN": Array<{ Plan: PlanNode }> }>(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${sql}`, [
          "q",
          Date.now(),
          8,
          ["job"],
          heads,
          6,
          "q\nk:",
        ]);
        const scans = nodes(rows[0]!["QUERY PLAN"][0]!.Plan).filter((n) => n["Index Name"] === "jobs_lanes" && /lane = /.test(n["Index Cond"] ?? ""));
        expect(scans).toHaveLength(1);
        expect(scans[0]!["Actual Loops"]).toBe(2);
        return scans[0]!["Shared Hit Blocks"]! + scans[0]!["Shared Read Blocks"]!;
      } finally {
        await client.end();
      }
    };
    await drain(b, "q", 2);
    const early = await headBuffers();
    // 1,500 more jobs claimed and completed: their entries stay at the heads of lanes a and b
    // until a vacuum (they take several leaf pages each), and every later read seeks past them.
    await drain(b, "q", 30);
    const late = await headBuffers();
    expect(late).toBeLessThanOrEqual(early + 2);
  });
});

describe("a laned claim's rate windows (PostgreSQL)", () => {
  /**
   * Three claims of 10 of a queue with a rate of `queueMax` per second and five limiter keys of
   * `keyMax` each (six windows), after fifteen claims 100 ms apart filled the windows, on a pool
   * whose statements, nested ones included, send the plans they ran to the client (auto_explain
   * at LOG, client_min_messages log): the scans of flow_starts those three claims made, the rows
   * flow_starts held before and after them, and more claims 100 ms apart on the same clock.
   */
  async function windowScans(
    queueMax: number,
    keyMax: number,
  ): Promise<{ scans: PlanNode[]; storedBefore: number; storedAfter: number; stored: () => Promise<number>; claimNext: () => Promise<number> }> {
    let now = 10_000_000;
    const schema = schemas.create();
    const plans: Array<{ "Query Text": string; Plan: PlanNode }> = [];
    const explained = new pg.Pool({
      connectionString: url,
      max: 2,
      options: [
        "session_preload_libraries=auto_explain",
        "auto_explain.log_min_duration=0",
        "auto_explain.log_analyze=on",
        "auto_explain.log_timing=off",
        "auto_explain.log_nested_statements=on",
        "auto_explain.log_format=json",
        "client_min_messages=log",
      ]
        .map((setting) => `-c ${setting}`)
        .join(" "),
    });
    explained.on("connect", (client) =>
      client.on("notice", (notice) => {
        const json = /plan:\s*(\{[\s\S]*\})\s*$/.exec(notice.message ?? "")?.[1];
        if (json !== undefined) plans.push(JSON.parse(json) as { "Query Text": string; Plan: PlanNode });
      }),
    );
    toClose.push({ close: () => explained.end() });
    const b = new PostgresBackend({ pool: explained, schema, logger: silentLogger, clock: { now: () => now } });
    toClose.push(b);
    await b.migrate();
    // Each claim of 10 starts 10 on the queue's window and 2 on each key's.
    await b.setQueueLimits("q", { rate: { max: queueMax, durationMs: 1_000 }, maxRunning: null, maxRunningPerName: {} });
    await b.enqueue(Array.from({ length: 300 }, (_, k) => job("q", { limiter: { key: `k${k % 5}`, max: keyMax, durationMs: 1_000 } })));
    for (let i = 0; i < 15; i++, now += 100) expect(await claimIds(b, "q", 10)).toHaveLength(10);
    const stored = async () => Number((await admin.query<{ n: string }>(`SELECT count(*) AS n FROM ${pg.escapeIdentifier(schema)}.flow_starts`)).rows[0]!.n);
    const storedBefore = await stored();
    plans.length = 0;
    for (let i = 0; i < 3; i++, now += 100) expect(await claimIds(b, "q", 10)).toHaveLength(10);
    const storedAfter = await stored();
    const scans = plans.flatMap((p) => nodes(p.Plan)).filter((n) => n["Relation Name"] === "flow_starts" && n["Node Type"] !== "ModifyTable");
    expect(scans.filter((n) => n["Node Type"] !== "Index Scan" && n["Node Type"] !== "Index Only Scan").map((n) => n["Node Type"])).toEqual([]);
    const claimNext = async () => {
      const got = (await claimIds(b, "q", 10)).length;
      now += 100;
      return got;
    };
    return { scans, storedBefore, storedAfter, stored, claimNext };
  }
  const loops = (scans: PlanNode[]) => scans.reduce((sum, n) => sum + (n["Actual Loops"] ?? 0), 0);

  it("are read and forgotten one window at a time by plain index scans of flow_starts: no sequential or bitmap scan of the table", async () => {
    // Limits the claims come near (90 of 105 and 18 of 25 in the window at each claim, 100 and
    // 20 stored): per claim and window, its expired starts and its oldest start in the read, its
    // expired starts in the claim.
    const run = await windowScans(105, 25);
    expect(loops(run.scans)).toBe(3 * 6 * 3);
    // Counted exactly, so forgotten on every claim: ten claims' starts in each of the six windows (the last second's).
    expect([run.storedBefore, run.storedAfter]).toEqual([60, 60]);
  });

  it("are not counted exactly when the claim cannot fill them: the read leaves flow_starts alone, the claim forgets once a window length after it last did", async () => {
    const run = await windowScans(100_000, 100_000);
    // The claims at 0 ms (nothing to forget yet) and 1,000 ms (the one at 0 ms) forgot; those
    // at 1,500-1,700 ms neither read nor deleted a start.
    expect(loops(run.scans)).toBe(0);
    expect([run.storedBefore, run.storedAfter]).toEqual([14 * 6, 17 * 6]);
    // 1,800 and 1,900 ms: not yet; 2,000 ms: the starts of 100-1,000 ms go, ten claims' in each window.
    expect(await run.claimNext()).toBe(10);
    expect(await run.claimNext()).toBe(10);
    expect(await run.stored()).toBe(19 * 6);
    expect(await run.claimNext()).toBe(10);
    expect(await run.stored()).toBe(10 * 6);
  });
});

describe("migration flow_window_scans (PostgreSQL)", () => {
  it("upgrades a schema holding a laned queue's limiter window: the window counts exactly and its expired start is forgotten", async () => {
    const schema = schemas.create();
    const s = pg.escapeIdentifier(schema);
    await migrateUpTo(admin, schema, "flow_window_scans");
    const bucket = "q\nk:api";
    // Five jobs limited by key "api" (3 per second) and the key's window as the schema before
    // left it: a start that left the window 0.5 s ago and two inside it, all three counted.
    for (let i = 0; i < 5; i++) {
      const id = (await admin.query<{ id: string }>(`SELECT ${s}.add_job('q', 'job') AS id`)).rows[0]!.id;
      await admin.query(`UPDATE ${s}.jobs SET lane = 'k:api', limiter_key = 'api', limiter_max = 3, limiter_duration_ms = 1000 WHERE id = $1`, [id]);
    }
    await admin.query(`INSERT INTO ${s}.flow_queues (queue, lanes) VALUES ('q', true)`);
    // add_job stamps run_at with the database clock: the injected clock starts after it.
    let now = Date.now() + 1_000;
    await admin.query(`INSERT INTO ${s}.flow_starts (queue, at, n) VALUES ($1, $2, 1), ($1, $3, 2)`, [bucket, now - 1_500, now - 500]);
    await admin.query(`INSERT INTO ${s}.flow_counts (bucket, n) VALUES ($1, 3)`, [bucket]);

    const b = await backend(schema, { now: () => now });
    // Two starts in the window: room for one; the start that left it is gone.
    expect(await claimIds(b, "q", 5)).toHaveLength(1);
    const starts = await admin.query<{ at: string; n: number }>(`SELECT at, n FROM ${s}.flow_starts WHERE queue = $1 ORDER BY at`, [bucket]);
    expect(starts.rows.map((r) => [Number(r.at) - now, r.n])).toEqual([
      [-500, 2],
      [0, 1],
    ]);
    expect((await admin.query<{ n: number }>(`SELECT n FROM ${s}.flow_counts WHERE bucket = $1`, [bucket])).rows[0]!.n).toBe(3);
    // The rest of the second: no room (the claim without the lock now); then two more.
    now += 400;
    expect(await claimIds(b, "q", 5)).toHaveLength(0);
    now += 200;
    expect(await claimIds(b, "q", 5)).toHaveLength(2);
  });
});
