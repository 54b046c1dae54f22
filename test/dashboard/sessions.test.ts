/**
 * Dashboard sessions are signed, self-contained cookies: unit checks of the token (expiry,
 * renewal, CSRF, revocation, tampering) with a fake clock, then real servers — several instances
 * over one SQLite file — showing that a login on one instance is accepted by another with the
 * same secret and refused by every other.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { DashboardSessions, readCookie, SESSION_COOKIE, type Session } from "../../src/dashboard/sessions.js";
import { KeyRing, type ApiKeyConfig } from "../../src/http/auth.js";
import { createServer, hashApiKey } from "../../src/http/index.js";
import { TempDirs } from "../helpers/temp.js";

const SECRET = "s".repeat(40);
const OPS_KEY = `cvk_ops_${"o".repeat(30)}`;
const READ_KEY = `cvk_read_${"r".repeat(30)}`;
const KEYS: ApiKeyConfig[] = [
  { id: "ops", sha256: hashApiKey(OPS_KEY), scopes: ["admin"] },
  { id: "reader", sha256: hashApiKey(READ_KEY), scopes: ["read"] },
];

const request = (cookie: string | undefined, method = "GET", headers: Record<string, string> = {}) =>
  ({ method, headers: { ...(cookie ? { cookie } : {}), ...headers }, protocol: "http", host: "127.0.0.1:3000" }) as unknown as FastifyRequest;
const cookieOf = (s: Session) => `other=1; ${SESSION_COOKIE}=${s.token}`;
const ops = () => new KeyRing(KEYS).authenticate(OPS_KEY)!;

describe("DashboardSessions (signed cookies)", () => {
  it("accepts its own token until it expires, renews it with use, and caps it at the maximum lifetime", () => {
    let now = 1_000_000;
    const sessions = new DashboardSessions(new KeyRing(KEYS), { secret: SECRET, idleTimeoutMs: 1000, maxLifetimeMs: 3000 }, () => now);
    const s = sessions.create(ops());
    expect(readCookie(cookieOf(s), SESSION_COOKIE)).toBe(s.token);
    now += 100;
    expect(sessions.check(request(cookieOf(s)))).toMatchObject({ kind: "ok", principal: { id: "ops" }, renewed: null });
    now += 800; // 900 ms in: renewed
    const check = sessions.check(request(cookieOf(s)));
    if (check.kind !== "ok" || !check.renewed) throw new Error(`expected a renewed session, got ${JSON.stringify(check)}`);
    const renewed = check.renewed;
    expect(renewed.expiresAt).toBe(now + 1000);
    expect(renewed.csrfToken).toBe(s.csrfToken); // the page's CSRF token stays valid
    now += 200; // 1100 ms in: the first token has expired, the renewed one has not
    const expired = sessions.check(request(cookieOf(s)));
    expect(expired).toMatchObject({ kind: "refused", status: 401 });
    expect(expired.kind === "refused" && expired.detail).toContain("expired");
    expect(sessions.find(request(cookieOf(renewed)))?.principal.id).toBe("ops");
    // Renewing forever stops at the maximum lifetime.
    let latest = renewed;
    for (let i = 0; i < 10; i++) {
      now += 600;
      latest = sessions.renew(latest) ?? latest;
    }
    expect(latest.expiresAt).toBeLessThanOrEqual(1_000_000 + 3000);
    expect(sessions.find(request(cookieOf(latest)))).toBeNull();
    expect(sessions.check(request(undefined))).toEqual({ kind: "none" });
  });

  it("asks changes for the CSRF token and a same-origin request; reads need neither", () => {
    const sessions = new DashboardSessions(new KeyRing(KEYS), { secret: SECRET });
    const s = sessions.create(ops());
    const cookie = cookieOf(s);
    expect(sessions.check(request(cookie))).toMatchObject({ kind: "ok" });
    expect(sessions.check(request(cookie, "POST"))).toMatchObject({ kind: "refused", status: 403 });
    expect(sessions.check(request(cookie, "POST", { "x-csrf-token": s.csrfToken }))).toMatchObject({ kind: "ok" });
    expect(sessions.check(request(cookie, "DELETE", { "x-csrf-token": `${s.csrfToken}x` }))).toMatchObject({ kind: "refused", status: 403 });
    expect(sessions.check(request(cookie, "POST", { "x-csrf-token": s.csrfToken, origin: "http://evil.test" }))).toMatchObject({
      kind: "refused",
      status: 403,
    });
    expect(
      sessions.check(request(cookie, "POST", { "x-csrf-token": s.csrfToken, origin: "http://127.0.0.1:3000", "sec-fetch-site": "same-origin" })),
    ).toMatchObject({ kind: "ok" });
    expect(sessions.check(request(cookie, "POST", { "x-csrf-token": s.csrfToken, "sec-fetch-site": "same-site" }))).toMatchObject({
      kind: "refused",
      status: 403,
    });
    // Logging out ends the session on this instance only (nothing is shared).
    const peer = new DashboardSessions(new KeyRing(KEYS), { secret: SECRET });
    const ending = sessions.create(ops());
    sessions.end(ending);
    expect(sessions.check(request(cookieOf(ending)))).toMatchObject({ kind: "refused", status: 401 });
    expect(peer.check(request(cookieOf(ending)))).toMatchObject({ kind: "ok" });
    expect(sessions.check(request(cookie))).toMatchObject({ kind: "ok" });
    // Another session's CSRF token does not fit.
    const other = sessions.create(ops());
    expect(sessions.check(request(cookie, "POST", { "x-csrf-token": other.csrfToken }))).toMatchObject({ kind: "refused", status: 403 });
  });

  it("refuses a token once its key is removed, replaced under the same id, or loses the session's scopes", () => {
    const s = new DashboardSessions(new KeyRing(KEYS), { secret: SECRET }).create(ops());
    const without = new DashboardSessions(new KeyRing(KEYS.filter((k) => k.id !== "ops")), { secret: SECRET });
    const gone = without.check(request(cookieOf(s)));
    expect(gone).toMatchObject({ kind: "refused", status: 401 });
    expect(gone.kind === "refused" && gone.detail).toContain("no longer configured");
    const replaced = new DashboardSessions(new KeyRing([{ id: "ops", key: `cvk_new_${"n".repeat(30)}`, scopes: ["admin"] }]), { secret: SECRET });
    expect(replaced.check(request(cookieOf(s)))).toMatchObject({ kind: "refused", status: 401 });
    const narrowed = new DashboardSessions(new KeyRing([{ ...KEYS[0]!, scopes: ["read"] }]), { secret: SECRET });
    const check = narrowed.check(request(cookieOf(s)));
    if (check.kind !== "ok") throw new Error(`expected ok, got ${JSON.stringify(check)}`);
    expect([...check.principal.scopes]).toEqual(["read"]);
    // A reader's session does not widen when its key later gains admin.
    const reader = new DashboardSessions(new KeyRing(KEYS), { secret: SECRET }).create(new KeyRing(KEYS).authenticate(READ_KEY)!);
    const widened = new DashboardSessions(new KeyRing([KEYS[0]!, { ...KEYS[1]!, scopes: ["admin"] }]), { secret: SECRET });
    const w = widened.check(request(cookieOf(reader)));
    expect(w.kind === "ok" && [...w.principal.scopes]).toEqual(["read"]);
  });

  it("refuses tampered, foreign and malformed tokens", () => {
    const sessions = new DashboardSessions(new KeyRing(KEYS), { secret: SECRET });
    const s = sessions.create(new KeyRing(KEYS).authenticate(READ_KEY)!);
    const [v, body, sig] = s.token.split(".") as [string, string, string];
    const claims = JSON.parse(Buffer.from(body, "base64url").toString()) as Record<string, unknown>;
    const forgedBody = Buffer.from(JSON.stringify({ ...claims, s: ["admin", "enqueue", "read"] })).toString("base64url");
    const foreign = new DashboardSessions(new KeyRing(KEYS), { secret: "t".repeat(40) }).create(ops());
    for (const token of [
      `${v}.${forgedBody}.${sig}`,
      `${v}.${body}.${sig.slice(0, -2)}AA`,
      foreign.token,
      `s0.${body}.${sig}`,
      "garbage",
      `${v}.${Buffer.from("not json").toString("base64url")}.x`,
      "x".repeat(10_000),
    ]) {
      expect(sessions.check(request(`${SESSION_COOKIE}=${token}`)), token.slice(0, 40)).toMatchObject({ kind: "refused", status: 401 });
    }
  });

  it("refuses a short secret with a clear error and reads the secret from the environment", () => {
    expect(() => new DashboardSessions(null, { secret: "short" })).toThrow(/at least 32 bytes/);
    const saved = process.env.CONVEYOR_DASHBOARD_SECRET;
    process.env.CONVEYOR_DASHBOARD_SECRET = SECRET;
    try {
      const fromEnv = new DashboardSessions(new KeyRing(KEYS));
      expect(fromEnv.ephemeralSecret).toBe(false);
      const s = fromEnv.create(ops());
      expect(new DashboardSessions(new KeyRing(KEYS), { secret: SECRET }).find(request(cookieOf(s)))).not.toBeNull();
    } finally {
      if (saved === undefined) delete process.env.CONVEYOR_DASHBOARD_SECRET;
      else process.env.CONVEYOR_DASHBOARD_SECRET = saved;
    }
    expect(new DashboardSessions(new KeyRing(KEYS), {}).ephemeralSecret).toBe(process.env.CONVEYOR_DASHBOARD_SECRET === undefined);
  });
});

describe("dashboard sessions across server instances", () => {
  const temp = new TempDirs("conveyor-sessions-");
  const open: Array<{ app: FastifyInstance; backend: Backend }> = [];
  let dbPath = "";
  afterEach(async () => {
    for (const { app, backend } of open.splice(0)) {
      await app.close();
      await backend.close();
    }
  });
  afterAll(() => temp.removeAll());

  async function instance(secret: string | undefined, keys: ApiKeyConfig[] = KEYS): Promise<FastifyInstance> {
    if (!dbPath) dbPath = await temp.file("shared.db");
    const backend = new SqliteBackend({ path: dbPath });
    const app = await createServer({ backend, apiKeys: keys, logger: false, dashboard: { sessions: secret === undefined ? {} : { secret } } });
    open.push({ app, backend });
    return app;
  }

  async function loginOn(app: FastifyInstance, key: string): Promise<{ cookie: string; csrf: string }> {
    const res = await app.inject({ method: "POST", url: "/ui/api/login", payload: { key } });
    expect(res.statusCode).toBe(200);
    const set = String(res.headers["set-cookie"]);
    expect(set).toMatch(/HttpOnly; SameSite=Strict; Max-Age=\d+/);
    return { cookie: set.split(";")[0]!, csrf: res.json<{ csrfToken: string }>().csrfToken };
  }

  it("a login on instance A works on instance B with the same secret (reads and CSRF-checked changes), and after A is gone", async () => {
    const a = await instance(SECRET);
    const b = await instance(SECRET);
    const { cookie, csrf } = await loginOn(a, OPS_KEY);
    await a.close();
    const session = await b.inject({ method: "GET", url: "/ui/api/session", headers: { cookie } });
    expect(session.json()).toMatchObject({ principal: { id: "ops", scopes: ["admin", "enqueue", "read"] }, csrfToken: csrf });
    expect((await b.inject({ method: "GET", url: "/v1/queues", headers: { cookie } })).statusCode).toBe(200);
    const added = await b.inject({
      method: "POST",
      url: "/v1/queues/mail/jobs",
      headers: { cookie, "x-csrf-token": csrf },
      payload: { name: "send", data: {} },
    });
    expect(added.statusCode).toBe(202);
    const noCsrf = await b.inject({ method: "POST", url: "/v1/queues/mail/jobs", headers: { cookie }, payload: { name: "send", data: {} } });
    expect(noCsrf.statusCode).toBe(403);
  });

  it("is refused (401, never 5xx) by an instance with another secret, without the key, or when tampered", async () => {
    const a = await instance(SECRET);
    const { cookie } = await loginOn(a, READ_KEY);
    const other = await instance("u".repeat(40));
    const revoked = await instance(
      SECRET,
      KEYS.filter((k) => k.id !== "reader"),
    );
    const ephemeral = await instance(undefined);
    const value = cookie.slice(`${SESSION_COOKIE}=`.length);
    const tampered = [
      `${SESSION_COOKIE}=${value.slice(0, -1)}${value.endsWith("A") ? "B" : "A"}`,
      `${SESSION_COOKIE}=${value.replace(/^s1\./, "s1.e30")}`,
      `${SESSION_COOKIE}=%00%ff`,
      `${SESSION_COOKIE}=${"a.".repeat(3000)}`,
      `${SESSION_COOKIE}=`,
    ];
    const cases: Array<[FastifyInstance, string, string]> = [
      [other, cookie, "not signed by this server"],
      [revoked, cookie, "no longer configured"],
      ...tampered.map((c): [FastifyInstance, string, string] => [a, c, "cookie"]),
    ];
    if (process.env.CONVEYOR_DASHBOARD_SECRET === undefined) cases.push([ephemeral, cookie, "not signed by this server"]);
    for (const [app, c, words] of cases) {
      const res = await app.inject({ method: "GET", url: "/v1/queues", headers: { cookie: c } });
      expect(res.statusCode, c.slice(0, 60)).toBe(401);
      expect(res.json<{ detail: string }>().detail).toContain(words);
      const page = await app.inject({ method: "GET", url: "/ui/api/session", headers: { cookie: c } });
      expect(page.statusCode).toBe(200);
      expect(page.json()).toMatchObject({ principal: null, csrfToken: null });
    }
    // The same cookie still works where the key and secret are unchanged.
    expect((await a.inject({ method: "GET", url: "/v1/queues", headers: { cookie } })).statusCode).toBe(200);
  });
});
