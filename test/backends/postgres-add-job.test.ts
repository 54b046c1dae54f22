/**
 * conveyor.add_job(queue, name, payload, options): enqueueing from SQL applies the rules of the
 * TypeScript enqueue (same option names, defaults, bounds), works from a trigger in the
 * caller's transaction, and refuses bad input with SQLSTATE 22023 naming the option.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { PostgresBackend } from "../../src/backend/postgres/backend.js";
import { InvalidInputError } from "../../src/core/errors.js";
import { silentLogger } from "../../src/core/logger.js";
import { buildJobSpec, type JobOptions } from "../../src/core/spec.js";
import { Queue, Worker } from "../../src/index.js";
import { postgresTestStores } from "../helpers/postgres-stores.js";
import { waitFor } from "../helpers/wait-for.js";

const stores = postgresTestStores({ poolSize: 4 });
const { admin } = stores;
let schema: string;
let backend: PostgresBackend;
const workers: Worker[] = [];

beforeEach(async () => {
  // The stores close the latest first: this table goes after the backend closes, before its schema.
  stores.closeAfterTest({ close: () => admin.query(`DROP TABLE IF EXISTS ${schema}_orders`) });
  backend = await stores.open();
  schema = backend.schema;
});

// Registered after the stores, so it runs before they close (vitest runs afterEach hooks last first).
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.close({ force: true })));
});

const addJob = async (queue: string, name: string, payload: unknown, options: unknown = {}): Promise<string> => {
  const { rows } = await admin.query<{ id: string }>(`SELECT "${schema}".add_job($1, $2, $3::json, $4::jsonb) AS id`, [
    queue,
    name,
    JSON.stringify(payload),
    JSON.stringify(options),
  ]);
  return rows[0]!.id;
};

describe("conveyor.add_job", () => {
  it("enqueues from a trigger, in the transaction of the row that fires it, and a Worker runs the job", async () => {
    const table = `${schema}_orders`;
    await admin.query(`CREATE TABLE ${table} (id int PRIMARY KEY, email text NOT NULL)`);
    await admin.query(`
      CREATE FUNCTION "${schema}".order_created() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM "${schema}".add_job('email', 'order-created', json_build_object('orderId', NEW.id, 'email', NEW.email),
                                    jsonb_build_object('jobId', 'order:' || NEW.id, 'attempts', 5));
        RETURN NEW;
      END $$`);
    await admin.query(`CREATE TRIGGER enqueue_mail AFTER INSERT ON ${table} FOR EACH ROW EXECUTE FUNCTION "${schema}".order_created()`);

    // A rolled-back order enqueues nothing.
    const client = await admin.connect();
    try {
      await client.query("BEGIN");
      await client.query(`INSERT INTO ${table} VALUES (1, 'gone@example.com')`);
      await client.query("ROLLBACK");
    } finally {
      client.release();
    }
    expect(await backend.get("order:1")).toBeNull();

    const ran: unknown[] = [];
    const worker = new Worker({
      backend,
      queues: "email",
      logger: silentLogger,
      pollIntervalMs: 50,
      handlers: {
        "order-created": async (job) => {
          ran.push(job.data);
          return { sent: true };
        },
      },
    });
    workers.push(worker);
    await admin.query(`INSERT INTO ${table} VALUES (2, 'ada@example.com')`);
    await waitFor(async () => (await backend.get("order:2"))?.state === "completed", { timeoutMs: 15_000 });
    const job = (await backend.get("order:2"))!;
    expect(job).toMatchObject({ queue: "email", name: "order-created", maxAttempts: 5, result: { sent: true } });
    expect(ran).toEqual([{ orderId: 2, email: "ada@example.com" }]);
  });

  it("applies the defaults and bounds of queue.add: the same options give the same job", async () => {
    const queue = new Queue("q", { backend });
    const cases: JobOptions[] = [
      {},
      { priority: -5, attempts: 1 },
      { delayMs: 60_000 },
      { backoff: { type: "fixed", delayMs: 250 }, timeoutMs: 5_000 },
      { backoff: { type: "exponential", delayMs: 90_000 } },
      { removeOnComplete: true, removeOnFail: false, meta: { traceparent: "00-abc" } },
      { runAt: 4_102_444_800_000 },
    ];
    for (const options of cases) {
      const fromTs = (await backend.get((await queue.add("n", { a: 1 }, options)).id))!;
      const fromSql = (await backend.get(await addJob("q", "n", { a: 1 }, options)))!;
      const shape = (j: typeof fromTs) => ({
        state: j.state,
        priority: j.priority,
        maxAttempts: j.maxAttempts,
        backoff: j.backoff,
        timeoutMs: j.timeoutMs,
        data: j.data,
        meta: j.meta,
        delay: options.runAt === undefined ? Math.round((j.runAt - j.createdAt) / 1000) : j.runAt,
      });
      expect(shape(fromSql), JSON.stringify(options)).toEqual(shape(fromTs));
      expect(fromSql.id).toMatch(/^[0-9a-hjkmnp-tv-z]{22}$/);
    }
    // Retention is not in the record: read the columns.
    const id = await addJob("q", "n", {}, { removeOnComplete: { ageMs: 5 }, removeOnFail: false });
    const { rows } = await admin.query(`SELECT retain_completed_ms::int, retain_dead_ms::int FROM "${schema}".jobs WHERE id = $1`, [id]);
    expect(rows[0]).toEqual({ retain_completed_ms: 5, retain_dead_ms: null });
    const spec = buildJobSpec({ queue: "q", name: "n", data: {}, options: { removeOnComplete: { ageMs: 5 }, removeOnFail: false } });
    expect([spec.retainCompletedMs, spec.retainDeadMs]).toEqual([5, null]);
    // A duplicate id stores nothing and returns the id.
    await addJob("q", "n", { first: true }, { jobId: "same" });
    expect(await addJob("q", "n", { second: true }, { jobId: "same" })).toBe("same");
    expect((await backend.get("same"))!.data).toEqual({ first: true });
  });

  it("refuses what queue.add refuses, with SQLSTATE 22023 naming the option", async () => {
    const bad: Array<[string, string, unknown, Record<string, unknown>, RegExp]> = [
      ["bad queue!", "n", {}, {}, /queue name/],
      ["q", "", {}, {}, /job name/],
      ["q", "n", {}, { priority: 1.5 }, /option priority must be an integer from -1000000 to 1000000/],
      ["q", "n", {}, { attempts: 0 }, /option attempts/],
      ["q", "n", {}, { delayMs: -1 }, /option delayMs/],
      ["q", "n", {}, { timeoutMs: "soon" }, /option timeoutMs/],
      ["q", "n", {}, { backoff: { type: "linear" } }, /option backoff/],
      ["q", "n", {}, { backoff: { type: "fixed" } }, /option backoff.delayMs/],
      ["q", "n", {}, { removeOnComplete: "yes" }, /option removeOnComplete/],
      ["q", "n", {}, { runAt: 253_402_300_800_000 }, /option runAt/],
      ["q", "n", {}, { jobId: "" }, /option jobId/],
      ["q", "n", {}, { meta: [1] }, /option meta/],
      ["q", "n", {}, { retries: 3 }, /unknown job option "retries"/],
      ["q", "n", { blob: "x".repeat(262_144) }, {}, /over the limit of 262144/],
    ];
    for (const [queue, name, payload, options, message] of bad) {
      expect(() => buildJobSpec({ queue, name, data: payload, options }), JSON.stringify(options)).toThrow(InvalidInputError);
      const error = await addJob(queue, name, payload, options).then(
        () => null,
        (e: unknown) => e as { code?: string; message: string },
      );
      expect(error, JSON.stringify(options)).not.toBeNull();
      expect(error!.code).toBe("22023");
      expect(error!.message).toMatch(message);
    }
    expect(await backend.list({ queue: "q" })).toEqual([]);
  });
});
