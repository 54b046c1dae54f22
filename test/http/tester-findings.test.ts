/**
 * Regression tests for a tester's findings against `conveyor serve` on SQLite (credentials beside
 * a stale dashboard cookie, and error answers that were misleading or not problem documents):
 * each test names the finding it pins and fails with that fix removed.
 */
import { connect } from "node:net";
import Database from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { hashApiKey, type ApiKeyConfig, type ServerOptions } from "../../src/http/index.js";
import { send, serverPerTest, type Obj, type Reply, type RequestInit } from "./harness.js";

const KEYS = {
  reader: "cvk_reader-0123456789abcdef-reader",
  admin: "cvk_admin-0123456789abcdef-admin",
};
const API_KEYS: ApiKeyConfig[] = [
  { id: "reader", sha256: hashApiKey(KEYS.reader), scopes: ["read"] },
  { id: "admin", sha256: hashApiKey(KEYS.admin), scopes: ["admin"] },
];
/** A session cookie no server signed: what a browser keeps after a restart with a new random secret. */
const STALE_COOKIE = "conveyor_session=v1.eyJ4IjoxfQ.abc";
const SECRET = "s3cr3t-stream-token-value";

describe("a tester's findings against conveyor serve (SQLite)", () => {
  const { startTestServer } = serverPerTest();
  let base = "";
  let port = 0;
  async function start(options: Partial<ServerOptions> = {}): Promise<void> {
    const server = await startTestServer({ apiKeys: API_KEYS, ...options });
    base = server.url;
    port = Number(new URL(base).port);
  }
  const as = <T = Obj>(key: string, method: string, path: string, init: RequestInit = {}): Promise<Reply<T>> =>
    send<T>(base, method, path, { ...init, headers: { authorization: `Bearer ${key}`, ...init.headers } });

  /** A job that stays open (scheduled), and a stream token for it. */
  async function jobWithToken(queue: string, jobId: string): Promise<{ eventsUrl: string; token: string }> {
    const enqueued = await as(KEYS.admin, "POST", `/v1/queues/${queue}/jobs`, { body: { name: "n", options: { jobId, delayMs: 60_000 } } });
    expect(enqueued.status).toBe(202);
    const token = await as<{ eventsUrl: string; token: string }>(KEYS.reader, "POST", `/v1/jobs/${jobId}/events/token?queue=${queue}`);
    expect(token.status).toBe(200);
    return token.json;
  }

  /** Sends raw bytes and resolves with everything the server answers before it closes the connection. */
  function raw(request: string): Promise<string> {
    return new Promise((resolve) => {
      const socket = connect(port, "127.0.0.1", () => socket.write(request));
      let answer = "";
      socket.on("data", (d: Buffer) => (answer += d.toString("latin1")));
      socket.on("error", () => undefined);
      socket.on("close", () => resolve(answer));
      setTimeout(() => socket.destroy(), 5_000).unref();
    });
  }
  function problemOf(answer: string): { status: number; contentType: string; body: Obj } {
    const [head = "", body = ""] = answer.split("\r\n\r\n");
    return {
      status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]),
      contentType: /^content-type: (.*)$/im.exec(head)?.[1] ?? "",
      body: JSON.parse(body) as Obj,
    };
  }

  it("finding 1: a stale dashboard cookie does not block the credential a request names (stream token, API key); no bad credential is rescued by another", async () => {
    await start({ dashboard: true });
    const { eventsUrl } = await jobWithToken("q3", "job-1");
    const other = await jobWithToken("q4", "job-2");
    const stale = { cookie: STALE_COOKIE };
    const open = (path: string, headers: Record<string, string> = {}) => send(base, "GET", path, { headers, headersOnly: true });

    expect((await open(eventsUrl, stale)).status).toBe(200);
    expect((await open("/v1/jobs/job-1/events?queue=q3", { ...stale, authorization: `Bearer ${KEYS.reader}` })).status).toBe(200);
    // The cookie alone is still refused, saying to log in again.
    const alone = await send<Obj>(base, "GET", "/v1/jobs/job-1/events?queue=q3", { headers: stale });
    expect(alone.status).toBe(401);
    expect(alone.json.detail).toMatch(/log in to the dashboard again/);

    const login = await send(base, "POST", "/ui/api/login", { body: { key: KEYS.reader } });
    expect(login.status).toBe(200);
    const session = { cookie: login.headers.get("set-cookie")!.split(";")[0]! };
    expect((await open("/v1/jobs/job-1/events?queue=q3", session)).status).toBe(200);

    // A bad credential refuses the request, whatever valid one stands beside it.
    const refused: Array<[string, Record<string, string>]> = [
      ["/v1/jobs/job-1/events?queue=q3&access_token=v1.forged.token", stale],
      ["/v1/jobs/job-1/events?queue=q3&access_token=v1.forged.token", session],
      [`/v1/jobs/job-1/events?queue=q3&access_token=${encodeURIComponent(other.token)}`, session],
      [`/v1/jobs/job-1/events?queue=q3&access_token=${encodeURIComponent(other.token)}&access_token=x`, session],
      [eventsUrl, { authorization: "Bearer cvk_not-a-configured-key-0123456789" }],
      [eventsUrl, { "x-api-key": "cvk_not-a-configured-key-0123456789", ...session }],
      ["/v1/jobs/job-1?queue=q3", { authorization: "Bearer cvk_not-a-configured-key-0123456789", ...session }],
      // A stream token is a credential of its job's stream only: elsewhere the cookie decides.
      [`/v1/jobs/job-1?queue=q3&access_token=${encodeURIComponent(other.token)}`, stale],
    ];
    for (const [path, headers] of refused) {
      const r = await open(path, headers);
      expect(r.status, `${path} ${JSON.stringify(headers)}`).toBe(401);
    }
  });

  it("finding 2: a path segment over the router's limit is a 414 saying the URL is too long, never echoing the URL or its credentials", async () => {
    await start();
    const long = await send<Obj>(base, "GET", `/v1/jobs/${"a".repeat(5_000)}?access_token=${SECRET}&x=${KEYS.admin}`);
    expect(long.status).toBe(414);
    expect(long.headers.get("content-type")).toMatch(/application\/problem\+json/);
    expect(long.json.detail).toMatch(/URL is too long/);
    expect(long.json.detail).toContain("4096");
    expect(long.json.title).toBe("URI Too Long");
    expect(long.text).not.toContain(SECRET);
    expect(long.text).not.toContain(KEYS.admin);
    expect(long.text).not.toContain("aaaaaaaaaaaaaaaa");
    // A malformed escape is a 400 that says so, without the URL either.
    const bad = await send<Obj>(base, "GET", `/v1/jobs/%ZZ?access_token=${SECRET}`);
    expect(bad.status).toBe(400);
    expect(bad.json.detail).toMatch(/percent-escape/);
    expect(bad.text).not.toContain(SECRET);
    // Nor does any error answer echo an API key sent in a path.
    for (const path of [`/v1/jobs/%ZZ/${KEYS.admin}`, `/elsewhere/${KEYS.admin}`, `/v1/jobs/${"a".repeat(5_000)}/${KEYS.admin}`]) {
      const r = await send(base, "GET", path);
      expect(r.status, path).toBeGreaterThanOrEqual(400);
      expect(r.text, path).not.toContain(KEYS.admin);
    }
  });

  it("finding 3a: a stream token used with another queue's ?queue= says it was issued for the job in another queue, not that its job is gone", async () => {
    await start();
    const { token } = await jobWithToken("q3", "job-1");
    await jobWithToken("q2", "job-2");
    const wrongQueue = await send<Obj>(base, "GET", `/v1/jobs/job-1/events?queue=q2&access_token=${encodeURIComponent(token)}`);
    expect(wrongQueue.status).toBe(401);
    expect(wrongQueue.json.detail).toMatch(/another queue/);
    expect(wrongQueue.json.detail).not.toMatch(/no longer exists/);
    // Without ?queue=, or with its own, the token opens its job.
    expect((await send(base, "GET", `/v1/jobs/job-1/events?access_token=${encodeURIComponent(token)}`, { headersOnly: true })).status).toBe(200);
  });

  it("finding 3b: JSON with __proto__ or constructor.prototype keys is refused as such, not as invalid JSON", async () => {
    await start();
    for (const raw of ['{"name":"n","data":{"__proto__":{"polluted":1}}}', '{"name":"n","data":{"constructor":{"prototype":{"polluted":1}}}}']) {
      const r = await as<Obj>(KEYS.admin, "POST", "/v1/queues/q/jobs", { raw, headers: { "content-type": "application/json" } });
      expect(r.status, raw).toBe(400);
      expect(r.json.detail).toMatch(/__proto__/);
      expect(r.json.detail).toMatch(/constructor/);
      expect(r.json.detail).not.toMatch(/not valid JSON/);
    }
    expect(({} as Obj).polluted).toBeUndefined();
    const invalid = await as<Obj>(KEYS.admin, "POST", "/v1/queues/q/jobs", { raw: '{"name":', headers: { "content-type": "application/json" } });
    expect(invalid.status).toBe(400);
    expect(invalid.json.detail).toMatch(/not valid JSON/);
  });

  it("finding 3c: a content-encoded request body is 415 saying bodies are sent as is; identity is accepted", async () => {
    await start();
    const gzip = await as<Obj>(KEYS.admin, "POST", "/v1/queues/q/jobs", { body: { name: "n" }, headers: { "content-encoding": "gzip" } });
    expect(gzip.status).toBe(415);
    expect(gzip.headers.get("content-type")).toMatch(/application\/problem\+json/);
    expect(gzip.json.detail).toMatch(/must not be content-encoded/);
    expect((await as(KEYS.admin, "POST", "/v1/queues/q/jobs", { body: { name: "n" }, headers: { "content-encoding": "identity" } })).status).toBe(202);
    // Unauthenticated, the answer is still 401 first.
    expect((await send(base, "POST", "/v1/queues/q/jobs", { body: { name: "n" }, headers: { "content-encoding": "gzip" } })).status).toBe(401);
  });

  it("finding 3d: an empty body with Content-Type: application/json is accepted on routes that take no body, and still refused where one is needed", async () => {
    await start();
    await jobWithToken("q", "job-1");
    const empty = { raw: "", headers: { "content-type": "application/json" } };
    expect((await as(KEYS.admin, "POST", "/v1/queues/q/pause", empty)).status).toBe(200);
    expect((await as(KEYS.admin, "POST", "/v1/queues/q/resume", empty)).status).toBe(200);
    expect((await as(KEYS.reader, "POST", "/v1/jobs/job-1/events/token?queue=q", empty)).status).toBe(200);
    const enqueue = await as<Obj>(KEYS.admin, "POST", "/v1/queues/q/jobs", empty);
    expect(enqueue.status).toBe(400);
    expect(enqueue.json.detail).toMatch(/empty/);
  });

  it("finding 3e: a 413 names the route's own limit; only enqueue routes advise splitting or sending ids", async () => {
    await start({ dashboard: true, maxBulkBodyBytes: 2_048 });
    const big = { raw: JSON.stringify({ x: "x".repeat(1_100_000) }), headers: { "content-type": "application/json" } };
    const pause = await as<Obj>(KEYS.admin, "POST", "/v1/queues/q/pause", big);
    expect(pause.status).toBe(413);
    expect(pause.json.detail).toContain("1048576 bytes");
    expect(pause.json.detail).toContain("/pause");
    expect(pause.json.detail).not.toMatch(/bulk|worker/);
    const login = await send<Obj>(base, "POST", "/ui/api/login", {
      raw: JSON.stringify({ key: "x".repeat(5_000) }),
      headers: { "content-type": "application/json" },
    });
    expect(login.status).toBe(413);
    expect(login.json.detail).toContain("4096 bytes");
    expect(login.json.detail).not.toMatch(/bulk|worker/);
    const bulk = await as<Obj>(KEYS.admin, "POST", "/v1/queues/q/jobs/bulk", { body: { jobs: [{ name: "n", data: { x: "x".repeat(3_000) } }] } });
    expect(bulk.status).toBe(413);
    expect(bulk.json.detail).toMatch(/2048 bytes; split the jobs/);
  });

  it("finding 3f: requests Node's HTTP parser refuses are answered with problem documents that echo nothing of the request", async () => {
    await start({ requestTimeoutMs: 1_000 });
    const auth = `Authorization: Bearer ${KEYS.admin}\r\n`;
    const cases: Array<[string, number, RegExp]> = [
      [`GET /v1/health HTTP/1.1\r\nHost: x\r\n${auth}X-Bad: a\x01b\r\n\r\n`, 400, /header/],
      [
        `POST /v1/queues/q/jobs HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
        400,
        /Content-Length or Transfer-Encoding/,
      ],
      [`POST /v1/queues/q/jobs HTTP/1.1\r\nHost: x\r\n${auth}Transfer-Encoding: chunked\r\n\r\nzz\r\n\r\n`, 400, /chunk/],
      [`GET /v1/health HTTP/1.1\r\nHost: x\r\n${auth}X-Big: ${"a".repeat(20_000)}\r\n\r\n`, 431, /request line and headers are larger than \d+ bytes/],
      // Sends its headers and never its body.
      [`POST /v1/queues/q/jobs HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{`, 408, /within 1000 ms/],
    ];
    for (const [request, status, detail] of cases) {
      const answer = await raw(request);
      // The bad-chunk request is answered 401 first (its headers parse), then refused.
      const p = problemOf(answer.slice([...answer.matchAll(/HTTP\/1\.1 \d{3} /g)].at(-1)?.index ?? 0));
      expect(p.status, answer).toBe(status);
      expect(p.contentType).toMatch(/application\/problem\+json/);
      expect(p.body.status).toBe(status);
      expect(p.body.type).toMatch(/^urn:conveyor:problem:/);
      expect(p.body.detail).toMatch(detail);
      expect(answer).not.toContain(KEYS.admin);
    }
  });

  it("finding 4: two Idempotency-Key headers are refused (400), not joined into a third key that stores the job again", async () => {
    await start();
    const body = '{"name":"n","data":{"x":1}}';
    const post = (keys: string[]) =>
      raw(
        `POST /v1/queues/q/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEYS.admin}\r\nContent-Type: application/json\r\n` +
          keys.map((k) => `Idempotency-Key: ${k}\r\n`).join("") +
          `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
      );
    const first = problemOf(await post(["a"]));
    expect(first.status).toBe(202);
    const twice = problemOf(await post(["a", "b"]));
    expect(twice.status).toBe(400);
    expect(twice.body.detail).toMatch(/send one Idempotency-Key header; this request has 2/);
    expect(twice.body.errors).toEqual([{ in: "headers", pointer: "/idempotency-key", detail: "sent 2 times; send it once" }]);
    const again = problemOf(await post(["a"]));
    expect(again.status).toBe(202);
    expect(again.body.jobId).toBe(first.body.jobId);
    const listed = await as<{ jobs: unknown[] }>(KEYS.admin, "GET", "/v1/queues/q/jobs?limit=100");
    expect(listed.json.jobs).toHaveLength(1);
  });

  it("finding 5: a job whose id holds a C1 character (stored before new ids refused them) is still read, cancelled and replayed over HTTP", async () => {
    const server = await startTestServer({ apiKeys: API_KEYS });
    base = server.url;
    const old = "order-\u0085-1";
    const dead = "order-\u0085-2";
    for (const jobId of ["order-x-1", "order-x-2"]) {
      expect((await as(KEYS.admin, "POST", "/v1/queues/q/jobs", { body: { name: "n", options: { jobId, delayMs: 60_000 } } })).status).toBe(202);
    }
    // What a store written by an earlier version holds: the ids as they were taken then.
    const db = new Database(server.dbPath);
    try {
      db.prepare("UPDATE conveyor_jobs SET id = ? WHERE id = ?").run(old, "order-x-1");
      db.prepare("UPDATE conveyor_jobs SET id = ?, state = 'dead', finished_at = created_at WHERE id = ?").run(dead, "order-x-2");
    } finally {
      db.close();
    }
    const path = (id: string) => `/v1/jobs/${encodeURIComponent(id)}?queue=q`;
    const read = await as<Obj>(KEYS.reader, "GET", path(old));
    expect(read.status).toBe(200);
    expect(read.json.state).toBe("scheduled");
    const replayed = await as<{ replayed: string[] }>(KEYS.admin, "POST", "/v1/queues/q/dead/replay", { body: { ids: [dead] } });
    expect(replayed.status).toBe(200);
    expect(replayed.json.replayed).toEqual([dead]);
    expect((await as(KEYS.admin, "DELETE", path(old))).status).toBeLessThan(300);
    expect((await as<Obj>(KEYS.reader, "GET", path(old))).json.state).toBe("cancelled");
    // New ids still refuse it.
    const fresh = await as<Obj>(KEYS.admin, "POST", "/v1/queues/q/jobs", { body: { name: "n", options: { jobId: "order-\u0085-3" } } });
    expect(fresh.status).toBe(400);
  });
});
