/**
 * Regression tests for the defects a probe of `conveyor serve` found (issue 10, "Security"), on
 * every store: each test names the probe item it pins and fails with that fix removed.
 */
import { uncheckedBackend } from "../../src/backend/checked.js";
import { createHash } from "node:crypto";
import { connect } from "node:net";
import { Writable } from "node:stream";
import type { FastifyInstance } from "fastify";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import type { JobRecord } from "../../src/core/job.js";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { createServer, hashApiKey, type ApiKeyConfig, type ServerOptions } from "../../src/http/index.js";
import { buildJobSpec, LATEST_RUN_AT } from "../../src/core/spec.js";
import { IdDeriver } from "../../src/http/derived-ids.js";
import { redactUrl } from "../../src/http/plugin.js";
import { TempDirs } from "../helpers/temp.js";
import { storeCases } from "./stores.js";
import { openStream, send, serverPerTest, type Harness, type Obj, type Reply, type RequestInit } from "./harness.js";

const temp = new TempDirs();
afterAll(() => temp.removeAll());
const cases = storeCases(temp, "hard");

const KEYS = {
  victim: "cvk_victim-producer-0123456789abcdef",
  attacker: "cvk_attacker-producer-0123456789abcd",
  reader: "cvk_reader-0123456789abcdef-reader",
  admin: "cvk_admin-0123456789abcdef-admin",
};
const API_KEYS: ApiKeyConfig[] = [
  { id: "victim", sha256: hashApiKey(KEYS.victim), scopes: ["enqueue", "read"] },
  { id: "attacker", sha256: hashApiKey(KEYS.attacker), scopes: ["enqueue"] },
  { id: "reader", sha256: hashApiKey(KEYS.reader), scopes: ["read"] },
  { id: "admin", sha256: hashApiKey(KEYS.admin), scopes: ["admin"] },
];

/** The backend with its `get` replaced by `get(inner, id, queue)`; every other member as it is. */
function withGet(
  backend: Backend,
  get: (inner: (id: string, queue?: string) => Promise<JobRecord | null>, id: string, queue?: string) => Promise<JobRecord | null>,
): Backend {
  const inner = (id: string, queue?: string) => (queue === undefined ? backend.get(id) : backend.get(id, queue));
  return new Proxy(backend, {
    get: (target, key) => (key === "get" ? (id: string, queue?: string) => get(inner, id, queue) : (Reflect.get(target, key) as unknown)),
  });
}

for (const c of cases) {
  describe.skipIf(c.unavailable !== "")(`probe regressions on ${c.name}${c.unavailable ? ` (skipped: ${c.unavailable})` : ""}`, () => {
    let backend: Backend;
    let app: FastifyInstance | null = null;
    let base = "";

    async function start(options: Partial<ServerOptions> = {}, wrap: (backend: Backend) => Backend = (b) => b): Promise<void> {
      backend = await c.make();
      app = await createServer({ backend: wrap(backend), apiKeys: API_KEYS, logger: false, ...options });
      await app.listen({ port: 0, host: "127.0.0.1" });
      base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
    }
    const as = <T = Obj>(key: string, method: string, path: string, init: RequestInit = {}): Promise<Reply<T>> =>
      send<T>(base, method, path, { ...init, headers: { authorization: `Bearer ${key}`, ...init.headers } });

    afterEach(async () => {
      await app?.close();
      await backend?.close();
      app = null;
    });

    it("probe 1: an id shared with another key's job never reaches that job (view, cancel, links)", async () => {
      await start();
      const victim = await as<{ jobId: string; pollUrl: string }>(KEYS.victim, "POST", "/v1/queues/zzz-victim/jobs", {
        body: { name: "send", options: { jobId: "order-42", delayMs: 60_000 } },
      });
      expect(victim.status).toBe(202);
      // The attacker copies the id into a queue of its own (on Redis ids are unique per queue,
      // so this is a second job; elsewhere the id is taken in another queue: 409, no link).
      const copy = await as<{ status: string }>(KEYS.attacker, "POST", "/v1/queues/aaa-attacker/jobs", {
        body: { name: "send", options: { jobId: "order-42", delayMs: 60_000 } },
      });
      expect([202, 409]).toContain(copy.status);
      for (let i = 0; i < 2; i++) {
        const cancel = await as(KEYS.attacker, "DELETE", "/v1/jobs/order-42");
        // 409 "which queue?" on Redis; 403 where the id names the victim's job alone.
        expect([403, 409], JSON.stringify(cancel.json)).toContain(cancel.status);
      }
      expect((await as(KEYS.attacker, "DELETE", "/v1/jobs/order-42?queue=zzz-victim")).status).toBe(403);
      expect((await backend.get("order-42", "zzz-victim"))?.state).toBe("scheduled");
      // The victim's links name its queue, so they reach its job whatever else holds the id.
      const view = await as<Obj>(KEYS.victim, "GET", victim.json.pollUrl);
      expect(view.status).toBe(200);
      expect(view.json).toMatchObject({ id: "order-42", queue: "zzz-victim", state: "scheduled" });
      // Without the queue, the id either names the victim's job alone or is refused: never the copy.
      const bare = await as<Obj>(KEYS.reader, "GET", "/v1/jobs/order-42");
      if (bare.status === 200) expect(bare.json).toMatchObject({ queue: "zzz-victim" });
      else expect(bare.status).toBe(409);
      expect((await as(KEYS.victim, "DELETE", victim.json.pollUrl)).status).toBe(200);
    });

    it("probe 1: every by-id route, with the victim's queue or none, reaches the victim's job or refuses to guess; the attacker acts only on its own copy", async () => {
      await start();
      const victim = await as<{ jobId: string; pollUrl: string }>(KEYS.victim, "POST", "/v1/queues/zzz-victim/jobs", {
        body: { name: "send", data: { owner: "victim" }, options: { jobId: "shared-1", attempts: 1 } },
      });
      expect(victim.status).toBe(202);
      // The victim's job dies (so dead-letter routes and replay apply to it).
      const [claimed] = await backend.claim({ queues: ["zzz-victim"], names: ["send"], worker: { id: "w", host: "h", pid: 1 }, limit: 1, leaseMs: 60_000 });
      await backend.fail([{ lease: claimed!.lease, error: { name: "Error", message: "boom", stack: null }, retryDelayMs: null }]);
      const copy = await as(KEYS.attacker, "POST", "/v1/queues/aaa-attacker/jobs", {
        body: { name: "send", data: { owner: "attacker" }, options: { jobId: "shared-1", delayMs: 60_000 } },
      });
      expect([202, 409]).toContain(copy.status);
      const copyStored = (await backend.get("shared-1", "aaa-attacker")) !== null;
      // Reads: with ?queue= the victim's job; bare, the victim's job where ids are store-wide, else 409.
      for (const route of ["/v1/jobs/shared-1", "/v1/jobs/shared-1/flow", "/v1/jobs/shared-1/logs"]) {
        const named = await as<Obj>(KEYS.reader, "GET", `${route}?queue=zzz-victim`);
        expect(named.status, `${route}: ${named.text}`).toBe(200);
        expect(JSON.stringify(named.json)).not.toContain("aaa-attacker");
        const bare = await as<Obj>(KEYS.reader, "GET", route);
        expect(bare.status, `${route}: ${bare.text}`).toBe(copyStored ? 409 : 200);
        if (bare.status === 200) expect(JSON.stringify(bare.json)).not.toContain("aaa-attacker");
      }
      const token = await as<{ eventsUrl: string }>(KEYS.reader, "POST", "/v1/jobs/shared-1/events/token?queue=zzz-victim");
      expect(token.status).toBe(200);
      const stream = await send(base, "GET", token.json.eventsUrl);
      // The victim's job is dead; the attacker's copy is scheduled.
      expect(stream.text).toContain('"state":"dead"');
      expect(stream.text).not.toContain('"state":"scheduled"');
      expect((await as(KEYS.reader, "POST", "/v1/jobs/shared-1/events/token")).status).toBe(copyStored ? 409 : 200);
      // Writes by the attacker (enqueue scope): never the victim's job.
      for (const path of ["/v1/jobs/shared-1", "/v1/jobs/shared-1?queue=zzz-victim"]) {
        const r = await as(KEYS.attacker, "DELETE", path);
        expect([403, 409], `${path}: ${r.text}`).toContain(r.status);
      }
      for (const [method, path] of [
        ["POST", "/v1/jobs/shared-1/replay?queue=zzz-victim"],
        ["DELETE", "/v1/queues/zzz-victim/dead/shared-1"],
      ] as const) {
        expect((await as(KEYS.attacker, method, path)).status, path).toBe(403);
      }
      expect((await as(KEYS.attacker, "POST", "/v1/queues/zzz-victim/dead/replay", { body: { ids: ["shared-1"] } })).status).toBe(403);
      expect(await backend.get("shared-1", "zzz-victim")).toMatchObject({ state: "dead", data: { owner: "victim" } });
      if (copyStored) {
        // Its own copy, named by its queue, is the attacker's to cancel; the victim's stays dead.
        expect((await as(KEYS.attacker, "DELETE", "/v1/jobs/shared-1?queue=aaa-attacker")).status).toBe(200);
        expect(await backend.get("shared-1", "zzz-victim")).toMatchObject({ state: "dead", data: { owner: "victim" } });
      }
      // The admin acts on the job its request names.
      expect((await as(KEYS.admin, "POST", "/v1/jobs/shared-1/replay?queue=zzz-victim")).status).toBe(200);
      expect(await backend.get("shared-1", "zzz-victim")).toMatchObject({ state: "waiting" });
    });

    it("an options.jobId held by a job of another queue is 409 without naming it or linking to it; in bulk nothing is stored", async () => {
      await start();
      // Redis keeps ids per queue: there the same id in another queue is another job.
      const idsPerQueue = backend.capabilities.jobIdsPerQueue === true;
      const held = await as<{ jobId: string }>(KEYS.victim, "POST", "/v1/queues/q3/jobs", { body: { name: "n", options: { jobId: "shared-id" } } });
      expect(held.status).toBe(202);

      const other = await as<Obj>(KEYS.attacker, "POST", "/v1/queues/q1/jobs", { body: { name: "n", options: { jobId: "shared-id" } } });
      if (idsPerQueue) expect(other.status).toBe(202);
      else {
        expect(other.status).toBe(409);
        expect(other.json.type).toContain("job-id-taken");
        expect(other.json.detail).toMatch(/another queue/);
        expect(other.headers.get("location")).toBeNull();
        expect(other.text).not.toContain("q3");
      }

      // In the job's own queue the duplicate answer stays, and its link reaches the job.
      const same = await as<{ status: string; pollUrl: string }>(KEYS.victim, "POST", "/v1/queues/q3/jobs", {
        body: { name: "n", options: { jobId: "shared-id" } },
      });
      expect(same.status).toBe(200);
      expect(same.json.status).toBe("duplicate");
      expect(same.headers.get("location")).toBe(same.json.pollUrl);
      expect((await as(KEYS.victim, "GET", same.json.pollUrl)).status).toBe(200);

      const bulk = await as<Obj>(KEYS.attacker, "POST", "/v1/queues/q1/jobs/bulk", {
        body: { jobs: [{ name: "n", options: { jobId: "fresh-1" } }, { name: "n", options: { jobId: "shared-id" } }, { name: "n" }] },
      });
      if (idsPerQueue) expect(bulk.status).toBe(202);
      else {
        expect(bulk.status).toBe(409);
        expect(bulk.json.type).toContain("job-id-taken");
        expect(bulk.json.errors).toEqual([expect.objectContaining({ pointer: "/jobs/1/options/jobId" })]);
        expect(bulk.text).not.toContain("q3");
        // Nothing of the refused batch is stored.
        expect(await backend.get("fresh-1", "q1")).toBeNull();
        expect((await as<{ jobs: Obj[] }>(KEYS.admin, "GET", "/v1/queues/q1/jobs")).json.jobs).toEqual([]);
      }

      // Same-queue duplicates in bulk keep their per-entry answer; the rest is stored.
      const sameBulk = await as<{ jobs: { status: string; jobId: string; pollUrl: string }[] }>(KEYS.victim, "POST", "/v1/queues/q3/jobs/bulk", {
        body: {
          jobs: [
            { name: "n", options: { jobId: "fresh-2" } },
            { name: "n", options: { jobId: "shared-id" } },
            { name: "n", options: { jobId: "fresh-2" } },
          ],
        },
      });
      expect(sameBulk.status).toBe(202);
      expect(sameBulk.json.jobs.map((j) => j.status)).toEqual(["queued", "duplicate", "duplicate"]);
      for (const j of sameBulk.json.jobs) expect((await as(KEYS.victim, "GET", j.pollUrl)).status).toBe(200);

      // Idempotency-Key ids are derived per queue: the same key on two queues makes two jobs, and
      // a retry in the same queue replays its own answer.
      const headers = { "idempotency-key": "k-1" };
      const first = await as<{ jobId: string; pollUrl: string }>(KEYS.victim, "POST", "/v1/queues/q1/jobs", { body: { name: "n" }, headers });
      const elsewhere = await as<{ jobId: string }>(KEYS.victim, "POST", "/v1/queues/q3/jobs", { body: { name: "n" }, headers });
      const retry = await as<{ jobId: string }>(KEYS.victim, "POST", "/v1/queues/q1/jobs", { body: { name: "n" }, headers });
      expect([first.status, elsewhere.status, retry.status]).toEqual([202, 202, 202]);
      expect(elsewhere.json.jobId).not.toBe(first.json.jobId);
      expect(retry.json.jobId).toBe(first.json.jobId);
      expect(retry.headers.get("idempotent-replayed")).toBe("true");
    });

    it("a bulk request with ids held by other queues answers as looking them up in request order would: the first such entry's 409, or the error of a lookup failing before it", async () => {
      // A failing lookup of p-7 (or of p-3), and a slow one of p-3: the error settles first.
      let failing = "p-7";
      await start({}, (b) =>
        withGet(b, async (get, id, queue) => {
          if (id === failing) throw new Error(`the store lost the connection looking up ${id}`);
          if (id === "p-3") await new Promise((resolve) => setTimeout(resolve, 50));
          return get(id, queue);
        }),
      );
      const idsPerQueue = backend.capabilities.jobIdsPerQueue === true;
      for (const jobId of ["p-3", "p-7"]) {
        expect((await as(KEYS.victim, "POST", "/v1/queues/held-elsewhere/jobs", { body: { name: "n", options: { jobId } } })).status).toBe(202);
      }
      const jobs = Array.from({ length: 10 }, (_, i) => ({ name: "n", options: { jobId: `p-${i}` } }));
      const bulk = () => as<{ type: string; errors: Obj[] }>(KEYS.attacker, "POST", "/v1/queues/q1/jobs/bulk", { body: { jobs } });
      if (idsPerQueue) {
        // Redis: another queue's id is another job; no lookup is made, nothing is refused.
        expect((await bulk()).status).toBe(202);
        return;
      }
      for (let attempt = 0; attempt < 3; attempt++) {
        const r = await bulk();
        expect(r.status, r.text).toBe(409);
        expect(r.json.type).toContain("job-id-taken");
        expect(r.json.errors).toEqual([expect.objectContaining({ pointer: "/jobs/3/options/jobId" })]);
      }
      // Entries 3 and 7 both held elsewhere, no lookup failing: always entry 3.
      failing = "none";
      for (let attempt = 0; attempt < 3; attempt++) expect((await bulk()).json.errors).toEqual([expect.objectContaining({ pointer: "/jobs/3/options/jobId" })]);
      // The lookup of entry 3 fails: that error is the answer, though entry 7 is another queue's.
      failing = "p-3";
      for (let attempt = 0; attempt < 3; attempt++) expect((await bulk()).status).toBe(500);
      expect((await as<{ jobs: Obj[] }>(KEYS.admin, "GET", "/v1/queues/q1/jobs")).json.jobs).toEqual([]);
    });

    it("a bulk request of 500 duplicate ids looks up at most 16 of them at once, and answers each entry as before", async () => {
      let inFlight = 0;
      let most = 0;
      let calls = 0;
      await start({}, (b) =>
        withGet(b, async (get, id, queue) => {
          calls++;
          most = Math.max(most, ++inFlight);
          try {
            // A round trip, as to PostgreSQL: lookups issued together overlap.
            await new Promise((resolve) => setTimeout(resolve, 2));
            return await get(id, queue);
          } finally {
            inFlight--;
          }
        }),
      );
      const jobs = Array.from({ length: 500 }, (_, i) => ({ name: "n", options: { jobId: `dup-${i}` } }));
      const first = await as<{ jobs: Array<{ status: string }> }>(KEYS.victim, "POST", "/v1/queues/qb/jobs/bulk", { body: { jobs } });
      expect(first.status, first.text).toBe(202);
      expect(new Set(first.json.jobs.map((j) => j.status))).toEqual(new Set(["queued"]));
      calls = 0;
      most = 0;
      const again = await as<{ jobs: Array<{ status: string; jobId: string }> }>(KEYS.victim, "POST", "/v1/queues/qb/jobs/bulk", {
        body: { jobs: [...jobs, { name: "n", options: { jobId: "dup-new" } }] },
      });
      expect(again.status, again.text).toBe(202);
      expect(again.json.jobs.map((j) => j.status)).toEqual([...jobs.map(() => "duplicate"), "queued"]);
      expect(again.json.jobs.map((j) => j.jobId)).toEqual([...jobs.map((j) => j.options.jobId), "dup-new"]);
      expect(calls).toBeGreaterThanOrEqual(500);
      expect(most).toBeLessThanOrEqual(16);
      expect(most).toBeGreaterThan(1);
    });

    it("probe 2: runAt past year 9999 is refused at enqueue; a stored row with such a time breaks no view or listing", async () => {
      await start();
      const huge = await as(KEYS.victim, "POST", "/v1/queues/q/jobs", { body: { name: "send", options: { runAt: 9007199254740991 } } });
      expect(huge.status).toBe(400);
      const latest = await as<{ pollUrl: string }>(KEYS.victim, "POST", "/v1/queues/q/jobs", { body: { name: "send", options: { runAt: LATEST_RUN_AT } } });
      expect(latest.status).toBe(202);
      expect((await as<Obj>(KEYS.victim, "GET", latest.json.pollUrl)).json).toMatchObject({ timings: { runAt: "9999-12-31T23:59:59.999Z" } });
      expect(() => buildJobSpec({ queue: "q", name: "send", data: null, options: { runAt: LATEST_RUN_AT + 1 } })).toThrow(/no later than 9999-12-31/);
      // A row stored before the bound existed (written straight to the store, as an older version did).
      const spec = {
        ...buildJobSpec({ queue: "q", name: "send", data: null, options: { jobId: "old-row", priority: 1 } }),
        delayMs: 0,
        runAt: 9007199254740991,
      };
      // Past the checking facade, which refuses such a time now.
      await uncheckedBackend(backend).enqueue([spec]);
      const view = await as<Obj>(KEYS.victim, "GET", "/v1/jobs/old-row?queue=q");
      expect(view.status, view.text).toBe(200);
      expect(view.json).toMatchObject({ id: "old-row", timings: { runAt: null } });
      const listing = await as<{ jobs: Obj[] }>(KEYS.admin, "GET", "/v1/queues/q/jobs");
      expect(listing.status, listing.text).toBe(200);
      expect(listing.json.jobs.map((j) => j.id)).toContain("old-row");
      expect((await as(KEYS.admin, "DELETE", "/v1/jobs/old-row?queue=q")).status).toBe(200);
    });

    it("probe 3: idem_ and whk_ ids are reserved, and derived ids are keyed with the server secret", async () => {
      const idSecret = "0123456789abcdef0123456789abcdef-id-secret";
      await start({ idSecret });
      for (const jobId of ["idem_" + "x".repeat(32), "whk_taken"]) {
        const r = await as<{ errors: Obj[] }>(KEYS.attacker, "POST", "/v1/queues/q/jobs", { body: { name: "send", options: { jobId } } });
        expect(r.status, r.text).toBe(422);
        expect(r.json.errors[0]).toMatchObject({ pointer: "/options/jobId" });
        const bulk = await as(KEYS.attacker, "POST", "/v1/queues/q/jobs/bulk", { body: { jobs: [{ name: "send" }, { name: "send", options: { jobId } }] } });
        expect(bulk.status).toBe(422);
      }
      expect(await backend.list({ queue: "q" })).toEqual([]);
      const r = await as<{ jobId: string }>(KEYS.victim, "POST", "/v1/queues/q/jobs", { body: { name: "send" }, headers: { "idempotency-key": "k1" } });
      expect(r.status).toBe(202);
      // Not computable from public inputs (key id, queue, header) alone:
      const unkeyed = `idem_${createHash("sha256").update("victim\u0000q\u0000k1").digest("base64url").slice(0, 32)}`;
      expect(r.json.jobId).toMatch(/^idem_[A-Za-z0-9_-]{32}$/);
      expect(r.json.jobId).not.toBe(unkeyed);
      expect(new IdDeriver(undefined, "x").derive("idem_", ["victim", "q", "k1"])).toBe(unkeyed);
      expect(new IdDeriver(idSecret, "x").derive("idem_", ["victim", "q", "k1"])).toBe(r.json.jobId);
    });

    it("probe 3: without a configured secret, idem_ ids are keyed with the API key's configured hash: not computable, yet the same after a restart and on another instance", async () => {
      await start();
      const body = { name: "send", data: { n: 1 } };
      const first = await as<{ jobId: string }>(KEYS.victim, "POST", "/v1/queues/q/jobs", { body, headers: { "idempotency-key": "k1" } });
      expect(first.status).toBe(202);
      const unkeyed = `idem_${createHash("sha256").update("victim\u0000q\u0000k1").digest("base64url").slice(0, 32)}`;
      expect(first.json.jobId).not.toBe(unkeyed);
      // A second instance (or the same one restarted) with the same key configuration derives the
      // same id, so the retry is answered from the stored job instead of storing it again.
      const other = await createServer({ backend, apiKeys: API_KEYS, logger: false });
      await other.listen({ port: 0, host: "127.0.0.1" });
      try {
        const otherBase = `http://127.0.0.1:${(other.server.address() as { port: number }).port}`;
        const retry = await send<{ jobId: string }>(otherBase, "POST", "/v1/queues/q/jobs", {
          body,
          headers: { authorization: `Bearer ${KEYS.victim}`, "idempotency-key": "k1" },
        });
        expect(retry.status).toBe(202);
        expect(retry.json.jobId).toBe(first.json.jobId);
        expect(retry.headers.get("idempotent-replayed")).toBe("true");
      } finally {
        await other.close();
      }
      expect((await backend.list({ queue: "q" })).length).toBe(1);
    });

    it("bulk Idempotency-Key race: requests refused with 422 store nothing; the answered batch is stored whole", async () => {
      await start();
      // 12 concurrent requests with one key, 4 with two jobs and 8 with three, for 12 rounds
      // (without the fix about one round in four stores the refused batch's third job).
      for (let round = 0; round < 12; round++) {
        const key = `race-${round}`;
        const two = {
          jobs: [
            { name: "send", data: { n: 1 } },
            { name: "send", data: { n: 2 } },
          ],
        };
        const three = {
          jobs: [
            { name: "send", data: { n: 1 } },
            { name: "send", data: { n: 2 } },
            { name: "send", data: { n: 3 } },
          ],
        };
        const bodies = Array.from({ length: 12 }, (_, i) => (i % 3 === 0 ? two : three));
        const answers = await Promise.all(
          bodies.map((body) =>
            as<{ jobs: Array<{ jobId: string }> }>(KEYS.victim, "POST", `/v1/queues/race${round}/jobs/bulk`, { body, headers: { "idempotency-key": key } }),
          ),
        );
        const statuses = answers.map((a) => a.status);
        expect(
          statuses.every((s) => s === 202 || s === 422),
          statuses.join(","),
        ).toBe(true);
        const winners = new Set(answers.flatMap((a, i) => (a.status === 202 ? [bodies[i]!.jobs.length] : [])));
        expect(winners.size, "every 202 answers the same batch").toBe(1);
        const stored = await backend.list({ queue: `race${round}` });
        // Exactly the answered batch: no job of a request refused with 422 (the third job of the
        // long batch, when a short one won) was left behind.
        expect(stored.map((j) => (j.data as { n: number }).n).sort()).toEqual([1, 2, 3].slice(0, [...winners][0]));
      }
    });

    it("probe 4: a stream token opens the job it was issued for, not a later job that reuses its id", async () => {
      await start();
      const first = await as<{ eventsUrl: string }>(KEYS.victim, "POST", "/v1/queues/q/jobs", {
        body: { name: "send", options: { jobId: "reused", attempts: 1 } },
      });
      expect(first.status).toBe(202);
      const [claimed] = await backend.claim({ queues: ["q"], names: ["send"], worker: { id: "w", host: "h", pid: 1 }, limit: 1, leaseMs: 60_000 });
      await backend.fail([{ lease: claimed!.lease, error: { name: "Error", message: "boom", stack: null }, retryDelayMs: null }]);
      const token = await as<{ token: string; eventsUrl: string }>(KEYS.victim, "POST", "/v1/jobs/reused/events/token?queue=q");
      expect(token.status).toBe(200);
      const before = await send(base, "GET", token.json.eventsUrl);
      expect(before.status).toBe(200);
      expect(before.text).toContain("event: state");
      expect((await as(KEYS.admin, "DELETE", "/v1/queues/q/dead/reused")).status).toBe(204);
      // Another key adds a job under the freed id (a ms later at least: creation times differ).
      await new Promise((r) => setTimeout(r, 5));
      expect((await as(KEYS.attacker, "POST", "/v1/queues/q/jobs", { body: { name: "send", options: { jobId: "reused", delayMs: 60_000 } } })).status).toBe(
        202,
      );
      const after = await send(base, "GET", token.json.eventsUrl);
      expect(after.status, after.text).toBe(401);
      const bare = await send(base, "GET", `/v1/jobs/reused/events?access_token=${encodeURIComponent(token.json.token)}`);
      expect(bare.status).toBe(401);
    });

    it("probe 5: deep JSON, NUL and unpaired surrogates in ids are 4xx, never 500", async () => {
      await start();
      const deep = `${"[".repeat(20_000)}${"]".repeat(20_000)}`;
      const deepObject = `${'{"a":'.repeat(20_000)}1${"}".repeat(20_000)}`;
      for (const raw of [`{"name":"send","data":${deep}}`, `{"name":"send","data":${deepObject}}`, `{"name":"send","options":{"meta":${deepObject}}}`]) {
        const variants: Array<Record<string, string>> = [{}, { "idempotency-key": `deep-${raw.length}` }];
        for (const headers of variants) {
          const r = await as(KEYS.victim, "POST", "/v1/queues/q/jobs", { raw, headers: { "content-type": "application/json", ...headers } });
          expect(r.status, r.text.slice(0, 200)).toBe(400);
        }
      }
      const bulk = await as(KEYS.victim, "POST", "/v1/queues/q/jobs/bulk", {
        raw: `{"jobs":[{"name":"send","data":${deep}}]}`,
        headers: { "content-type": "application/json" },
      });
      expect(bulk.status).toBe(400);
      // 128 levels of payload are fine.
      const ok = await as(KEYS.victim, "POST", "/v1/queues/q/jobs", {
        raw: `{"name":"send","data":${"[".repeat(127)}${"]".repeat(127)}}`,
        headers: { "content-type": "application/json" },
      });
      expect(ok.status, ok.text).toBe(202);
      for (const jobId of ["a\u0000b", "tab\there", "\ud800lone", "lone\udfff"]) {
        const r = await as(KEYS.victim, "POST", "/v1/queues/q/jobs", { body: { name: "send", options: { jobId } } });
        expect(r.status, `${JSON.stringify(jobId)}: ${r.text}`).toBe(400);
      }
      // A well-formed pair is a character like any other.
      expect((await as(KEYS.victim, "POST", "/v1/queues/q/jobs", { body: { name: "send", options: { jobId: "emoji-\u{1F680}" } } })).status).toBe(202);
      for (const path of ["/v1/jobs/a%00b", "/v1/jobs/%ED%A0%80", "/v1/jobs/a%00b/events", "/v1/queues/q/dead/a%00b"]) {
        const r = await as(KEYS.admin, path.endsWith("dead/a%00b") ? "DELETE" : "GET", path);
        expect(r.status, `${path}: ${r.text}`).toBeGreaterThanOrEqual(400);
        expect(r.status, `${path}: ${r.text}`).toBeLessThan(500);
      }
      const replay = await as(KEYS.admin, "POST", "/v1/queues/q/dead/replay", { body: { ids: ["a\u0000b"] } });
      expect(replay.status, replay.text).toBe(400);
      // The library refuses them as well.
      expect(() => buildJobSpec({ queue: "q", name: "send", data: null, options: { jobId: "a\u0000b" } })).toThrow(/control characters/);
      expect(() => buildJobSpec({ queue: "q", name: "send", data: JSON.parse(deep) as unknown })).toThrow(/128 levels/);
    });
  });
}

describe("probe 6: slow clients", () => {
  const apps: FastifyInstance[] = [];
  afterEach(async () => {
    for (const app of apps.splice(0)) await app.close();
  });

  async function serve(options: Partial<ServerOptions>): Promise<number> {
    const backend = new SqliteBackend({ path: await temp.file("slow.db") });
    const app = await createServer({ backend, apiKeys: false, logger: false, ...options });
    app.addHook("onClose", () => backend.close());
    apps.push(app);
    await app.listen({ port: 0, host: "127.0.0.1" });
    return (app.server.address() as { port: number }).port;
  }

  /** A raw connection that reads what the server answers; `trickle` sends a body a byte at a time. */
  function client(port: number, trickle: boolean): { closed: Promise<string>; stop(): void } {
    const socket = connect(port, "127.0.0.1");
    let answer = "";
    socket.on("data", (d: Buffer) => (answer += d.toString("latin1")));
    socket.on("error", () => undefined);
    let timer: NodeJS.Timeout | null = null;
    if (trickle) {
      socket.write("POST /v1/queues/q/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{");
      timer = setInterval(() => socket.write(" "), 100);
    }
    const stop = () => {
      if (timer) clearInterval(timer);
      socket.destroy();
    };
    const closed = new Promise<string>((resolve) => socket.on("close", () => resolve(answer)));
    void closed.then(stop);
    return { closed, stop };
  }

  async function closedWithin<T>(promise: Promise<T>, ms: number): Promise<T | null> {
    return Promise.race([promise, new Promise<null>((resolve) => setTimeout(() => resolve(null), ms))]);
  }

  it("a request still sending its body after requestTimeoutMs is cut off with 408, and so is a connection that sends nothing", async () => {
    const port = await serve({ requestTimeoutMs: 1_000 });
    const slow = [...Array.from({ length: 5 }, () => client(port, true)), client(port, false)];
    try {
      const answers = await closedWithin(Promise.all(slow.map((s) => s.closed)), 20_000);
      expect(answers, "every slow connection was closed").not.toBeNull();
      for (const a of answers!) expect(a).toMatch(/^HTTP\/1\.1 408/);
    } finally {
      for (const s of slow) s.stop();
    }
    expect((await send(`http://127.0.0.1:${port}`, "POST", "/v1/queues/q/jobs", { body: { name: "n" } })).status).toBe(202);
  });

  it("a connection idle for connectionTimeoutMs is closed; the timeout must exceed the event-stream heartbeat", async () => {
    const port = await serve({ requestTimeoutMs: 60_000, connectionTimeoutMs: 1_500, events: { heartbeatMs: 500 } });
    const idle = client(port, false);
    try {
      expect(await closedWithin(idle.closed, 20_000)).not.toBeNull();
    } finally {
      idle.stop();
    }
    await expect(serve({ connectionTimeoutMs: 10_000 })).rejects.toThrow(/must exceed events.heartbeatMs/);
  });
});

describe("probe 7: credentials in query strings", () => {
  it("are redacted from logs after decoding: access%5Ftoken, api_key, any cvk_ key, password-like names", async () => {
    let log = "";
    const stream = new Writable({
      write(chunk: Buffer, _encoding, done) {
        log += chunk.toString();
        done();
      },
    });
    const backend = new SqliteBackend({ path: await temp.file("log.db") });
    const app = await createServer({ backend, apiKeys: API_KEYS, logger: { level: "trace", stream } });
    await app.listen({ port: 0, host: "127.0.0.1" });
    const base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
    try {
      const r = await send<{ jobId: string }>(base, "POST", "/v1/queues/q/jobs", { body: { name: "n" }, headers: { authorization: `Bearer ${KEYS.victim}` } });
      const t = await send<{ token: string }>(base, "POST", `/v1/jobs/${r.json.jobId}/events/token`, { headers: { authorization: `Bearer ${KEYS.victim}` } });
      expect(t.status).toBe(200);
      const secrets = {
        token: t.json.token,
        key: KEYS.reader,
        other: "hunter2-not-a-real-password",
        sig: "c2lnbmF0dXJlLXZhbHVl",
      };
      const encoded = encodeURIComponent(secrets.token);
      const opened = await openStream(`${base}/v1/jobs/${r.json.jobId}/events?queue=q&access%5Ftoken=${encoded}`);
      expect(opened.status, "the encoded name still authenticates").toBe(200);
      opened.close();
      await send(base, "GET", `/v1/queues?api_key=${secrets.key}`);
      await send(base, "GET", `/v1/queues?k=${encodeURIComponent(secrets.key)}`);
      await send(base, "GET", `/v1/nowhere/${secrets.key}`);
      await send(base, "GET", `/v1/queues?Pass%77ord=${secrets.other}&X-Signature=${secrets.sig}`);
      expect(log).toContain("incoming request");
      for (const secret of Object.values(secrets)) {
        expect(log, secret).not.toContain(secret);
        expect(log, secret).not.toContain(encodeURIComponent(secret));
      }
      expect(redactUrl("/v1/x?queue=q&access%5Ftoken=abc&lastEventId=3")).toBe("/v1/x?queue=q&access%5Ftoken=[redacted]&lastEventId=3");
      for (const name of [
        "api_key",
        "apikey",
        "API%5FKEY",
        "key",
        "token",
        "access_token",
        "%61ccess_token",
        "x-api-key",
        "authorization",
        "client_secret",
        "password",
        "session",
        "jwt",
        "sig",
      ]) {
        expect(redactUrl(`/v1/x?queue=q&${name}=s3cr3t-value&limit=5`), name).toBe(`/v1/x?queue=q&${name}=[redacted]&limit=5`);
      }
    } finally {
      await app.close();
      await backend.close();
    }
  });
});

describe("decisions: revoked keys and other Authorization schemes", () => {
  const apps: FastifyInstance[] = [];
  afterEach(async () => {
    for (const app of apps.splice(0)) await app.close();
  });
  const secret = "0123456789abcdef0123456789abcdef-stream-secret";

  async function serve(backend: Backend, apiKeys: ApiKeyConfig[]): Promise<string> {
    const app = await createServer({ backend, apiKeys, logger: false, streamTokenSecret: secret });
    apps.push(app);
    await app.listen({ port: 0, host: "127.0.0.1" });
    return `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
  }

  it("a stream token stops working once the key that asked for it is revoked (or loses read)", async () => {
    const backend = new SqliteBackend({ path: await temp.file("revoke.db") });
    try {
      const before = await serve(backend, API_KEYS);
      const auth = { authorization: `Bearer ${KEYS.victim}` };
      const r = await send<{ jobId: string }>(before, "POST", "/v1/queues/q/jobs", { body: { name: "n" }, headers: auth });
      const t = await send<{ eventsUrl: string }>(before, "POST", `/v1/jobs/${r.json.jobId}/events/token`, { headers: auth });
      await backend.cancel(r.json.jobId);
      expect((await send(before, "GET", t.json.eventsUrl)).status).toBe(200);
      // Instances restarted with the key removed, or without its read scope.
      const revoked = await serve(
        backend,
        API_KEYS.filter((k) => k.id !== "victim"),
      );
      expect((await send(revoked, "GET", t.json.eventsUrl)).status).toBe(401);
      const demoted = await serve(
        backend,
        API_KEYS.map((k) => (k.id === "victim" ? { ...k, scopes: ["enqueue" as const] } : k)),
      );
      expect((await send(demoted, "GET", t.json.eventsUrl)).status).toBe(401);
      // Rotating the key under the same id keeps its tokens.
      const rotated = await serve(
        backend,
        API_KEYS.map((k) => (k.id === "victim" ? { ...k, sha256: hashApiKey("cvk_rotated-0123456789abcdefgh") } : k)),
      );
      expect((await send(rotated, "GET", t.json.eventsUrl)).status).toBe(200);
    } finally {
      for (const app of apps.splice(0)) await app.close();
      await backend.close();
    }
  });

  it("an Authorization header of another scheme leaves X-API-Key working; a broken Bearer header is 401", async () => {
    const backend = new SqliteBackend({ path: await temp.file("schemes.db") });
    try {
      const base = await serve(backend, API_KEYS);
      const basic = `Basic ${Buffer.from("proxy:pass").toString("base64")}`;
      expect((await send(base, "GET", "/v1/queues", { headers: { authorization: basic, "x-api-key": KEYS.reader } })).status).toBe(200);
      expect((await send(base, "GET", "/v1/queues", { headers: { authorization: basic } })).status).toBe(401);
      expect((await send(base, "GET", "/v1/queues", { headers: { authorization: "Bearer", "x-api-key": KEYS.reader } })).status).toBe(401);
      expect((await send(base, "GET", "/v1/queues", { headers: { authorization: "Bearer a b", "x-api-key": KEYS.reader } })).status).toBe(401);
      expect((await send(base, "GET", "/v1/queues", { headers: { authorization: `Bearer ${KEYS.reader}`, "x-api-key": "cvk_wrong" } })).status).toBe(200);
    } finally {
      for (const app of apps.splice(0)) await app.close();
      await backend.close();
    }
  });
});

describe("OpenAPI and methods", () => {
  it("every object in the OpenAPI document states additionalProperties (free-form ones: true)", async () => {
    const backend = new SqliteBackend({ path: await temp.file("doc.db") });
    const app = await createServer({ backend, apiKeys: false, logger: false });
    try {
      await app.listen({ port: 0, host: "127.0.0.1" });
      const base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
      const doc = (await send<Obj>(base, "GET", "/v1/openapi.json")).json;
      const missing: string[] = [];
      const walk = (node: unknown, where: string): void => {
        if (Array.isArray(node)) return node.forEach((n, i) => walk(n, `${where}/${i}`));
        if (node === null || typeof node !== "object") return;
        const o = node as Obj;
        const type = o.type;
        const isObject =
          type === "object" ||
          (Array.isArray(type) && type.includes("object")) ||
          (o.properties !== undefined && typeof o.properties === "object" && where.includes("schema"));
        if (isObject && o.additionalProperties === undefined) missing.push(where);
        for (const [k, v] of Object.entries(o)) walk(v, `${where}/${k}`);
      };
      walk(doc.paths, "");
      expect(missing).toEqual([]);
      const enqueue = (doc.paths as Obj)["/queues/{queue}/jobs"] as {
        post: { requestBody: { content: { "application/json": { schema: { properties: { options: { properties: { meta: Obj } } } } } } } };
      };
      expect(enqueue.post.requestBody.content["application/json"].schema.properties.options.properties.meta.additionalProperties).toBe(true);
      // Unsupported methods on a known path: 405 with Allow; unknown paths stay 404.
      const del = await send(base, "DELETE", "/v1/queues/q/jobs");
      expect(del.status).toBe(405);
      expect(del.headers.get("allow")).toBe("POST, GET, HEAD");
      const put = await send(base, "PUT", "/v1/jobs/some-id?queue=q");
      expect(put.status).toBe(405);
      expect(put.headers.get("allow")).toBe("GET, HEAD, DELETE");
      expect((await send(base, "POST", "/v1/jobs/some-id/events")).headers.get("allow")).toBe("GET");
      expect((await send(base, "GET", "/v1/nowhere")).status).toBe(404);
    } finally {
      await app.close();
      await backend.close();
    }
  });
});

describe("a tester's findings against conveyor serve", () => {
  const { startTestServer } = serverPerTest();
  let server: Harness | null = null;
  let base = "";
  async function start(options: Partial<ServerOptions> = {}): Promise<void> {
    server = await startTestServer({ apiKeys: API_KEYS, ...options });
    base = server.url;
  }
  const as = <T = Obj>(key: string, method: string, path: string, init: RequestInit = {}): Promise<Reply<T>> =>
    send<T>(base, method, path, { ...init, headers: { authorization: `Bearer ${key}`, ...init.headers } });

  it("a schedule cannot target a reserved queue or claim meta.conveyor: the enqueue route's rules apply", async () => {
    await start();
    const forged = await as<Obj>(KEYS.admin, "PUT", "/v1/queues/conveyor.webhooks/schedules/forge", {
      body: {
        cron: "* * * * * *",
        name: "webhook.deliver",
        data: { target: "callback", url: "http://127.0.0.1:18099/x", event: { type: "job.completed" } },
      },
    });
    expect(forged.status).toBe(403);
    expect(forged.json.type).toContain("reserved-queue");
    const owner = await as<Obj>(KEYS.admin, "PUT", "/v1/queues/q/schedules/impostor", {
      body: { cron: "* * * * * *", name: "n", options: { meta: { conveyor: { principal: "victim" } } } },
    });
    expect(owner.status).toBe(422);
    expect(owner.json.errors).toEqual([expect.objectContaining({ pointer: "/options/meta/conveyor" })]);
    expect((await as<{ schedules: Obj[] }>(KEYS.admin, "GET", "/v1/schedules")).json.schedules).toEqual([]);
    // The client's own metadata is still kept.
    const own = await as<Obj>(KEYS.admin, "PUT", "/v1/queues/q/schedules/mine", { body: { cron: "0 8 * * *", name: "n", options: { meta: { team: "a" } } } });
    expect(own.status).toBe(201);
  });

  it("an API key percent-encoded in a URL that does not decode is still redacted from logs", async () => {
    let log = "";
    const stream = new Writable({
      write(chunk: Buffer, _encoding, done) {
        log += chunk.toString();
        done();
      },
    });
    await start({ logger: { level: "trace", stream } });
    const rest = KEYS.reader.slice("cvk_".length);
    await send(base, "GET", `/v1/jobs/%ZZ/cvk%5F${rest}`);
    await send(base, "GET", `/v1/queues?x=%ZZcvk%5F${rest}`);
    await send(base, "GET", `/v1/queues?x=%ZZcvk%5f${encodeURIComponent(rest).replace(/-/g, "%2D")}`);
    await send(base, "GET", `/v1/nowhere/%ZZ%63vk_${rest}`);
    expect(log).toContain("incoming request");
    expect(log).not.toContain(rest);
    expect(log).not.toContain(rest.slice(0, 16));
    expect(redactUrl(`/v1/jobs/%ZZ/cvk%5F${rest}`)).not.toContain(rest.slice(0, 8));
    expect(redactUrl(`/v1/queues?x=%ZZcvk%5F${rest}&queue=q`)).toMatch(/queue=q$/);
  });

  it("a path with a trailing slash is a 404 that names no methods, not a self-contradicting 405", async () => {
    await start();
    const trailing = await as<Obj>(KEYS.admin, "GET", "/v1/jobs/x/");
    expect(trailing.status).toBe(404);
    expect(trailing.headers.get("allow")).toBeNull();
    expect((await as(KEYS.admin, "PUT", "/v1/queues/q/jobs/")).status).toBe(404);
    // Without it, the 405 still names the methods the path takes.
    expect((await as(KEYS.admin, "PUT", "/v1/jobs/x")).status).toBe(405);
  });

  it("a job stream's Last-Event-ID beyond the job's events or not an id it sent is 400, as on /v1/events; a valid one still gets the terminal event", async () => {
    await start();
    const auth = { authorization: `Bearer ${KEYS.victim}` };
    const r = await as<{ jobId: string; eventsUrl: string }>(KEYS.victim, "POST", "/v1/queues/q/jobs", { body: { name: "n" } });
    for (const lastEventId of ["999999999", "999999999.1.abc", "abc", "1.x"]) {
      // headersOnly: a stream wrongly opened must fail the test, not hang it.
      const s = await as(KEYS.victim, "GET", r.json.eventsUrl, { headers: { "last-event-id": lastEventId }, headersOnly: true });
      expect(s.status, lastEventId).toBe(400);
    }
    expect((await as(KEYS.victim, "GET", `${r.json.eventsUrl}&lastEventId=999999999`, { headersOnly: true })).status).toBe(400);
    const explained = await as<Obj>(KEYS.victim, "GET", r.json.eventsUrl, { headers: { "last-event-id": "999999999" } });
    expect(explained.json.detail).toMatch(/Last-Event-ID/);

    const resumed = await openStream(`${base}${r.json.eventsUrl}`, { ...auth, "last-event-id": "1" });
    expect(resumed.status).toBe(200);
    await server!.backend.cancel(r.json.jobId, "q");
    await resumed.ended;
    expect(resumed.events.map((e) => e.data.state)).toEqual(["cancelled"]);
    // Finished: out of range is still 400 (not a 204 that hides the terminal event); the last id is 204.
    expect((await as(KEYS.victim, "GET", r.json.eventsUrl, { headers: { "last-event-id": "999999999" }, headersOnly: true })).status).toBe(400);
    expect((await as(KEYS.victim, "GET", r.json.eventsUrl, { headers: { "last-event-id": "2" } })).status).toBe(204);
  });
});
