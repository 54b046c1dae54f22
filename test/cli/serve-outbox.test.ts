/**
 * `conveyor serve --outbox` / `--outbox-db`: the outbox's set-aside events over the HTTP API of a
 * real `conveyor serve` process (SQLite outbox of --db, and a PostgreSQL outbox in another
 * database); without the flag the routes do not exist; a Redis --db is refused with a usage error.
 */
import Database from "better-sqlite3";
import pg from "pg";
import { afterAll, afterEach, describe, expect, inject, it } from "vitest";
import { send } from "../http/harness.js";
import { runCli, spawnCli, type Spawned } from "../helpers/cli.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const pgUrl = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const schemas = new TestSchemas(pgUrl);
const temp = new TempDirs();
const children: Spawned[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) if (c.child.exitCode === null) c.child.kill("SIGKILL");
  await schemas.dropAll();
});
afterAll(() => temp.removeAll());

async function newKey(spec: string): Promise<{ key: string; flag: string }> {
  const r = await runCli(["serve", "--new-key", spec]);
  expect(r.code).toBe(0);
  return { key: /not stored anywhere\): (\S+)/.exec(r.stdout)![1]!, flag: /--api-key (\S+)/.exec(r.stdout)![1]! };
}

async function serve(args: string[]): Promise<{ child: Spawned; base: string }> {
  const child = spawnCli(["serve", "--port", "0", "--log-level", "warn", "--no-dashboard", ...args]);
  children.push(child);
  const base = await waitFor(() => /conveyor serve on (http:\/\/\S+?)\/v1 /.exec(child.stderr())?.[1], {
    timeoutMs: 30_000,
    description: `the server to start (stderr: ${child.stderr()})`,
  });
  return { child, base };
}

const DEAD_COLUMNS = "(id, topic, key, payload, headers, created_at, failed_at, target, error)";

describe("conveyor serve --outbox", () => {
  it("serves list, show, replay and delete of the SQLite outbox of --db to admin keys only; SIGTERM exits 0", async () => {
    const path = await temp.file("app.db");
    const [admin, reader] = await Promise.all([newKey("ops:admin"), newKey("ro:read")]);
    const { child, base } = await serve(["--db", `sqlite:${path}`, "--outbox", "--api-key", admin.flag, "--api-key", reader.flag]);
    expect(child.stderr()).toMatch(/outbox routes on sqlite conveyor_outbox_dead/);
    // serve migrated the database: the outbox tables exist. A refused event, as a relay sets it aside:
    const db = new Database(path, { timeout: 5_000 });
    try {
      db.prepare(
        `INSERT INTO conveyor_outbox_dead ${DEAD_COLUMNS} VALUES ('ev-1', 'order.created', 'o1', '{"n":1}', '{}', 1700000000000, 1700000001000, 'amqp://h/#x', 'NOT_FOUND - no exchange')`,
      ).run();
      const auth = { authorization: `Bearer ${admin.key}` };

      const list = await send<{ total: number; events: Array<{ id: string; payload: unknown; error: string }> }>(base, "GET", "/v1/outbox/dead", {
        headers: auth,
      });
      expect(list.status).toBe(200);
      expect(list.json).toMatchObject({ total: 1, events: [{ id: "ev-1", payload: { n: 1 }, error: "NOT_FOUND - no exchange" }] });
      expect((await send(base, "GET", "/v1/outbox/dead", { headers: { authorization: `Bearer ${reader.key}` } })).status).toBe(403);
      expect((await send(base, "GET", "/v1/outbox/dead")).status).toBe(401);
      expect((await send(base, "GET", "/v1/outbox/dead/ev-1", { headers: auth })).json).toMatchObject({ id: "ev-1", target: "amqp://h/#x" });
      expect((await send(base, "GET", "/v1/outbox/dead/nope", { headers: auth })).status).toBe(404);
      const spec = await send<{ paths: Record<string, unknown> }>(base, "GET", "/v1/openapi.json", { headers: auth });
      expect(Object.keys(spec.json.paths)).toEqual(expect.arrayContaining(["/outbox/dead", "/outbox/dead/{id}", "/outbox/dead/replay"]));

      const replay = await send(base, "POST", "/v1/outbox/dead/replay", { headers: auth, body: { ids: ["ev-1", "nope"] } });
      expect(replay.json).toEqual({ replayed: ["ev-1"], missing: ["nope"] });
      expect(db.prepare("SELECT id, payload FROM conveyor_outbox").all()).toEqual([{ id: "ev-1", payload: '{"n":1}' }]);

      db.prepare(`INSERT INTO conveyor_outbox_dead ${DEAD_COLUMNS} VALUES ('ev-2', 't', NULL, '[]', NULL, 1, 2, 'redis://h', 'too large')`).run();
      expect((await send(base, "DELETE", "/v1/outbox/dead/ev-2", { headers: auth })).status).toBe(204);
      expect((await send(base, "GET", "/v1/outbox/dead", { headers: auth })).json).toEqual({ events: [], total: 0 });
    } finally {
      db.close();
    }
    child.child.kill("SIGTERM");
    expect(await child.exited).toBe(0);
  });

  it("without --outbox the routes do not exist", async () => {
    const path = await temp.file("app.db");
    const { base } = await serve(["--db", `sqlite:${path}`, "--no-auth"]);
    expect((await send(base, "GET", "/v1/outbox/dead")).status).toBe(404);
  });

  it("--outbox-db serves a PostgreSQL outbox (migrated by serve) beside a SQLite job database", async () => {
    const jobs = await temp.file("jobs.db");
    const schema = schemas.create("serveoutbox");
    const outboxDb = `${pgUrl}${pgUrl.includes("?") ? "&" : "?"}schema=${schema}`;
    const { child, base } = await serve(["--db", `sqlite:${jobs}`, "--outbox-db", outboxDb, "--no-auth"]);
    expect(child.stderr()).toContain(`outbox routes on postgres ${schema}.outbox_dead`);
    const client = new pg.Client({ connectionString: pgUrl });
    await client.connect();
    try {
      await client.query(
        `INSERT INTO "${schema}".outbox_dead ${DEAD_COLUMNS} VALUES ('ev-pg', 'invoice.paid', 'c7', '{"amount":12}', '{}', 1700000000000, 1700000001000, 'amqp://h/#x', 'refused')`,
      );
      expect((await send(base, "GET", "/v1/outbox/dead")).json).toMatchObject({ total: 1, events: [{ id: "ev-pg", key: "c7", payload: { amount: 12 } }] });
      expect((await send(base, "POST", "/v1/outbox/dead/replay", { body: { ids: ["ev-pg"] } })).json).toEqual({ replayed: ["ev-pg"], missing: [] });
      expect((await client.query(`SELECT id FROM "${schema}".outbox`)).rows).toEqual([{ id: "ev-pg" }]);
    } finally {
      await client.end();
    }
  });

  it("refuses --outbox on a Redis database with a usage error that says where an outbox lives", async () => {
    const r = await runCli(["serve", "--db", "redis://127.0.0.1:1", "--outbox", "--no-auth"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--outbox \(the database of --db\): the outbox lives in PostgreSQL/);
  });
});
