/**
 * What the conformance suite cannot check through the Backend interface alone: transactional
 * enqueue and completion against the caller's own SQL, LISTEN/NOTIFY across connections,
 * migrations racing from many processes, the real database clock, and recovery from killed
 * connections and a server restart while a Worker runs.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { openBackend } from "../../src/backend/open.js";
import { PostgresBackend, SchemaOutdatedError, SchemaTooNewError, type PostgresBackendOptions } from "../../src/backend/postgres/index.js";
import { latestVersion, migrate } from "../../src/backend/postgres/migrate.js";
import { FakeClock } from "../../src/core/clock.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { InvalidInputError, Queue, silentLogger, Worker, type Handlers, type Logger } from "../../src/index.js";
import { ROOT, runCli } from "../helpers/cli.js";
import { findPostgresBin, startThrowawayPostgres } from "../helpers/postgres.js";
import { postgresTestStores } from "../helpers/postgres-stores.js";
import { expectServerClock } from "../helpers/skewed-clock.js";
import { waitFor } from "../helpers/wait-for.js";
import { FULL_STORE_FEATURES } from "../../src/backend/contract.js";

const stores = postgresTestStores({}, { adminConnections: 4 });
const { url, schemas, admin, closeAfterTest } = stores;
const childrenOfTest: ChildProcess[] = [];

// Registered after the stores, so it runs before they close (vitest runs afterEach hooks last first).
afterEach(() => {
  for (const child of childrenOfTest.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
});

/** A migrated backend on a fresh schema (or `schema`), closed after the test. */
const backend = (options: Partial<PostgresBackendOptions> = {}) => stores.open(options);

/** A worker closed (quickly) after the test. */
function worker(b: PostgresBackend, handlers: Handlers, options: Partial<ConstructorParameters<typeof Worker>[0]> = {}): Worker {
  const w = new Worker({ backend: b, queues: "q", logger: silentLogger, handlers, ...options });
  closeAfterTest({ close: () => w.close({ graceMs: 1_000 }) });
  return w;
}

/** Collects every queue a backend's subscribers hear about. */
function wakeLog(b: PostgresBackend): string[] {
  const woken: string[] = [];
  const stop = b.subscribe((queue) => woken.push(queue));
  closeAfterTest({ close: async () => stop() });
  return woken;
}

/** Waits until `woken` has heard of `queue` (one enqueue to it proves the LISTEN connection is up). */
async function heard(woken: readonly string[], queue: string): Promise<void> {
  await waitFor(() => woken.includes(queue), { timeoutMs: 15_000, description: `a wake-up for queue ${queue}` });
}

/** Enqueues probes through `via` until `woken` hears one: the LISTEN connection is up. */
async function listening(woken: readonly string[], via: PostgresBackend): Promise<void> {
  const probe = `probe-${randomBytes(3).toString("hex")}`;
  await waitFor(
    async () => {
      await via.enqueue([buildJobSpec({ queue: probe, name: "probe", data: null })]);
      return woken.includes(probe);
    },
    { timeoutMs: 15_000, intervalMs: 100, description: "the LISTEN connection to be up" },
  );
}

function table(schema: string, name: string): string {
  return `${pg.escapeIdentifier(schema)}.${pg.escapeIdentifier(name)}`;
}

function recordingLogger(): Logger & { entries: Array<{ level: string; message: string }> } {
  const entries: Array<{ level: string; message: string }> = [];
  return {
    entries,
    info: (_f, message) => entries.push({ level: "info", message }),
    warn: (_f, message) => entries.push({ level: "warn", message }),
    error: (_f, message) => entries.push({ level: "error", message }),
  };
}

describe("transactional enqueue ({ tx })", () => {
  it("a job added in a transaction that rolls back never exists and wakes nobody", async () => {
    const b = await backend();
    const other = await backend({ schema: b.schema });
    const woken = wakeLog(other);
    await listening(woken, b);
    const queue = new Queue("txq", { backend: b });

    const client = await admin.connect();
    try {
      await client.query("BEGIN");
      expect(await queue.add("job", { n: 1 }, { jobId: "rolled-back", tx: client })).toEqual({ id: "rolled-back", duplicate: false });
      // Inside the transaction the row is there; outside it is not.
      const inside = await client.query(`SELECT count(*)::int AS n FROM ${table(b.schema, "jobs")} WHERE id = 'rolled-back'`);
      expect(inside.rows[0]).toEqual({ n: 1 });
      expect(await b.get("rolled-back")).toBeNull();
      await client.query("ROLLBACK");
    } finally {
      client.release();
    }
    expect(await b.get("rolled-back")).toBeNull();
    // Notifications arrive in commit order: once this later one is heard, a rolled-back one
    // would have been heard before it.
    await new Queue("control", { backend: b }).add("job", null);
    await heard(woken, "control");
    expect(woken).not.toContain("txq");
  });

  it("a job added in a transaction appears when it commits, and only then wakes an idle worker", async () => {
    const b = await backend();
    const other = await backend({ schema: b.schema });
    const started: string[] = [];
    // Polling every ten minutes: only a wake-up can start the job within this test.
    worker(other, { job: (job) => void started.push(job.id) }, { queues: "txq", pollIntervalMs: 600_000 });
    const woken = wakeLog(other);
    await listening(woken, b);

    const client = await admin.connect();
    try {
      await client.query("BEGIN");
      await client.query(`CREATE TABLE ${table(b.schema, "orders")} (id text PRIMARY KEY)`);
      await client.query(`INSERT INTO ${table(b.schema, "orders")} (id) VALUES ('o-1')`);
      await new Queue("txq", { backend: b }).add("job", { orderId: "o-1" }, { jobId: "receipt:o-1", tx: client });
      await new Queue("control", { backend: b }).add("job", null);
      await heard(woken, "control");
      expect(woken).not.toContain("txq");
      expect(await b.get("receipt:o-1")).toBeNull();
      expect(started).toEqual([]);
      await client.query("COMMIT");
    } finally {
      client.release();
    }
    await waitFor(() => started.includes("receipt:o-1"), { timeoutMs: 15_000, description: "the committed job to start" });
    await waitFor(async () => (await b.get("receipt:o-1"))?.state === "completed", { description: "the job to complete" });
    const { rows } = await admin.query(`SELECT id FROM ${table(b.schema, "orders")}`);
    expect(rows).toEqual([{ id: "o-1" }]);
  });

  it("takes any { query(text, params) } client, also one that resolves to bare rows, and reports duplicates", async () => {
    const b = await backend();
    const client = await admin.connect();
    try {
      // The shape an adapter for another driver may have: rows, not a pg result.
      const tx = { query: async (text: string, params?: unknown[]): Promise<unknown[]> => (await client.query<Record<string, unknown>>(text, params)).rows };
      await client.query("BEGIN");
      const queue = new Queue("q", { backend: b });
      const results = await queue.addBulk(
        [
          { name: "job", data: 1, options: { jobId: "a" } },
          { name: "job", data: 2, options: { jobId: "b" } },
          { name: "job", data: 3, options: { jobId: "a" } },
        ],
        { tx },
      );
      expect(results).toEqual([
        { id: "a", duplicate: false },
        { id: "b", duplicate: false },
        { id: "a", duplicate: true },
      ]);
      await client.query("COMMIT");
    } finally {
      client.release();
    }
    expect((await b.get("a"))?.data).toBe(1);
    expect(await b.list()).toHaveLength(2);
  });

  it("refuses a tx that is not a client, naming what it needs", async () => {
    const b = await backend();
    const error = await new Queue("q", { backend: b }).add("job", null, { tx: { execute: () => null } }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidInputError);
    expect((error as Error).message).toMatch(/query\(text, params\)/);
    expect(await b.list()).toEqual([]);
  });
});

describe("wake-ups (LISTEN/NOTIFY)", () => {
  it("sends one NOTIFY per enqueue call and queue with runnable jobs, however large the batch", async () => {
    const b = await backend();
    const listener = new pg.Client({ connectionString: url });
    await listener.connect();
    const heardQueues: string[] = [];
    listener.on("notification", (n) => heardQueues.push(n.payload ?? ""));
    try {
      await listener.query(`LISTEN ${pg.escapeIdentifier(`${b.schema}_wake`)}`);
      await b.enqueue([
        ...Array.from({ length: 100 }, () => buildJobSpec({ queue: "one", name: "job", data: null })),
        ...Array.from({ length: 50 }, () => buildJobSpec({ queue: "two", name: "job", data: null })),
        // Not runnable yet: nobody to wake.
        buildJobSpec({ queue: "later", name: "job", data: null, options: { delayMs: 60_000 } }),
      ]);
      await b.enqueue([buildJobSpec({ queue: "last", name: "job", data: null })]);
      await waitFor(() => heardQueues.includes("last"), { description: "the last notification" });
      expect(heardQueues.slice(0, 2).sort()).toEqual(["one", "two"]);
      expect(heardQueues.slice(2)).toEqual(["last"]);
    } finally {
      await listener.end();
    }
  });

  it("the last unsubscribe hands the LISTEN connection back to the pool, no longer listening; a new subscribe listens again", async () => {
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    closeAfterTest({ close: () => pool.end() });
    const b = new PostgresBackend({ pool, schema: schemas.create(), logger: silentLogger });
    closeAfterTest(b);
    await b.migrate();
    const other = await backend({ schema: b.schema });

    const first: string[] = [];
    const stopFirst = b.subscribe((q) => first.push(q));
    await listening(first, other);
    stopFirst();
    const heardBeforeUnsubscribe = first.length;
    // Both connections of the pool, whichever held the LISTEN: neither listens any more.
    await waitFor(
      async () => {
        const clients = await Promise.all([pool.connect(), pool.connect()]);
        try {
          const channels = await Promise.all(clients.map((c) => c.query("SELECT pg_listening_channels() AS channel")));
          return channels.every((r) => r.rows.length === 0);
        } finally {
          for (const c of clients) c.release();
        }
      },
      { description: "the LISTEN connection to be back in the pool, unlistened" },
    );

    const second = wakeLog(b);
    await listening(second, other);
    // The unsubscribed listener heard nothing more.
    expect(first).toHaveLength(heardBeforeUnsubscribe);
  });

  it("the LISTEN connection comes back after pg_terminate_backend, and the worker picks up work enqueued meanwhile", async () => {
    const app = `conveyor-listen-${randomBytes(4).toString("hex")}`;
    const b = await backend({ applicationName: app });
    const other = await backend({ schema: b.schema });
    const woken = wakeLog(b);
    await listening(woken, other);

    const { rows } = await admin.query<{ n: number }>("SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = $1", [
      app,
    ]);
    expect(rows[0]!.n).toBeGreaterThanOrEqual(1);
    // Enqueued from another backend while b's LISTEN connection is down or coming back: either
    // the NOTIFY reaches the new connection, or the look for runnable queues after reconnecting
    // finds the job.
    await other.enqueue([buildJobSpec({ queue: "after-kill", name: "job", data: null })]);
    await heard(woken, "after-kill");
    await other.enqueue([buildJobSpec({ queue: "after-reconnect", name: "job", data: null })]);
    await heard(woken, "after-reconnect");
  });
});

describe("migrations", () => {
  async function versions(schema: string): Promise<Array<{ version: number; file: string }>> {
    const { rows } = await admin.query<{ version: number; file: string }>(`SELECT version, file FROM ${table(schema, "migrations")} ORDER BY version`);
    return rows;
  }

  it("migrating twice is a no-op: every migration recorded once, data kept", async () => {
    const schema = schemas.create();
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    closeAfterTest({ close: () => pool.end() });
    const quoted = pg.escapeIdentifier(schema);
    const first = await migrate(pool, schema, quoted);
    expect(first).toEqual(Array.from({ length: latestVersion() }, (_, i) => i + 1));
    const recorded = await versions(schema);
    expect(recorded.map((r) => r.version)).toEqual(first);
    expect(recorded[0]!.file).toBe("0001_init.sql");

    const b = await backend({ schema });
    await b.enqueue([buildJobSpec({ queue: "q", name: "job", data: { keep: true }, options: { jobId: "kept" } })]);
    expect(await migrate(pool, schema, quoted)).toEqual([]);
    await b.migrate();
    expect(await versions(schema)).toEqual(recorded);
    expect((await b.get("kept"))?.data).toEqual({ keep: true });
  });

  it("eight backends migrating one fresh schema at once apply each migration exactly once", async () => {
    const schema = schemas.create();
    const many = Array.from({ length: 8 }, () => {
      const b = new PostgresBackend({ connectionString: url, schema, logger: silentLogger, poolSize: 1 });
      closeAfterTest(b);
      return b;
    });
    await Promise.all(many.map((b) => b.migrate()));
    expect((await versions(schema)).map((r) => r.version)).toEqual(Array.from({ length: latestVersion() }, (_, i) => i + 1));
    // Every one of them is usable.
    await many[0]!.enqueue([buildJobSpec({ queue: "q", name: "job", data: null, options: { jobId: "x" } })]);
    for (const b of many) expect((await b.get("x"))?.id).toBe("x");
  });

  it("refuses a schema newer than this code, at migrate() and at first use, saying what to do", async () => {
    const b = await backend();
    await admin.query(`INSERT INTO ${table(b.schema, "migrations")} (version, file) VALUES ($1, '9999_from_the_future.sql')`, [latestVersion() + 1]);
    const older = new PostgresBackend({ connectionString: url, schema: b.schema, logger: silentLogger });
    closeAfterTest(older);
    await expect(older.migrate()).rejects.toThrow(SchemaTooNewError);
    await expect(older.get("x")).rejects.toThrow(/newer than this Conveyor knows.*upgrade conveyor/);
    await expect(older.claim({ queues: ["q"], names: ["job"], worker: { id: "w", host: "h", pid: 1 }, limit: 1, leaseMs: 1_000 })).rejects.toThrow(
      SchemaTooNewError,
    );
  });

  it("a backend used before its schema exists says to migrate", async () => {
    const b = new PostgresBackend({ connectionString: url, schema: schemas.create(), logger: silentLogger });
    closeAfterTest(b);
    const error = await b.stats().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaOutdatedError);
    expect((error as Error).message).toMatch(/backend\.migrate\(\)|conveyor migrate/);
    // After migrating, the same instance works.
    await b.migrate();
    expect(await b.stats()).toEqual([]);
  });

  it("gives the jobs table fillfactor and autovacuum settings for a high-churn table", async () => {
    const b = await backend();
    const { rows } = await admin.query<{ reloptions: string[] }>("SELECT reloptions FROM pg_class WHERE oid = to_regclass($1)", [
      `${pg.escapeIdentifier(b.schema)}.jobs`,
    ]);
    expect(rows[0]!.reloptions).toEqual(expect.arrayContaining(["fillfactor=80", "autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=5000"]));
  });
});

describe("transactional completion (ctx.tx)", () => {
  async function markerTable(schema: string): Promise<string> {
    const name = table(schema, "markers");
    await admin.query(`CREATE TABLE ${name} (job_id text NOT NULL, attempt int NOT NULL)`);
    return name;
  }

  it("the handler's writes commit with the completion; a handler that throws has its writes rolled back", async () => {
    const b = await backend();
    const markers = await markerTable(b.schema);
    worker(b, {
      job: async (job, ctx) => {
        const tx = await ctx.tx();
        await tx.query(`INSERT INTO ${markers} (job_id, attempt) VALUES ($1, $2)`, [job.id, job.attempt]);
        if ((job.data as { failFirst: boolean }).failFirst && job.attempt === 1) throw new Error("after writing");
        return { attempt: job.attempt };
      },
    });
    await new Queue("q", { backend: b, defaults: { backoff: { type: "fixed", delayMs: 0 } } }).addBulk([
      { name: "job", data: { failFirst: false }, options: { jobId: "ok" } },
      { name: "job", data: { failFirst: true }, options: { jobId: "retried" } },
    ]);
    await waitFor(async () => (await b.stats("q"))[0]?.counts.completed === 2, { timeoutMs: 15_000, description: "both jobs completed" });
    const { rows } = await admin.query(`SELECT job_id, attempt FROM ${markers} ORDER BY job_id`);
    expect(rows).toEqual([
      { job_id: "ok", attempt: 1 },
      { job_id: "retried", attempt: 2 },
    ]);
    expect((await b.get("retried"))?.history.map((h) => h.outcome)).toEqual(["failed", "completed"]);
  });

  it(
    "a worker killed after its handler wrote through ctx.tx but before the commit: the write never lands, the retry applies it once",
    { timeout: 60_000 },
    async () => {
      const b = await backend();
      const markers = await markerTable(b.schema);
      await b.enqueue([buildJobSpec({ queue: "tx", name: "marker", data: null, options: { jobId: "charge-1" } })]);

      const child = spawn(process.execPath, ["--import", "tsx", "test/helpers/postgres-worker.ts", url, b.schema, "1500"], {
        cwd: ROOT,
        env: { ...process.env, CONVEYOR_FAILPOINTS: "after-handler" },
        stdio: ["ignore", "pipe", "pipe"],
      });
      childrenOfTest.push(child);
      let stderr = "";
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
      const exit = await new Promise<string | number | null>((resolve) => child.on("exit", (code, signal) => resolve(signal ?? code)));
      expect(exit, stderr).toBe("SIGKILL");
      expect(stderr).toContain("failpoint after-handler reached");

      // The handler ran and wrote, but its transaction died with the process.
      expect((await admin.query(`SELECT * FROM ${markers}`)).rows).toEqual([]);
      expect(await b.get("charge-1")).toMatchObject({ state: "active", attempt: 1 });

      // Its lease (1.5 s, database clock) expires; the rescuer hands the job to the next worker.
      await waitFor(async () => (await b.rescueExpired()).length === 1, { timeoutMs: 20_000, intervalMs: 200, description: "the lease to expire" });
      const w = new Worker({
        backend: b,
        queues: "tx",
        logger: silentLogger,
        maintenance: false,
        handlers: {
          marker: async (job, ctx) => {
            const tx = await ctx.tx();
            await tx.query(`INSERT INTO ${markers} (job_id, attempt) VALUES ($1, $2)`, [job.id, job.attempt]);
            return { wrote: job.attempt };
          },
        },
      });
      closeAfterTest(w);
      await waitFor(async () => (await b.get("charge-1"))?.state === "completed", { timeoutMs: 15_000, description: "the retry to complete" });
      expect((await admin.query(`SELECT job_id, attempt FROM ${markers}`)).rows).toEqual([{ job_id: "charge-1", attempt: 2 }]);
      const job = await b.get("charge-1");
      expect(job?.history.map((h) => h.outcome)).toEqual(["lease-expired", "completed"]);
      expect(job?.result).toEqual({ wrote: 2 });
    },
  );
});

describe("settling a job kept for 0 ms while another transaction changes it", () => {
  // complete.sql and fail.sql find such jobs first and delete them in a second step; a change
  // committed between the statement's snapshot and its delete must be rechecked against the lease
  // the settle presents, as the update path is: a re-claim (a new lease token), or a cancel (the
  // token kept, the state changed).
  const changes = {
    "a re-claim (a new lease token)": "lease_token = lease_token + 1",
    "a cancel (the token kept)": "state = 'cancelled'",
  };
  for (const settle of ["complete", "fail"] as const) {
    for (const [change, assignment] of Object.entries(changes)) {
      it(`${settle}: ${change} committed while the ${settle} waits on the row makes it stale, and the job stays`, async () => {
        const app = `conveyor-kept-0-${randomBytes(4).toString("hex")}`;
        const b = await backend({ applicationName: app });
        await b.enqueue([
          buildJobSpec({ queue: "q", name: "job", data: null, options: { jobId: "kept-0", removeOnComplete: true, removeOnFail: true, attempts: 1 } }),
        ]);
        const [claimed] = await b.claim({ queues: ["q"], names: ["job"], worker: { id: "w", host: "h", pid: 1 }, limit: 1, leaseMs: 60_000 });
        const other = new pg.Client({ connectionString: url });
        await other.connect();
        try {
          await other.query("BEGIN");
          await other.query(`UPDATE ${table(b.schema, "jobs")} SET ${assignment} WHERE id = 'kept-0'`);
          const settled =
            settle === "complete"
              ? b.complete([{ lease: claimed!.lease, result: null }])
              : b.fail([{ lease: claimed!.lease, error: { name: "Error", message: "late", stack: null }, retryDelayMs: null }]);
          await waitFor(
            async () => (await admin.query("SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", [app])).rows.length === 1,
            { timeoutMs: 10_000, description: `the ${settle} to wait on the row` },
          );
          await other.query("COMMIT");
          expect(await settled).toEqual(["stale"]);
        } finally {
          await other.end();
        }
        expect(await b.get("kept-0")).not.toBeNull();
      });
    }
  }
});

describe("faults", () => {
  /** Runs `total` jobs through a worker, calling `disrupt` once `at` of them completed. */
  async function runThrough(b: PostgresBackend, total: number, disruptions: Array<{ at: number; disrupt: () => Promise<void> }>): Promise<Map<string, number>> {
    const runs = new Map<string, number>();
    await b.enqueue(Array.from({ length: total }, (_, i) => buildJobSpec({ queue: "q", name: "job", data: { i }, options: { jobId: `job-${i}` } })));
    let completed = 0;
    const w = worker(
      b,
      {
        job: async (job) => {
          runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
          await new Promise((r) => setTimeout(r, 2));
          return null;
        },
      },
      { concurrency: 10, leaseMs: 3_000, pollIntervalMs: 100, maintenance: { rescueIntervalMs: 250 }, logger: recordingLogger() },
    );
    w.on("job:completed", () => completed++);
    for (const { at, disrupt } of disruptions) {
      await waitFor(() => completed >= at, { timeoutMs: 30_000, description: `${at} jobs completed` });
      await disrupt();
    }
    await waitFor(
      async () => {
        const counts = (await b.stats("q"))[0]?.counts;
        return counts !== undefined && counts.completed === total && counts.active === 0 && counts.waiting === 0 && counts.scheduled === 0;
      },
      { timeoutMs: 45_000, intervalMs: 100, description: `all ${total} jobs completed` },
    );
    return runs;
  }

  it("a connection of Conveyor's pool dying while checked out, between two queries, fails its next query and does not end the process", async () => {
    const b = await backend();
    // The pool Conveyor opened (its Client class is pool-client.ts'): a connection taken out of it has no
    // listener of the pool's, as while a transaction or a new connection's SET runs.
    const pool = (b as unknown as { pool: pg.Pool }).pool;
    const client = await pool.connect();
    // An "error" event nobody listens to is thrown: in a socket's handler, that ends the process.
    expect(() => client.emit("error", new Error("a lost connection"))).not.toThrow();
    const { rows } = await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
    const ended = new Promise((resolve) => client.once("end", resolve));
    await admin.query("SELECT pg_terminate_backend($1)", [rows[0]!.pid]);
    await ended;
    await expect(client.query("SELECT 1")).rejects.toThrow();
    client.release(new Error("terminated"));
    // The pool opens another connection; the store goes on.
    await b.enqueue([buildJobSpec({ queue: "q", name: "job", data: null })]);
    expect((await b.stats("q"))[0]?.counts.waiting).toBe(1);
  });

  it("pg_terminate_backend of every connection mid-run: the worker reconnects, no job is lost or left active", { timeout: 90_000 }, async () => {
    const app = `conveyor-fault-${randomBytes(4).toString("hex")}`;
    const logger = recordingLogger();
    const b = await backend({ applicationName: app, poolSize: 4, logger });
    const terminate = async () => {
      const { rows } = await admin.query<{ n: number }>("SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = $1", [
        app,
      ]);
      expect(rows[0]!.n).toBeGreaterThanOrEqual(1);
    };
    const total = 600;
    const runs = await runThrough(b, total, [
      { at: 100, disrupt: terminate },
      { at: 300, disrupt: terminate },
      { at: 450, disrupt: terminate },
    ]);
    expect(runs.size).toBe(total);
    const completed = await b.list({ queue: "q", state: "completed" }, { limit: 1_000 });
    expect(completed).toHaveLength(total);
    // At least once: a job whose acknowledgement was cut off ran again, and completed once.
    for (const job of completed) expect(job.history.at(-1)?.outcome).toBe("completed");
    // The faults were real: the worker's LISTEN connection was among the ones killed.
    expect(logger.entries.map((e) => e.message)).toContain("PostgreSQL LISTEN connection unavailable; reconnecting (workers poll meanwhile)");
  });

  it.skipIf(Boolean(process.env.DATABASE_URL))(
    "a PostgreSQL restart mid-run: the worker reconnects, no job is lost or left active [needs a throwaway server, not DATABASE_URL]",
    { timeout: 120_000 },
    async () => {
      const bin = await findPostgresBin();
      if (bin === null) throw new Error("no PostgreSQL binaries to start a server of our own");
      const server = await startThrowawayPostgres({ bin, database: "restart" });
      closeAfterTest({ close: () => server.stop() });
      const b = new PostgresBackend({ connectionString: server.url, schema: "restart_test", logger: silentLogger });
      closeAfterTest(b);
      await b.migrate();
      const woken = wakeLog(b);
      const total = 400;
      const runs = await runThrough(b, total, [{ at: 150, disrupt: () => server.restart() }]);
      expect(runs.size).toBe(total);
      // The LISTEN connection is back too.
      const other = new PostgresBackend({ connectionString: server.url, schema: "restart_test", logger: silentLogger });
      closeAfterTest(other);
      await other.enqueue([buildJobSpec({ queue: "after-restart", name: "job", data: null })]);
      await heard(woken, "after-restart");
    },
  );
});

describe("PostgresBackend", () => {
  it("uses the database clock when no clock is injected, not this process's", async () => {
    const b = await backend();
    const serverNow = async () =>
      Number((await admin.query<{ ms: string }>("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::text AS ms")).rows[0]!.ms);
    // This process's clock runs a day ahead; the server's does not.
    await expectServerClock(b, serverNow);
  });

  it("runs on the caller's pool and leaves it open on close", async () => {
    const pool = new pg.Pool({ connectionString: url, max: 3 });
    closeAfterTest({ close: () => pool.end() });
    const b = new PostgresBackend({ pool, schema: schemas.create(), logger: silentLogger });
    await b.migrate();
    const woken = wakeLog(b);
    await b.enqueue([buildJobSpec({ queue: "q", name: "job", data: null, options: { jobId: "p" } })]);
    await heard(woken, "q");
    const [c] = await b.claim({ queues: ["q"], names: ["job"], worker: { id: "w", host: "h", pid: 1 }, limit: 1, leaseMs: 1_000 });
    expect(await b.complete([{ lease: c!.lease, result: "done" }])).toEqual(["applied"]);
    await b.close();
    expect((await pool.query<{ one: number }>("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
    // The LISTEN connection went back to the pool without its LISTEN.
    expect(pool.totalCount).toBeLessThanOrEqual(3);
    expect(b.description).toMatch(/^postgres:/);
  });

  it("logs nothing about its connections once closed, when the server ends them as they close", async () => {
    // pg's Pool.end() resolves once its connections are told to end, before their sockets close:
    // a server ending them meanwhile (a dropped database, a restart) made the closed backend log
    // "an idle PostgreSQL connection failed; the pool replaces it", about 2 of 5 connections a time.
    const logger = recordingLogger();
    const schema = schemas.create();
    for (let round = 0; round < 5; round++) {
      const applicationName = `close-${randomBytes(4).toString("hex")}`;
      const b = new PostgresBackend({ connectionString: url, schema, logger, applicationName });
      await b.migrate();
      await Promise.all(Array.from({ length: 5 }, () => b.stats()));
      await b.close();
      await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", [applicationName]);
    }
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(logger.entries).toEqual([]);
  });

  it("with preparedStatements: false runs the same statements unprepared", async () => {
    const b = await backend({ preparedStatements: false });
    await b.enqueue([buildJobSpec({ queue: "q", name: "job", data: { x: 1 }, options: { jobId: "u" } })]);
    const [c] = await b.claim({ queues: ["q"], names: ["job"], worker: { id: "w", host: "h", pid: 1 }, limit: 5, leaseMs: 1_000 });
    expect(c?.job).toMatchObject({ id: "u", data: { x: 1 }, state: "active" });
    expect(await b.complete([{ lease: c!.lease, result: null }])).toEqual(["applied"]);
  });

  it("refuses bad options with messages that say what is expected", () => {
    expect(() => new PostgresBackend({})).toThrow(/exactly one of \{ connectionString \} or \{ pool \}/);
    const pool = new pg.Pool({ connectionString: url });
    expect(() => new PostgresBackend({ connectionString: url, pool })).toThrow(/exactly one/);
    void pool.end();
    expect(() => new PostgresBackend({ connectionString: url, schema: "Bad-Name" })).toThrow(/schema must be/);
    expect(() => new PostgresBackend({ connectionString: url, poolSize: 0 })).toThrow(/poolSize must be/);
  });

  it("describes itself by host and database, never by password", () => {
    const b = new PostgresBackend({ connectionString: "postgres://app:s3cret@db.internal:6543/jobs", logger: silentLogger });
    closeAfterTest(b);
    expect(b.description).toBe("postgres://app@db.internal:6543/jobs schema=conveyor");
  });

  it("openBackend opens postgres:// URLs migrated, with the schema from ?schema=", async () => {
    const schema = schemas.create();
    const b = await openBackend(`${url}?schema=${schema}`);
    closeAfterTest(b);
    expect(b).toBeInstanceOf(PostgresBackend);
    expect((b as PostgresBackend).schema).toBe(schema);
    expect(b.capabilities).toEqual({
      ...FULL_STORE_FEATURES,
      transactionalEnqueue: true,
      crossProcessWakeups: true,
      multiProcess: true,
      transactionalCompletion: true,
      claimAcrossQueues: "merged",
      flows: "across-queues",
      eventLog: true,
      jobFlowKeys: true,
      completeAndClaim: true,
      claimMarksBuffered: true,
    });
    await b.enqueue([buildJobSpec({ queue: "q", name: "job", data: null })]);
    expect((await b.stats("q"))[0]?.counts.waiting).toBe(1);
  });

  it("`conveyor migrate --db postgres://…` creates the schema, and running it again changes nothing", { timeout: 60_000 }, async () => {
    const schema = schemas.create();
    const db = `${url}?schema=${schema}`;
    for (let i = 0; i < 2; i++) {
      const { code, stdout, stderr } = await runCli(["migrate", "--db", db]);
      expect(code, stderr).toBe(0);
      expect(stdout).toContain(`schema=${schema}: schema is up to date`);
    }
    const { rows } = await admin.query(`SELECT version FROM ${table(schema, "migrations")}`);
    expect(rows).toHaveLength(latestVersion());
  });

  it("rescues into dead a job kept forever (removeOnFail: false) whose attempts ran out, and keeps it", async () => {
    const clock = new FakeClock();
    const b = await backend({ clock });
    await b.enqueue([buildJobSpec({ queue: "q", name: "job", data: null, options: { jobId: "kept", attempts: 1, removeOnFail: false } })]);
    await b.claim({ queues: ["q"], names: ["job"], worker: { id: "w", host: "h", pid: 1 }, limit: 1, leaseMs: 1_000 });
    clock.advance(1_001);
    expect(await b.rescueExpired()).toMatchObject([{ id: "kept", state: "dead" }]);
    expect(await b.rescueExpired()).toEqual([]);
    clock.advance(365 * 24 * 3_600_000);
    expect(await b.prune({ maxDeadPerQueue: 0 })).toEqual({ jobs: 0, idempotencyKeys: 0 });
    expect(await b.get("kept")).toMatchObject({ state: "dead", finishedAt: expect.any(Number) as number });
  });

  it("prune never deletes a job replayed while it was deciding what to delete", async () => {
    const clock = new FakeClock();
    const app = `conveyor-prune-${randomBytes(4).toString("hex")}`;
    const b = await backend({ clock, applicationName: app });
    for (const jobId of ["d1", "d2", "d3"]) {
      await b.enqueue([buildJobSpec({ queue: "q", name: "job", data: null, options: { jobId, attempts: 1 } })]);
      const [c] = await b.claim({ queues: ["q"], names: ["job"], worker: { id: "w", host: "h", pid: 1 }, limit: 1, leaseMs: 1_000 });
      await b.fail([{ lease: c!.lease, error: { name: "E", message: "x", stack: null }, retryDelayMs: null }]);
      clock.advance(1);
    }
    // A replay of d1 (the oldest: beyond a count of 1) in flight in another transaction.
    const replaying = await admin.connect();
    try {
      await replaying.query("BEGIN");
      await replaying.query(`UPDATE ${table(b.schema, "jobs")} SET state = 'waiting', expires_at = NULL, finished_at = NULL WHERE id = 'd1'`);
      const pruning = b.prune({ maxDeadPerQueue: 1 });
      await waitFor(
        async () => (await admin.query("SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", [app])).rows.length === 1,
        { description: "prune to wait for the replayed row" },
      );
      await replaying.query("COMMIT");
      expect(await pruning).toEqual({ jobs: 1, idempotencyKeys: 0 });
    } finally {
      replaying.release();
    }
    expect((await b.get("d1"))?.state).toBe("waiting");
    expect(await b.get("d2")).toBeNull();
    expect((await b.get("d3"))?.state).toBe("dead");
  });

  it("stores a batch of 20,000 jobs in one call, in input order", async () => {
    const b = await backend();
    const specs = Array.from({ length: 20_000 }, (_, i) => buildJobSpec({ queue: "q", name: "job", data: { i } }));
    const results = await b.enqueue(specs);
    expect(results.every((r) => !r.duplicate)).toBe(true);
    expect((await b.stats("q"))[0]?.counts.waiting).toBe(20_000);
    const [first] = await b.claim({ queues: ["q"], names: ["job"], worker: { id: "w", host: "h", pid: 1 }, limit: 1, leaseMs: 1_000 });
    expect(first?.job.data).toEqual({ i: 0 });
  });
});

describe("heartbeat racing a cancel", () => {
  it("reports cancelled, not expired, when the cancel commits while the heartbeat waits on the row", async () => {
    const schema = schemas.create();
    // Its own application_name, so the wait below is this backend's heartbeat and not a session
    // of another test file waiting on some lock of its own on the shared server.
    const app = `conveyor-hb-cancel-${randomBytes(4).toString("hex")}`;
    const b = await backend({ schema, applicationName: app });
    await b.enqueue([buildJobSpec({ queue: "q", name: "n", data: {} })]);
    const [claimed] = await b.claim({ queues: ["q"], names: ["n"], worker: { id: "w", host: "h", pid: 1 }, limit: 1, leaseMs: 60_000 });
    // A transaction cancels the job and holds the row lock; the heartbeat queues behind it, and
    // its statement snapshot predates the cancel.
    const client = await admin.connect();
    try {
      await client.query("BEGIN");
      await client.query(`UPDATE "${schema}".jobs SET state = 'cancelled', lease_expires_at = NULL WHERE id = $1`, [claimed!.job.id]);
      const heartbeat = b.heartbeat([claimed!.lease], 60_000);
      await waitFor(
        async () =>
          ((await admin.query<{ n: string }>("SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND application_name = $1", [app]))
            .rows[0]?.n ?? "0") !== "0",
        { description: "the heartbeat waiting on the row lock" },
      );
      await client.query("COMMIT");
      expect(await heartbeat).toEqual({ lost: [{ lease: claimed!.lease, reason: "cancelled" }] });
    } finally {
      client.release();
    }
  });
});
