/** The dashboard mounted in a user's own Fastify app, under prefixes, over real HTTP. */
import Fastify, { type FastifyInstance } from "fastify";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { conveyorHttp, hashApiKey } from "../../src/http/index.js";
import { buildDashboardBundle } from "../helpers/dashboard-bundle.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs();
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});
afterAll(() => temp.removeAll());

const KEY = `cvk_${"k".repeat(30)}`;

async function mount(): Promise<string> {
  const backend = new SqliteBackend({ path: await temp.file("jobs.db") });
  const app: FastifyInstance = Fastify();
  app.get("/", async () => "the user's own route");
  await app.register(conveyorHttp, {
    prefix: "/ops",
    backend,
    apiKeys: [{ id: "ops", sha256: hashApiKey(KEY), scopes: ["read"] }],
    dashboard: { path: "/board" },
  });
  await app.listen({ port: 0, host: "127.0.0.1" });
  closers.push(async () => {
    await app.close();
    await backend.close();
  });
  return `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
}

// The bundle the dashboard serves; without it (a fresh clone, no build) its assets answer 503.
beforeAll(() => buildDashboardBundle(), 120_000);

describe("dashboard in your own Fastify app", () => {
  it("serves under the app's prefix and its own path, and its session works on the API", async () => {
    const base = await mount();
    expect(await (await fetch(`${base}/`)).text()).toBe("the user's own route");
    expect((await fetch(`${base}/ops/board`, { redirect: "manual" })).headers.get("location")).toBe("/ops/board/");
    const page = await fetch(`${base}/ops/board/`);
    expect(page.status).toBe(200);
    const session = (await (await fetch(`${base}/ops/board/api/session`)).json()) as { apiBasePath: string; principal: unknown; authRequired: boolean };
    expect(session).toMatchObject({ apiBasePath: "/ops/v1", principal: null, authRequired: true });

    expect(
      (
        await fetch(`${base}/ops/board/api/login`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ key: "wrong-key-wrong-key" }),
        })
      ).status,
    ).toBe(401);
    const login = await fetch(`${base}/ops/board/api/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ key: KEY }),
    });
    expect(login.status).toBe(200);
    const setCookie = login.headers.get("set-cookie")!;
    expect(setCookie).toMatch(/^conveyor_session=s1\.[\w-]+\.[\w-]{43}; Path=\/; HttpOnly; SameSite=Strict; Max-Age=43200$/);
    const cookie = setCookie.split(";")[0]!;
    const { csrfToken } = (await login.json()) as { csrfToken: string };

    // The cookie stands for the key: it reads, and its missing admin scope is still missing.
    expect((await fetch(`${base}/ops/v1/queues`, { headers: { cookie } })).status).toBe(200);
    expect((await fetch(`${base}/ops/v1/queues`)).status).toBe(401);
    expect((await fetch(`${base}/ops/v1/queues/q/pause`, { method: "POST", headers: { cookie, "x-csrf-token": csrfToken } })).status).toBe(403);
    const live = await fetch(`${base}/ops/board/api/live?topic=overview`, { headers: { cookie } });
    expect(live.headers.get("content-type")).toMatch(/text\/event-stream/);
    const reader = (live.body as ReadableStream<Uint8Array>).getReader();
    let text = "";
    while (!text.includes("event: snapshot")) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    await reader.cancel();
    expect(text).toMatch(/event: snapshot\ndata: \{"queues":\[\]\}/);

    // Logging out needs the CSRF token too, and then the cookie is dead.
    expect((await fetch(`${base}/ops/board/api/logout`, { method: "POST", headers: { cookie } })).status).toBe(403);
    expect((await fetch(`${base}/ops/board/api/logout`, { method: "POST", headers: { cookie, "x-csrf-token": csrfToken } })).status).toBe(204);
    expect((await fetch(`${base}/ops/v1/queues`, { headers: { cookie } })).status).toBe(401);
  });
});

describe("dashboard errors", () => {
  it("answers bad input with problem documents, like the API", async () => {
    const base = await mount();
    const login = await fetch(`${base}/ops/board/api/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ key: 42 }),
    });
    expect(login.status).toBe(400);
    expect(login.headers.get("content-type")).toMatch(/application\/problem\+json/);
    const live = await fetch(`${base}/ops/board/api/live?topic=everything`, { headers: { authorization: `Bearer ${KEY}` } });
    expect(live.status).toBe(400);
    expect(((await live.json()) as { detail: string }).detail).toMatch(/topic/);
    const asset = await fetch(`${base}/ops/board/assets/..%2Fplugin.js`);
    expect(asset.status).toBe(404);
  });
});
