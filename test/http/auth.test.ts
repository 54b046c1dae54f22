/**
 * API keys and scopes on every route (taken from the OpenAPI document, so a new route cannot be
 * forgotten), stream tokens for browsers, CORS, and secrets kept out of logs.
 */
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { createServer, hashApiKey, type ApiKeyConfig } from "../../src/http/index.js";
import { KeyRing, StreamTokens } from "../../src/http/auth.js";
import { openStream, send, serverPerTest, type Harness, type Obj } from "./harness.js";

const { temp, startTestServer } = serverPerTest();
let h: Harness | null = null;

const KEYS = {
  enqueue: "cvk_enqueue-only-0123456789abcdef",
  read: "cvk_read-only-0123456789abcdef",
  admin: "cvk_admin-0123456789abcdef-admin",
  web: "cvk_web-enqueue-and-read-0123456789",
  other: "cvk_another-producer-0123456789abc",
};
const API_KEYS: ApiKeyConfig[] = [
  { id: "enqueue", sha256: hashApiKey(KEYS.enqueue), scopes: ["enqueue"] },
  { id: "read", sha256: hashApiKey(KEYS.read), scopes: ["read"] },
  { id: "admin", sha256: hashApiKey(KEYS.admin), scopes: ["admin"] },
  { id: "web", key: KEYS.web, scopes: ["enqueue", "read"] },
  { id: "other", sha256: hashApiKey(KEYS.other), scopes: ["enqueue"] },
];
const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

async function enqueueAs(key: string, body: Obj = { name: "n" }): Promise<string> {
  const r = await h!.request<{ jobId: string }>("POST", "/v1/queues/q/jobs", { body, headers: bearer(key) });
  expect(r.status).toBe(202);
  return r.json.jobId;
}

describe("API keys and scopes", () => {
  it("every route: 401 without a key or with a wrong one, 403 without the scope, neither with it", async () => {
    h = await startTestServer({ apiKeys: API_KEYS });
    const jobId = await enqueueAs(KEYS.enqueue);
    const doc = (await h.request<{ paths: Record<string, Record<string, { security: Array<Record<string, string[]>> }>> }>("GET", "/v1/openapi.json")).json;
    const keyFor: Record<string, string> = { enqueue: KEYS.enqueue, read: KEYS.read, admin: KEYS.admin };
    let checked = 0;
    for (const [template, methods] of Object.entries(doc.paths)) {
      const path = "/v1" + template.replace("{queue}", "q").replace("{id}", jobId);
      for (const [method, op] of Object.entries(methods)) {
        // GET /events streams until the client leaves: its status is what is checked here.
        const init = method === "post" ? { body: {} } : { headersOnly: template === "/events" };
        if (op.security.length === 0) {
          expect((await h.request(method.toUpperCase(), path, init)).status, `${method} ${template} is public`).toBe(200);
          continue;
        }
        checked++;
        const scope = Object.values(op.security[0]!)[0]![0]!;
        const anon = await h.request(method.toUpperCase(), path, init);
        expect(anon.status, `${method} ${template} without a key`).toBe(401);
        expect(anon.headers.get("www-authenticate")).toMatch(/^Bearer/);
        const wrong = await h.request(method.toUpperCase(), path, { ...init, headers: bearer("cvk_not-a-key-0123456789abcdef") });
        expect(wrong.status, `${method} ${template} with an unknown key`).toBe(401);
        for (const [have, key] of Object.entries(keyFor)) {
          const r = await h.request(method.toUpperCase(), path, { ...init, headers: bearer(key) });
          const allowed = have === scope || have === "admin";
          if (allowed) expect([401, 403], `${method} ${template} with ${have}`).not.toContain(r.status);
          else expect(r.status, `${method} ${template} with ${have} (needs ${scope})`).toBe(403);
        }
      }
    }
    expect(checked).toBeGreaterThanOrEqual(14);
  });

  it("accepts X-API-Key as well as Authorization: Bearer; a key configured in clear works the same", async () => {
    h = await startTestServer({ apiKeys: API_KEYS });
    const id = await enqueueAs(KEYS.web);
    expect((await h.request("GET", `/v1/jobs/${id}`, { headers: { "x-api-key": KEYS.web } })).status).toBe(200);
    expect((await h.request("GET", `/v1/jobs/${id}`, { headers: { authorization: `Basic ${KEYS.web}` } })).status).toBe(401);
  });

  it("an enqueue key may cancel its own jobs only; admin may cancel any", async () => {
    h = await startTestServer({ apiKeys: API_KEYS });
    const mine = await enqueueAs(KEYS.enqueue);
    const theirs = await enqueueAs(KEYS.other);
    expect((await h.request("DELETE", `/v1/jobs/${theirs}`, { headers: bearer(KEYS.enqueue) })).status).toBe(403);
    expect((await h.request("DELETE", `/v1/jobs/${mine}`, { headers: bearer(KEYS.enqueue) })).status).toBe(200);
    expect((await h.request("DELETE", `/v1/jobs/${theirs}`, { headers: bearer(KEYS.admin) })).status).toBe(200);
  });

  it("keys are kept hashed and compared against every configured key", () => {
    const ring = new KeyRing([
      { id: "k", key: KEYS.web, scopes: ["read"] },
      { id: "j", sha256: hashApiKey(KEYS.read), scopes: ["admin"] },
    ]);
    expect(JSON.stringify(ring)).not.toContain(KEYS.web);
    expect(ring.authenticate(KEYS.web)?.id).toBe("k");
    expect([...ring.authenticate(KEYS.read)!.scopes].sort()).toEqual(["admin", "enqueue", "read"]);
    expect(ring.authenticate(KEYS.web.slice(0, -1))).toBeNull();
    expect(() => new KeyRing([{ id: "x", sha256: "abc", scopes: ["read"] }])).toThrow(/64 hex/);
    expect(() => new KeyRing([{ id: "x", key: "short", scopes: ["read"] }])).toThrow(/at least 16/);
    expect(() => new KeyRing([{ id: "x", key: KEYS.web, scopes: ["write" as never] }])).toThrow(/scopes/);
  });

  it("refuses to start without a decision about authentication", async () => {
    const backend = new SqliteBackend({ path: ":memory:" });
    await expect(createServer({ backend, logger: false } as never)).rejects.toThrow(/apiKeys/);
    await backend.close();
  });
});

describe("event streams with keys", () => {
  it("Bearer works; browsers use a job-scoped, short-lived ?access_token= from the token route", async () => {
    h = await startTestServer({ apiKeys: API_KEYS });
    const id = await enqueueAs(KEYS.web);
    const other = await enqueueAs(KEYS.web);
    const events = `${h.url}/v1/jobs/${id}/events`;

    const withKey = await openStream(events, bearer(KEYS.read));
    expect(withKey.status).toBe(200);
    withKey.close();
    expect((await openStream(events)).status).toBe(401);

    const t = await h.request<{ token: string; expiresAt: string; eventsUrl: string }>("POST", `/v1/jobs/${id}/events/token`, { headers: bearer(KEYS.read) });
    expect(t.status).toBe(200);
    expect(t.json.eventsUrl).toBe(`/v1/jobs/${id}/events?queue=q&access_token=${encodeURIComponent(t.json.token)}`);
    const browser = await openStream(h.url + t.json.eventsUrl);
    expect(browser.status).toBe(200);
    await browser.waitForEvent((e) => e.data.state === "waiting");
    browser.close();

    // Only for that job, only for the stream, not after tampering.
    expect((await openStream(`${h.url}/v1/jobs/${other}/events?access_token=${encodeURIComponent(t.json.token)}`)).status).toBe(401);
    expect((await h.request("GET", `/v1/jobs/${id}?access_token=${encodeURIComponent(t.json.token)}`)).status).toBe(401);
    const tampered = t.json.token.slice(0, -2) + (t.json.token.endsWith("A") ? "BB" : "AA");
    expect((await openStream(`${events}?access_token=${encodeURIComponent(tampered)}`)).status).toBe(401);
  });

  it("tokens expire", () => {
    const tokens = new StreamTokens("x".repeat(32));
    const { token } = tokens.issue({ jobId: "job-1", queue: "q", createdAt: 5 }, "web", 1_000, 1_000_000);
    expect(tokens.verify(token, "job-1", 1_000_500)?.id).toBe("web");
    expect(tokens.verify(token, "job-1", 1_001_001)).toBeNull();
    expect(new StreamTokens("y".repeat(32)).verify(token, "job-1", 1_000_500)).toBeNull();
    expect(() => new StreamTokens("short")).toThrow(/32 bytes/);
  });
});

describe("CORS", () => {
  it("answers preflights and marks responses (errors and streams included) for allowed origins only", async () => {
    h = await startTestServer({ apiKeys: API_KEYS, cors: { origins: ["https://app.example.com"], maxAgeSeconds: 120 } });
    const pre = await fetch(`${h.url}/v1/queues/q/jobs`, {
      method: "OPTIONS",
      headers: {
        origin: "https://app.example.com",
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type, idempotency-key",
      },
    });
    expect(pre.status).toBe(204);
    expect(pre.headers.get("access-control-allow-origin")).toBe("https://app.example.com");
    expect(pre.headers.get("access-control-allow-methods")).toContain("POST");
    expect(pre.headers.get("access-control-allow-headers")?.toLowerCase()).toContain("idempotency-key");
    expect(pre.headers.get("access-control-max-age")).toBe("120");

    const ok = await h.request("POST", "/v1/queues/q/jobs", { body: { name: "n" }, headers: { origin: "https://app.example.com", ...bearer(KEYS.web) } });
    expect(ok.headers.get("access-control-allow-origin")).toBe("https://app.example.com");
    expect(ok.headers.get("access-control-expose-headers")).toContain("Location");
    const denied = await h.request("GET", "/v1/queues", { headers: { origin: "https://app.example.com" } });
    expect(denied.status).toBe(401);
    expect(denied.headers.get("access-control-allow-origin")).toBe("https://app.example.com");
    const stranger = await h.request("GET", "/v1/queues", { headers: { origin: "https://evil.example", ...bearer(KEYS.read) } });
    expect(stranger.headers.get("access-control-allow-origin")).toBeNull();

    const id = (ok.json as { jobId: string }).jobId;
    const s = await openStream(`${h.url}/v1/jobs/${id}/events`, { origin: "https://app.example.com", ...bearer(KEYS.read) });
    expect(s.headers.get("access-control-allow-origin")).toBe("https://app.example.com");
    s.close();
  });

  it("is off unless configured", async () => {
    h = await startTestServer();
    const pre = await fetch(`${h.url}/v1/queues/q/jobs`, {
      method: "OPTIONS",
      headers: { origin: "https://app.example.com", "access-control-request-method": "POST" },
    });
    expect(pre.headers.get("access-control-allow-origin")).toBeNull();
    const r = await h.request("GET", "/v1/queues", { headers: { origin: "https://app.example.com" } });
    expect(r.headers.get("access-control-allow-origin")).toBeNull();
  });
});

describe("logs", () => {
  it("never contain keys, Authorization headers or stream tokens", async () => {
    let log = "";
    const stream = new Writable({
      write(chunk: Buffer, _encoding, done) {
        log += chunk.toString();
        done();
      },
    });
    const backend = new SqliteBackend({ path: await temp.file("jobs.db") });
    const app = await createServer({ backend, apiKeys: API_KEYS, logger: { level: "trace", stream } });
    await app.listen({ port: 0, host: "127.0.0.1" });
    const base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
    try {
      const r = await send<{ jobId: string }>(base, "POST", "/v1/queues/q/jobs", { body: { name: "n" }, headers: bearer(KEYS.web) });
      await send(base, "GET", "/v1/queues", { headers: { "x-api-key": KEYS.admin } });
      await send(base, "GET", "/v1/queues", { headers: bearer("cvk_wrong-key-0123456789abcdef") });
      const t = await send<{ token: string; eventsUrl: string }>(base, "POST", `/v1/jobs/${r.json.jobId}/events/token`, { headers: bearer(KEYS.web) });
      const s = await openStream(base + t.json.eventsUrl);
      await s.waitForEvent(() => true);
      s.close();
      await send(base, "GET", `/v1/nowhere?access_token=${t.json.token}`);
      expect(log).toContain("incoming request");
      for (const secret of [KEYS.web, KEYS.admin, "cvk_wrong-key-0123456789abcdef", t.json.token]) expect(log).not.toContain(secret);
      expect(log.toLowerCase()).not.toContain("bearer");
    } finally {
      await app.close();
      await backend.close();
    }
  });
});
