/**
 * Property: whatever arrives — random methods, paths, query strings, headers and bodies, valid
 * or malformed, aimed at every route — the server answers without a 5xx, keeps running, answers
 * errors as problem documents, and stores a job only for a request it accepted.
 */
import Database from "better-sqlite3";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { defineJob, silentLogger } from "../../src/index.js";
import { generateWebhookSecret, hashApiKey, WebhookDispatcher } from "../../src/http/index.js";
import { OutboxDeadLetters } from "../../src/outbox/dead.js";
import { TempDirs } from "../helpers/temp.js";
import { startServer, type Harness } from "./harness.js";

const temp = new TempDirs();
let h: Harness;
let outboxDb: Database.Database | undefined;
const ADMIN = "cvk_property-admin-0123456789abcdef";
const PRODUCER = "cvk_property-producer-0123456789ab";
const accepted = new Set<string>();
const existing: string[] = [];

beforeAll(async () => {
  const dbPath = await temp.file("jobs.db");
  h = await startServer(
    temp,
    {
      apiKeys: [
        { id: "admin", sha256: hashApiKey(ADMIN), scopes: ["admin"] },
        { id: "producer", sha256: hashApiKey(PRODUCER), scopes: ["enqueue", "read"] },
      ],
      jobs: [defineJob("typed", z.object({ userId: z.string().min(1), n: z.number().int().optional() }))],
      allowUnregisteredJobs: true,
      maxBodyBytes: 16 * 1024,
      cors: { origins: ["https://app.example.com"] },
      events: { pollIntervalMs: 50 },
    },
    {
      dbPath,
      configure: (backend) => ({
        webhooks: new WebhookDispatcher({ backend, secrets: [generateWebhookSecret()], allow: ["127.0.0.1"], logger: silentLogger }),
        // The outbox's set-aside events (their routes), on the same file the backend migrated.
        outbox: OutboxDeadLetters.sqlite((outboxDb = new Database(dbPath))),
      }),
    },
  );
  // A few jobs in various states for the id-shaped paths to hit.
  const worker = { id: "w", host: "h", pid: 1 };
  for (const name of ["a", "b", "c", "d"]) {
    const r = await h.request<{ jobId: string }>("POST", "/v1/queues/q/jobs", {
      body: { name, options: { attempts: 1 } },
      headers: { authorization: `Bearer ${ADMIN}` },
    });
    accepted.add(r.json.jobId);
    existing.push(r.json.jobId);
  }
  const claimed = await h.backend.claim({ queues: ["q"], names: ["a", "b", "c"], worker, limit: 3, leaseMs: 600_000 });
  await h.backend.complete([{ lease: claimed[0]!.lease, result: { ok: true } }]);
  await h.backend.fail([{ lease: claimed[1]!.lease, error: { name: "E", message: "x", stack: null }, retryDelayMs: null }]);
}, 60_000);
afterAll(async () => {
  await h.close();
  outboxDb?.close();
  await temp.removeAll();
});

const printable = fc.string({ maxLength: 40 }).filter((s) => /^[\x20-\x7e]*$/.test(s));
const segment = fc.oneof(
  fc.constantFrom("q", "email", "a%2Fb", "conveyor.webhooks", "..", "%", "%ZZ", "%00", "jobs", "bulk", "dead", "replay", "events", "token", "x".repeat(300)),
  fc.constantFrom(...["a", "b", "c", "d"].map((_, i) => i)).map((i) => existing[i]!),
  fc.string({ maxLength: 20 }).map(encodeURIComponent),
  printable,
);
const templates = [
  "/v1/queues/{q}/jobs",
  "/v1/queues/{q}/jobs/bulk",
  "/v1/queues/{q}",
  "/v1/queues",
  "/v1/queues/{q}/pause",
  "/v1/queues/{q}/resume",
  "/v1/queues/{q}/dead",
  "/v1/queues/{q}/dead/replay",
  "/v1/queues/{q}/dead/{id}",
  "/v1/jobs/{id}",
  "/v1/jobs/{id}/events",
  "/v1/jobs/{id}/events/token",
  "/v1/jobs/{id}/replay",
  "/v1/jobs/{id}/flow",
  "/v1/jobs/{id}/logs",
  "/v1/schedules",
  "/v1/queues/{q}/schedules",
  "/v1/queues/{q}/schedules/{id}",
  "/v1/queues/{q}/limits",
  "/v1/outbox/dead",
  "/v1/outbox/dead/{id}",
  "/v1/outbox/dead/replay",
  "/v1/openapi.json",
  "/v1/health",
  "/",
  "/v2/queues/{q}/jobs",
];
const path = fc.oneof(
  { weight: 5, arbitrary: fc.tuple(fc.constantFrom(...templates), segment, segment).map(([t, q, id]) => t.replace("{q}", q).replace("{id}", id)) },
  { weight: 1, arbitrary: fc.webPath() },
  { weight: 1, arbitrary: printable.map((s) => `/v1/${s}`) },
);
const query = fc.oneof(
  fc.constant(""),
  fc.constantFrom(
    "?limit=5",
    "?limit=-1",
    "?limit=abc",
    "?state=dead",
    "?state=nope",
    "?offset=1e9",
    "?name=a&limit=1",
    "?access_token=v1.abc.def",
    "?lastEventId=2.1.x",
    "?limit=1&limit=2",
    "?after=a",
    "?after=%00",
    "?createdFrom=yesterday",
    "?createdUntil=2026-01-01T00:00:00Z&createdFrom=2027-01-01T00:00:00Z",
    "?queue=q",
    "?queue=q&queue=r",
    "?topic=%F0%9F%92%A5",
  ),
  fc.webQueryParameters().map((s) => `?${s}`),
);
const auth = fc.constantFrom<Record<string, string>>(
  {},
  { authorization: `Bearer ${ADMIN}` },
  { authorization: `Bearer ${ADMIN}` },
  { authorization: `Bearer ${PRODUCER}` },
  { authorization: "Bearer cvk_nope" },
  { authorization: "Basic Zm9vOmJhcg==" },
  { authorization: "Bearer" },
  { "x-api-key": ADMIN },
);
const extraHeaders = fc.dictionary(
  fc.constantFrom("content-type", "idempotency-key", "last-event-id", "origin", "accept", "x-anything", "accept-encoding"),
  fc.oneof(
    printable,
    fc.constantFrom(
      "application/json",
      "application/json; charset=utf-8",
      "text/plain",
      "application/x-www-form-urlencoded",
      "multipart/form-data; boundary=x",
      "https://app.example.com",
      "2",
      "*/*",
    ),
  ),
  { maxKeys: 4 },
);
const jsonish = fc.jsonValue({ maxDepth: 4 });
const options = fc.dictionary(
  fc.constantFrom(
    "jobId",
    "delayMs",
    "runAt",
    "priority",
    "attempts",
    "backoff",
    "timeoutMs",
    "removeOnComplete",
    "removeOnFail",
    "callbackUrl",
    "meta",
    "bogus",
  ),
  fc.oneof(
    jsonish,
    fc.constantFrom(
      1,
      -1,
      0,
      1.5,
      1e300,
      "2030-01-01T00:00:00Z",
      "yesterday",
      { type: "fixed", delayMs: 5 },
      { type: "exponential" },
      { ageMs: 5 },
      true,
      "http://127.0.0.1:9/x",
      "https://10.0.0.1/",
      "https://example.com/hook",
      { conveyor: 1 },
      { trace: "t" },
    ),
  ),
  { maxKeys: 4 },
);
const jobBody = fc.record(
  {
    name: fc.oneof(fc.constantFrom("a", "typed", "send-email", "", " ", "x".repeat(200), "bad name!"), jsonish),
    data: fc.oneof(jsonish, fc.record({ userId: fc.oneof(fc.string(), fc.integer()), n: fc.oneof(fc.integer(), fc.double()) }, { requiredKeys: [] })),
    options,
    extra: jsonish,
  },
  { requiredKeys: [] },
);
const body = fc.oneof(
  fc.constant(undefined),
  jobBody.map((b) => JSON.stringify(b)),
  fc.array(jobBody, { maxLength: 4 }).map((jobs) => JSON.stringify({ jobs })),
  fc.constantFrom(
    JSON.stringify({ ids: ["x"], all: true }),
    JSON.stringify({ all: true, limit: 2 }),
    JSON.stringify({ ids: [] }),
    "",
    "null",
    "[]",
    "{",
    '{"__proto__": {"x": 1}}',
    '{"name": "a", "constructor": {"prototype": {}}}',
    "x".repeat(20_000),
  ),
  jsonish.map((v) => JSON.stringify(v)),
  fc.string(),
);

const anything = fc.record({
  method: fc.constantFrom("GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"),
  path,
  query,
  auth,
  headers: extraHeaders,
  body,
});
/** Near-valid enqueues (one or two fields off), so the property also covers accepted requests. */
const plausibleJob = fc.record(
  {
    name: fc.constantFrom("a", "typed", "send-email", "typed", "bad name!"),
    data: fc.oneof(
      jsonish,
      fc.constant({ userId: "u_1" }),
      fc.record({ userId: fc.oneof(fc.string(), fc.integer()), n: fc.oneof(fc.integer(), fc.double()) }, { requiredKeys: [] }),
    ),
    options: fc.oneof({ weight: 3, arbitrary: fc.constant({}) }, { weight: 1, arbitrary: options }),
  },
  { requiredKeys: ["name"] },
);
const plausible = fc.record({
  method: fc.constant("POST"),
  path: fc.tuple(fc.constantFrom("q", "email", "a%2Fb", "conveyor.webhooks"), fc.boolean()).map(([q, bulk]) => `/v1/queues/${q}/jobs${bulk ? "/bulk" : ""}`),
  query: fc.constant(""),
  auth: fc.constantFrom<Record<string, string>>({ authorization: `Bearer ${ADMIN}` }, { authorization: `Bearer ${PRODUCER}` }, {}),
  headers: fc.oneof(
    fc.constant<Record<string, string>>({ "content-type": "application/json" }),
    fc.record({ "content-type": fc.constant("application/json"), "idempotency-key": fc.constantFrom("k1", "k2", "") }),
  ),
  body: fc.oneof(
    plausibleJob.map((b) => JSON.stringify(b)),
    fc.array(plausibleJob, { minLength: 1, maxLength: 3 }).map((jobs) => JSON.stringify({ jobs })),
  ),
});
const request = fc.oneof({ weight: 2, arbitrary: anything }, { weight: 1, arbitrary: plausible });

async function stored(): Promise<string[]> {
  return (await h.backend.list({}, { limit: 1000 })).map((j) => j.id);
}

describe("random and malformed requests against every route", () => {
  it("never answer 5xx, answer errors as problem documents, and store jobs only for accepted requests", async () => {
    const statuses = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(request, async (r) => {
        const before = new Set(await stored());
        const withBody = r.method !== "GET" && r.method !== "HEAD" && r.body !== undefined;
        let res: Response;
        try {
          res = await fetch(`${h.url}${r.path}${r.query}`, {
            method: r.method,
            headers: { ...r.headers, ...r.auth },
            body: withBody ? r.body : undefined,
            signal: AbortSignal.timeout(10_000),
          });
        } catch (error) {
          // fetch itself refuses some inputs (an invalid URL): nothing reached the server.
          if (error instanceof TypeError && !/fetch failed/.test(error.message)) return;
          throw error;
        }
        const isStream = (res.headers.get("content-type") ?? "").startsWith("text/event-stream");
        const text = isStream ? "" : await res.text();
        if (isStream) await res.body?.cancel();
        expect(res.status, `${r.method} ${r.path}${r.query} -> ${text.slice(0, 300)}`).toBeLessThan(500);
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        if (res.status >= 400 && r.method !== "HEAD") {
          expect(res.headers.get("content-type")).toMatch(/^application\/problem\+json/);
          expect((JSON.parse(text) as { status: number }).status).toBe(res.status);
        }
        // 202, or 200 for an options.jobId that already existed (nothing new stored then).
        const accepts = (res.status === 202 || res.status === 200) && r.method === "POST" && /\/jobs(\/bulk)?$/.test(r.path);
        if (accepts) {
          const answer = JSON.parse(text) as { jobId?: string; jobs?: Array<{ jobId: string }> };
          for (const id of answer.jobId ? [answer.jobId] : (answer.jobs ?? []).map((j) => j.jobId)) accepted.add(id);
        }
        const after = await stored();
        const added = after.filter((id) => !before.has(id));
        if (!accepts) expect(added, `${r.method} ${r.path} (${res.status}) stored jobs`).toEqual([]);
        for (const id of added) expect(accepted.has(id)).toBe(true);
      }),
      { numRuns: 1_000 },
    );
    // The generator reaches past authentication and validation, not only into 4xx.
    const ok = [...statuses].filter(([s]) => s < 300).reduce((n, [, c]) => n + c, 0);
    expect(ok, JSON.stringify([...statuses])).toBeGreaterThan(30);
    expect(statuses.get(202) ?? 0, JSON.stringify([...statuses])).toBeGreaterThan(10);
    // Still up, and every job in the store was accepted by some request.
    expect((await h.request("GET", "/v1/health")).status).toBe(200);
    for (const id of await stored()) expect(accepted.has(id)).toBe(true);
  }, 180_000);
});
