/**
 * The outbox's set-aside events over HTTP (admin routes, added when the plugin gets `outbox`):
 * list, show, replay, delete; 404 and 400 answered as problems, never 5xx; read keys refused.
 */
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { createServer } from "../../src/http/app.js";
import { OutboxDeadLetters } from "../../src/outbox/dead.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs();
afterAll(() => temp.removeAll());

describe("HTTP /v1/outbox/dead", () => {
  it("lists, shows, replays and deletes set-aside events; admin only", async () => {
    const path = await temp.file("app.db");
    const backend = new SqliteBackend({ path });
    const db = new Database(path);
    const insert = db.prepare(
      `INSERT INTO conveyor_outbox_dead (id, topic, key, payload, headers, created_at, failed_at, target, error) VALUES (?, 'order.created', 'o1', '{"n":1}', '{"trace-id":"t"}', 1700000000000, ?, 'amqp://h:5672/#x', 'no queue is bound')`,
    );
    insert.run("ev-a", 1700000001000);
    insert.run("ev-b", 1700000002000);
    const app = await createServer({
      backend,
      logger: false,
      apiKeys: [
        { id: "ops", key: "k-admin-0123456789abcdef", scopes: ["admin"] },
        { id: "ro", key: "k-read-0123456789abcdef00", scopes: ["read"] },
      ],
      outbox: OutboxDeadLetters.sqlite(db),
    });
    const admin = { authorization: "Bearer k-admin-0123456789abcdef" };
    try {
      const list = await app.inject({ method: "GET", url: "/v1/outbox/dead", headers: admin });
      expect(list.statusCode).toBe(200);
      expect(list.json()).toMatchObject({
        total: 2,
        events: [{ id: "ev-b", payload: { n: 1 }, headers: { "trace-id": "t" }, error: "no queue is bound" }, { id: "ev-a" }],
      });
      expect((await app.inject({ method: "GET", url: "/v1/outbox/dead", headers: { authorization: "Bearer k-read-0123456789abcdef00" } })).statusCode).toBe(
        403,
      );
      expect((await app.inject({ method: "GET", url: "/v1/outbox/dead?limit=0", headers: admin })).statusCode).toBe(400);
      expect((await app.inject({ method: "GET", url: "/v1/outbox/dead/ev-a", headers: admin })).json()).toMatchObject({
        id: "ev-a",
        target: "amqp://h:5672/#x",
      });
      expect((await app.inject({ method: "GET", url: "/v1/outbox/dead/nope", headers: admin })).statusCode).toBe(404);
      expect((await app.inject({ method: "POST", url: "/v1/outbox/dead/replay", headers: admin, payload: { ids: [] } })).statusCode).toBe(400);

      const replay = await app.inject({ method: "POST", url: "/v1/outbox/dead/replay", headers: admin, payload: { ids: ["ev-a", "nope"] } });
      expect(replay.json()).toEqual({ replayed: ["ev-a"], missing: ["nope"] });
      expect(db.prepare("SELECT id, payload FROM conveyor_outbox").all()).toEqual([{ id: "ev-a", payload: '{"n":1}' }]);

      expect((await app.inject({ method: "DELETE", url: "/v1/outbox/dead/ev-b", headers: admin })).statusCode).toBe(204);
      expect((await app.inject({ method: "DELETE", url: "/v1/outbox/dead/ev-b", headers: admin })).statusCode).toBe(404);
      expect((await app.inject({ method: "GET", url: "/v1/outbox/dead", headers: admin })).json()).toEqual({ events: [], total: 0 });
    } finally {
      await app.close();
      db.close();
      await backend.close();
    }
  });
});
