/**
 * The 202 Accepted contract over real HTTP: the answer, the estimate, idempotent retries,
 * validation (400 / 422 with field errors), 413, bulk.
 */
import type { IncomingMessage } from "node:http";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { defineJob, FakeClock } from "../../src/index.js";
import { createServer, hashApiKey } from "../../src/http/index.js";
import { waitFor } from "../helpers/wait-for.js";
import { send, serverPerTest, type Harness, type Obj } from "./harness.js";

const { temp, startTestServer } = serverPerTest();
let h: Harness | null = null;

interface Accepted {
  status: string;
  jobId: string;
  pollUrl: string;
  eventsUrl: string;
  estimatedDurationSeconds: number | null;
}

interface ProblemBody {
  type: string;
  status: number;
  detail: string;
  errors?: Array<{ in: string; pointer: string; detail: string }>;
}

const countJobs = async (backend: SqliteBackend) => (await backend.list({}, { limit: 1000 })).length;

describe("POST /v1/queues/:queue/jobs", () => {
  it("answers 202 with status, jobId, pollUrl, eventsUrl and an estimate, plus Location and Retry-After", async () => {
    h = await startTestServer();
    const r = await h.request<Accepted>("POST", "/v1/queues/email/jobs", {
      body: { name: "welcome", data: { userId: "u_1" }, options: { priority: 5, attempts: 4 } },
    });
    expect(r.status).toBe(202);
    expect(r.json).toMatchObject({ status: "queued", estimatedDurationSeconds: null });
    // Links name the queue: on Redis ids are unique per queue only.
    expect(r.json.pollUrl).toBe(`/v1/jobs/${r.json.jobId}?queue=email`);
    expect(r.json.eventsUrl).toBe(`/v1/jobs/${r.json.jobId}/events?queue=email`);
    expect(r.headers.get("location")).toBe(r.json.pollUrl);
    expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);

    const stored = await h.backend.get(r.json.jobId);
    expect(stored).toMatchObject({ queue: "email", name: "welcome", data: { userId: "u_1" }, priority: 5, maxAttempts: 4, state: "waiting" });
    const status = await h.request("GET", r.json.pollUrl);
    expect(status.status).toBe(200);
    expect(status.json).toMatchObject({ id: r.json.jobId, state: "waiting", attempts: { made: 0, max: 4 } });
  });

  it("accepts runAt as an RFC 3339 time and delayMs, storing a scheduled job", async () => {
    h = await startTestServer();
    const at = new Date(Date.now() + 3_600_000).toISOString();
    const a = await h.request<Accepted>("POST", "/v1/queues/q/jobs", { body: { name: "later", options: { runAt: at } } });
    const b = await h.request<Accepted>("POST", "/v1/queues/q/jobs", { body: { name: "later", options: { delayMs: 60_000 } } });
    expect([a.status, b.status]).toEqual([202, 202]);
    expect(await h.backend.get(a.json.jobId)).toMatchObject({ state: "scheduled", runAt: Date.parse(at) });
    expect((await h.backend.get(b.json.jobId))?.state).toBe("scheduled");
  });

  it("a known options.jobId answers 200 with status duplicate and adds nothing", async () => {
    h = await startTestServer();
    const first = await h.request<Accepted>("POST", "/v1/queues/q/jobs", { body: { name: "n", options: { jobId: "order-7" } } });
    const again = await h.request<Accepted>("POST", "/v1/queues/q/jobs", { body: { name: "n", data: { other: true }, options: { jobId: "order-7" } } });
    expect(first.status).toBe(202);
    expect(again.status).toBe(200);
    expect(again.json).toMatchObject({ status: "duplicate", jobId: "order-7" });
    expect(await countJobs(h.backend)).toBe(1);
  });

  it("refuses Conveyor's own queues (a forged webhook delivery would be signed by the server)", async () => {
    h = await startTestServer();
    const r = await h.request<ProblemBody>("POST", "/v1/queues/conveyor.webhooks/jobs", { body: { name: "webhook.deliver", data: {} } });
    expect(r.status).toBe(403);
    expect(r.json.type).toBe("urn:conveyor:problem:reserved-queue");
    expect(await countJobs(h.backend)).toBe(0);
  });
});

describe("estimatedDurationSeconds", () => {
  it("is the median run time of recent completed jobs of the name plus the queue's head-of-line wait", async () => {
    const clock = new FakeClock();
    const backend = new SqliteBackend({ path: await temp.file("jobs.db"), clock });
    const app = await createServer({ backend, apiKeys: false, logger: false, estimate: { cacheMs: 0 } });
    await app.listen({ port: 0, host: "127.0.0.1" });
    const base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
    try {
      const worker = { id: "w", host: "h", pid: 1 };
      // Three completed runs of 1 s, 2 s and 9 s: the median is 2 s (a mean would say 4).
      for (const ms of [1_000, 2_000, 9_000]) {
        await send(base, "POST", "/v1/queues/media/jobs", { body: { name: "transcode" } });
        const [claimed] = await backend.claim({ queues: ["media"], names: ["transcode"], worker, limit: 1, leaseMs: 60_000 });
        clock.advance(ms);
        await backend.complete([{ lease: claimed!.lease, result: null }]);
      }
      const quiet = await send<Accepted>(base, "POST", "/v1/queues/media/jobs", { body: { name: "transcode" } });
      expect(quiet.json.estimatedDurationSeconds).toBe(2);
      expect(quiet.headers.get("retry-after")).toBe("2");

      // The job just added now waits; 5 s later a newcomer is told 5 s of queue wait + 2 s.
      clock.advance(5_000);
      const busy = await send<Accepted>(base, "POST", "/v1/queues/media/jobs", { body: { name: "transcode" } });
      expect(busy.json.estimatedDurationSeconds).toBe(7);

      // A delayed job adds its delay; another name has no history: unknown.
      const delayed = await send<Accepted>(base, "POST", "/v1/queues/media/jobs", { body: { name: "transcode", options: { delayMs: 60_000 } } });
      expect(delayed.json.estimatedDurationSeconds).toBeGreaterThanOrEqual(66.9);
      expect(delayed.headers.get("retry-after")).toBe("60");
      const unknown = await send<Accepted>(base, "POST", "/v1/queues/media/jobs", { body: { name: "thumbnail" } });
      expect(unknown.json.estimatedDurationSeconds).toBeNull();
      expect(unknown.headers.get("retry-after")).toBe("1");
    } finally {
      await app.close();
      await backend.close();
    }
  });
});

describe("Idempotency-Key", () => {
  it("a retried request gets the same answer for the same job, and nothing new is stored", async () => {
    h = await startTestServer();
    const body = { name: "charge", data: { orderId: "o_1", cents: 1200 } };
    const first = await h.request<Accepted>("POST", "/v1/queues/payments/jobs", { body, headers: { "idempotency-key": "order-o_1" } });
    // Same JSON with another key order and spacing is the same request.
    const retry = await h.request<Accepted>("POST", "/v1/queues/payments/jobs", {
      raw: '{ "data": { "cents": 1200, "orderId": "o_1" }, "name": "charge" }',
      headers: { "idempotency-key": "order-o_1", "content-type": "application/json" },
    });
    expect(first.status).toBe(202);
    expect(retry.status).toBe(202);
    expect(retry.text).toBe(first.text);
    expect(retry.headers.get("location")).toBe(first.headers.get("location"));
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    expect(await countJobs(h.backend)).toBe(1);
  });

  it("reusing a key with a different body is refused with 422 and stores nothing", async () => {
    h = await startTestServer();
    await h.request("POST", "/v1/queues/payments/jobs", { body: { name: "charge", data: { cents: 1 } }, headers: { "idempotency-key": "k" } });
    const other = await h.request<ProblemBody>("POST", "/v1/queues/payments/jobs", {
      body: { name: "charge", data: { cents: 2 } },
      headers: { "idempotency-key": "k" },
    });
    expect(other.status).toBe(422);
    expect(other.json.type).toBe("urn:conveyor:problem:idempotency-key-reused");
    expect(await countJobs(h.backend)).toBe(1);
    expect((await h.backend.list())[0]!.data).toEqual({ cents: 1 });
  });

  it("keys are scoped by API key and queue", async () => {
    const keys = [
      { id: "a", sha256: hashApiKey("key-a-0123456789abcdef"), scopes: ["enqueue" as const] },
      { id: "b", sha256: hashApiKey("key-b-0123456789abcdef"), scopes: ["enqueue" as const] },
    ];
    h = await startTestServer({ apiKeys: keys });
    const post = (key: string, queue: string) =>
      h!.request<Accepted>("POST", `/v1/queues/${queue}/jobs`, { body: { name: "n" }, headers: { "idempotency-key": "same", authorization: `Bearer ${key}` } });
    const ids = new Set([
      (await post("key-a-0123456789abcdef", "q1")).json.jobId,
      (await post("key-b-0123456789abcdef", "q1")).json.jobId,
      (await post("key-a-0123456789abcdef", "q2")).json.jobId,
      (await post("key-a-0123456789abcdef", "q1")).json.jobId,
    ]);
    expect(ids.size).toBe(3);
    expect(await countJobs(h.backend)).toBe(3);
  });

  it("concurrent retries of one request create exactly one job", async () => {
    h = await startTestServer();
    const replies = await Promise.all(
      Array.from({ length: 12 }, () =>
        h!.request<Accepted>("POST", "/v1/queues/q/jobs", { body: { name: "n", data: { x: 1 } }, headers: { "idempotency-key": "burst" } }),
      ),
    );
    expect(replies.every((r) => r.status === 202)).toBe(true);
    expect(new Set(replies.map((r) => r.json.jobId)).size).toBe(1);
    expect(await countJobs(h.backend)).toBe(1);
  });

  it("refuses options.jobId together with a key (422), and an over-long key (400)", async () => {
    h = await startTestServer();
    const both = await h.request<ProblemBody>("POST", "/v1/queues/q/jobs", {
      body: { name: "n", options: { jobId: "x" } },
      headers: { "idempotency-key": "k" },
    });
    expect(both.status).toBe(422);
    expect(both.json.errors?.[0]?.pointer).toBe("/options/jobId");
    const long = await h.request<ProblemBody>("POST", "/v1/queues/q/jobs", { body: { name: "n" }, headers: { "idempotency-key": "k".repeat(300) } });
    expect(long.status).toBe(400);
    expect(long.json.errors?.[0]).toMatchObject({ in: "headers", pointer: "/idempotency-key" });
    expect(await countJobs(h.backend)).toBe(0);
  });
});

describe("validation", () => {
  const signup = defineJob("send-welcome", z.object({ userId: z.string(), locale: z.enum(["en", "fr"]).optional() }), { attempts: 7 });

  it("400 for a body that is not JSON, or not of the documented shape, with every field error", async () => {
    h = await startTestServer();
    const broken = await h.request<ProblemBody>("POST", "/v1/queues/q/jobs", { raw: '{"name": "n",', headers: { "content-type": "application/json" } });
    expect(broken.status).toBe(400);
    expect(broken.json.type).toBe("urn:conveyor:problem:invalid-json");
    expect(broken.headers.get("content-type")).toMatch(/^application\/problem\+json/);

    const shape = await h.request<ProblemBody>("POST", "/v1/queues/q/jobs", { body: { name: 5, options: { priority: "high", retries: 3 } } });
    expect(shape.status).toBe(400);
    expect(shape.json.errors).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ in: "body", pointer: "/name" }),
        expect.objectContaining({ in: "body", pointer: "/options/priority" }),
        expect.objectContaining({ in: "body", pointer: "/options/retries", detail: expect.stringContaining("not a known property") as string }),
      ]),
    );
    const empty = await h.request("POST", "/v1/queues/q/jobs", { raw: "", headers: { "content-type": "application/json" } });
    expect(empty.status).toBe(400);
    const text = await h.request("POST", "/v1/queues/q/jobs", { raw: "name=n", headers: { "content-type": "text/plain" } });
    expect(text.status).toBe(415);
    const badQueue = await h.request<ProblemBody>("POST", "/v1/queues/bad%20queue!/jobs", { body: { name: "n" } });
    expect(badQueue.status).toBe(400);
    expect(badQueue.json.errors?.[0]).toMatchObject({ in: "params", pointer: "/queue" });
    expect(await countJobs(h.backend)).toBe(0);
  });

  it("422 with field errors when the payload fails the job's registered schema; its defaults apply", async () => {
    h = await startTestServer({ jobs: [signup] });
    const bad = await h.request<ProblemBody>("POST", "/v1/queues/email/jobs", { body: { name: "send-welcome", data: { userId: 42, locale: "de" } } });
    expect(bad.status).toBe(422);
    expect(bad.json.type).toBe("urn:conveyor:problem:invalid-payload");
    expect(bad.json.errors?.map((e) => e.pointer).sort()).toEqual(["/data/locale", "/data/userId"]);
    const ok = await h.request<Accepted>("POST", "/v1/queues/email/jobs", { body: { name: "send-welcome", data: { userId: "u_1" } } });
    expect(ok.status).toBe(202);
    expect((await h.backend.get(ok.json.jobId))?.maxAttempts).toBe(7);
    // With a registry, names outside it are refused.
    const unknown = await h.request<ProblemBody>("POST", "/v1/queues/email/jobs", { body: { name: "send-spam" } });
    expect(unknown.status).toBe(422);
    expect(unknown.json.errors?.[0]?.pointer).toBe("/name");
    expect(await countJobs(h.backend)).toBe(1);
  });

  it("422 for Conveyor's own rules: reserved meta key, callbackUrl without webhooks", async () => {
    h = await startTestServer();
    const meta = await h.request<ProblemBody>("POST", "/v1/queues/q/jobs", { body: { name: "n", options: { meta: { conveyor: 1 } } } });
    expect(meta.status).toBe(422);
    expect(meta.json.errors?.[0]?.pointer).toBe("/options/meta/conveyor");
    const callback = await h.request<ProblemBody>("POST", "/v1/queues/q/jobs", { body: { name: "n", options: { callbackUrl: "https://example.com/hook" } } });
    expect(callback.status).toBe(422);
    expect(callback.json.detail).toMatch(/callbacks are not enabled/);
    expect(await countJobs(h.backend)).toBe(0);
  });

  it("413 above the body limit (default 256 KiB; configurable), and nothing is stored", async () => {
    h = await startTestServer();
    const big = await h.request<ProblemBody>("POST", "/v1/queues/q/jobs", { body: { name: "n", data: "x".repeat(256 * 1024) } });
    expect(big.status).toBe(413);
    expect(big.json.type).toBe("urn:conveyor:problem:body-too-large");
    const fits = await h.request("POST", "/v1/queues/q/jobs", { body: { name: "n", data: "x".repeat(200 * 1024) } });
    expect(fits.status).toBe(202);
    await h.close();

    h = await startTestServer({ maxBodyBytes: 1024 });
    expect((await h.request("POST", "/v1/queues/q/jobs", { body: { name: "n", data: "x".repeat(2000) } })).status).toBe(413);
    expect((await h.request("POST", "/v1/queues/q/jobs", { body: { name: "n", data: "x".repeat(900) } })).status).toBe(202);
    expect(await countJobs(h.backend)).toBe(1);
  });
});

describe("POST /v1/queues/:queue/jobs/bulk", () => {
  it("stores every job in one batch and answers one entry per job, in order", async () => {
    h = await startTestServer();
    const r = await h.request<{ status: string; count: number; jobs: Accepted[] }>("POST", "/v1/queues/q/jobs/bulk", {
      body: {
        jobs: [
          { name: "a", data: { i: 0 } },
          { name: "b", data: { i: 1 }, options: { priority: 3 } },
          { name: "a", data: { i: 2 } },
        ],
      },
    });
    expect(r.status).toBe(202);
    expect(r.json.count).toBe(3);
    const stored = await Promise.all(r.json.jobs.map((j) => h!.backend.get(j.jobId)));
    expect(stored.map((j) => (j?.data as Obj).i)).toEqual([0, 1, 2]);
    expect(stored[1]?.priority).toBe(3);
  });

  it("one invalid job rejects the whole batch with its index in the pointer; nothing is stored", async () => {
    h = await startTestServer({ jobs: [defineJob("typed", z.object({ n: z.number() }))], allowUnregisteredJobs: true });
    const r = await h.request<ProblemBody>("POST", "/v1/queues/q/jobs/bulk", {
      body: { jobs: [{ name: "free" }, { name: "typed", data: { n: "one" } }] },
    });
    expect(r.status).toBe(422);
    expect(r.json.errors?.[0]?.pointer).toBe("/jobs/1/data/n");
    const tooMany = await h.request("POST", "/v1/queues/q/jobs/bulk", { body: { jobs: Array.from({ length: 1001 }, () => ({ name: "x" })) } });
    expect(tooMany.status).toBe(400);
    expect(await countJobs(h.backend)).toBe(0);
  });

  it("is idempotent as a whole with Idempotency-Key", async () => {
    h = await startTestServer();
    const body = { jobs: [{ name: "a" }, { name: "b" }] };
    const first = await h.request("POST", "/v1/queues/q/jobs/bulk", { body, headers: { "idempotency-key": "batch-1" } });
    const again = await h.request("POST", "/v1/queues/q/jobs/bulk", { body, headers: { "idempotency-key": "batch-1" } });
    expect(again.text).toBe(first.text);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    const changed = await h.request("POST", "/v1/queues/q/jobs/bulk", {
      body: { jobs: [{ name: "a" }, { name: "c" }] },
      headers: { "idempotency-key": "batch-1" },
    });
    expect(changed.status).toBe(422);
    expect(await countJobs(h.backend)).toBe(2);
  });

  it("stores nothing when a reused Idempotency-Key comes with a longer batch (found by the property test)", async () => {
    h = await startTestServer();
    await h.request("POST", "/v1/queues/q/jobs/bulk", { body: { jobs: [{ name: "a" }] }, headers: { "idempotency-key": "k1" } });
    const longer = await h.request("POST", "/v1/queues/q/jobs/bulk", {
      body: { jobs: [{ name: "a" }, { name: "b" }, { name: "c" }] },
      headers: { "idempotency-key": "k1" },
    });
    expect(longer.status).toBe(422);
    expect(longer.json.type).toBe("urn:conveyor:problem:idempotency-key-reused");
    expect(await countJobs(h.backend)).toBe(1);
  });
});

describe("group commit", () => {
  it("stores the jobs of concurrent requests with fewer backend calls, each answered after its own commit", async () => {
    const batches: number[] = [];
    h = await startTestServer(
      {},
      {
        wrap: (backend) =>
          Object.assign(Object.create(backend) as SqliteBackend, {
            // A store with a round trip (like PostgreSQL): requests arriving meanwhile queue up.
            enqueue: async (specs: Parameters<SqliteBackend["enqueue"]>[0]) => {
              batches.push(specs.length);
              await new Promise((r) => setTimeout(r, 30));
              return backend.enqueue(specs);
            },
          }),
      },
    );
    const replies = await Promise.all(
      Array.from({ length: 60 }, (_, i) => h!.request<Accepted>("POST", "/v1/queues/q/jobs", { body: { name: "n", data: { i } } })),
    );
    expect(replies.every((r) => r.status === 202)).toBe(true);
    for (const r of replies) expect(await h.backend.get(r.json.jobId)).not.toBeNull();
    expect(batches.reduce((a, b) => a + b, 0)).toBe(60);
    expect(batches.length).toBeLessThan(30);
    expect(Math.max(...batches)).toBeGreaterThan(1);
  });

  it("a batch that fails is retried request by request: one request's failure is not another's", async () => {
    // The store refuses any call that holds the poison job. The first call of each round is held
    // until the server has read every request of the round, so the rest pile up behind it and go
    // to the store together: the poison shares a batch with healthy requests.
    const calls: string[][] = [];
    let hold: Promise<void> | null = null;
    h = await startTestServer(
      {},
      {
        wrap: (backend) =>
          Object.assign(Object.create(backend) as SqliteBackend, {
            enqueue: async (specs: Parameters<SqliteBackend["enqueue"]>[0]) => {
              calls.push(specs.map((s) => s.name));
              if (hold) {
                const wait = hold;
                hold = null;
                await wait;
              }
              if (specs.some((s) => s.name === "poison")) throw new Error("the store refused this batch");
              return backend.enqueue(specs);
            },
          }),
      },
    );
    let received = 0;
    h.app.server.on("request", (req: IncomingMessage) => req.once("end", () => received++));
    const sharedBatches: number[] = [];
    let stored = 0;
    for (let round = 0; round < 10 && sharedBatches.length === 0; round++) {
      calls.length = 0;
      received = 0;
      let open!: () => void;
      hold = new Promise<void>((resolve) => (open = resolve));
      const first = h.request("POST", "/v1/queues/q/jobs", { body: { name: "n" } });
      await waitFor(() => calls.length === 1, { description: "the first request reached the store" });
      const rest = Array.from({ length: 19 }, (_, i) => h!.request("POST", "/v1/queues/q/jobs", { body: { name: i === 7 ? "poison" : "n" } }));
      await waitFor(() => received === 20, { description: "the server read every request" });
      // Let the requests read last get through validation into the batcher.
      await new Promise((resolve) => setImmediate(resolve));
      open();
      const replies = [await first, ...(await Promise.all(rest))];
      expect(replies.map((r) => r.status)).toEqual(Array.from({ length: 20 }, (_, i) => (i === 8 ? 500 : 202)));
      expect(replies[8]!.json).toMatchObject({ type: "urn:conveyor:problem:internal" });
      stored += 19;
      expect(await countJobs(h.backend)).toBe(stored);
      const poisonBatch = calls.find((names) => names.length > 1 && names.includes("poison"));
      if (poisonBatch) sharedBatches.push(poisonBatch.length);
    }
    // The retry above was exercised: the poison went to the store with other requests at least once.
    expect(sharedBatches.length).toBe(1);
    expect(sharedBatches[0]).toBeGreaterThan(1);
  });
});
