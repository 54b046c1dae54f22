/**
 * What the conformance suite cannot see on Redis: script loading and recovery, the server checks,
 * Redis' own clock, the key layout, wake-ups over pub/sub, and faults (connections killed, Redis
 * restarted or SIGKILLed mid-run) with the real worker runtime on top.
 *
 * Tests that kill, restart or reconfigure a server run their own (test/helpers/redis.ts); the
 * others share the suite's server, each under its own key prefix.
 */
import { readdirSync, readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { Redis } from "ioredis";
import { afterEach, describe, expect, it } from "vitest";
import { openBackend } from "../../src/backend/open.js";
import { RedisBackend, type RedisBackendOptions } from "../../src/backend/redis/backend.js";
import { decodeWorker, encodeWorker, storedJobId } from "../../src/backend/redis/codec.js";
import { LAYOUT_VERSION } from "../../src/backend/redis/keys.js";
import { loadScripts } from "../../src/backend/redis/scripts.js";
import { AmbiguousJobIdError, FakeClock, Queue, silentLogger, Worker, type Logger, type WorkerOptions } from "../../src/index.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { startThrowawayRedis, testPrefix, type ThrowawayRedis } from "../helpers/redis.js";
import { redisTestStores } from "../helpers/redis-stores.js";
import { expectServerClock } from "../helpers/skewed-clock.js";
import { waitFor } from "../helpers/wait-for.js";

const servers: ThrowawayRedis[] = [];
// Registered before the stores, so it runs after they close (vitest runs afterEach hooks last
// first): a backend on one of these servers closes while its server still answers.
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.stop()));
});

const stores = redisTestStores({}, { prefixLabel: "spec" });
const { url, admin, closeAfterTest } = stores;
const workers: Worker[] = [];

// Registered after the stores, so it runs before they close.
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.close({ force: true })));
});

/** A backend on the shared server (or `connection`) under a fresh prefix, closed after the test. */
const backend = (options: Partial<RedisBackendOptions> = {}) => stores.backend(options);

function worker(options: WorkerOptions): Worker {
  const w = new Worker({ logger: silentLogger, ...options });
  workers.push(w);
  return w;
}

async function server(options: Parameters<typeof startThrowawayRedis>[0] = {}): Promise<ThrowawayRedis> {
  const s = await startThrowawayRedis(options);
  servers.push(s);
  return s;
}

/** A logger that keeps every message, to check what a fault was reported as. */
function recordingLogger(): Logger & { messages: string[] } {
  const messages: string[] = [];
  const keep = (_fields: object, message: string) => void messages.push(message);
  return { messages, info: keep, warn: keep, error: keep };
}

/** Every key matching `pattern` on the shared server. */
async function scanKeys(pattern: string): Promise<string[]> {
  const keys: string[] = [];
  let cursor = "0";
  do {
    const [next, page] = await admin.scan(cursor, "MATCH", pattern, "COUNT", 1000);
    cursor = next;
    keys.push(...page);
  } while (cursor !== "0");
  return keys;
}

/** Sum of MEMORY USAGE over the keys of a prefix (the memory figure of the Redis benchmark). */
async function prefixBytes(prefix: string, which: (key: string) => boolean = () => true): Promise<number> {
  const keys = [...(await scanKeys(`${prefix}:*`)), ...(await scanKeys(`{${prefix}:*`))].filter(which);
  const sizes = await Promise.all(keys.map((key) => admin.call("MEMORY", "USAGE", key, "SAMPLES", "0")));
  return sizes.reduce((sum: number, n) => sum + Number(n), 0);
}

const spec = (input: { jobId?: string; queue?: string; name?: string; data?: unknown; delayMs?: number } = {}) =>
  buildJobSpec({
    queue: input.queue ?? "q",
    name: input.name ?? "job",
    data: input.data ?? {},
    options: { ...(input.jobId ? { jobId: input.jobId } : {}), ...(input.delayMs ? { delayMs: input.delayMs } : {}) },
  });

const WORKER = { id: "w1", host: "h", pid: 1 };

describe("scripts", () => {
  it("every script file opens with a header documenting its KEYS, ARGV and return value", () => {
    const dir = new URL("../../src/backend/redis/lua/", import.meta.url);
    const files = readdirSync(dir).filter((f) => f.endsWith(".lua") && !f.startsWith("_"));
    expect(files.length).toBeGreaterThanOrEqual(16);
    for (const file of files) {
      const text = readFileSync(new URL(file, dir), "utf8");
      const header = text.slice(0, text.indexOf("]]"));
      const keys = Number(/-(\d+)\.lua$/.exec(file)![1]);
      expect(text.startsWith("--[["), file).toBe(true);
      for (let k = 1; k <= keys; k++) expect(header, `${file} documents KEYS[${k}]`).toContain(`KEYS[${k}]`);
      // One more only as the optional attempt key of an add (scripts.ts ATTEMPT_KEYED).
      const extra = `KEYS[${keys + 1}] (optional) attempt key`;
      expect(header.replace(extra, ""), `${file} documents no more keys than its name says`).not.toContain(`KEYS[${keys + 1}]`);
      expect(header, `${file} documents ARGV`).toMatch(/ARGV\[1\]/);
      expect(header, `${file} documents its return value`).toMatch(/Returns/);
    }
  });

  it("survives SCRIPT FLUSH: the next call sends the script again and later calls go by SHA", async () => {
    const b = backend({ clock: new FakeClock() });
    await b.enqueue([spec({ jobId: "before" })]);
    await admin.script("FLUSH");
    await b.enqueue([spec({ jobId: "after" })]);
    const claimed = await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 5, leaseMs: 1_000 });
    expect(claimed.map((c) => c.job.id)).toEqual(["before", "after"]);
    expect(await b.complete(claimed.map((c) => ({ lease: c.lease, result: null })))).toEqual(["applied", "applied"]);
    // The scripts used are back in Redis' cache (the server is Redis 7: the `#!lua` variants).
    const scripts = loadScripts();
    const shas = ["enqueue", "claim", "complete"].map((name) => scripts.get(name as "claim")!.flagged.sha);
    expect(await admin.script("EXISTS", ...shas)).toEqual([1, 1, 1]);
  });

  it("names the script in the errors Redis reports for it", async () => {
    const prefix = testPrefix("broken");
    const b = backend({ prefix, clock: new FakeClock() });
    await b.enqueue([spec({ jobId: "j" })]);
    const [c] = await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 1, leaseMs: 1_000 });
    // Another program scribbles over the job's options.
    await admin.hdel(`${prefix}:{q}:j:j`, "o");
    await expect(b.complete([{ lease: c!.lease, result: null }])).rejects.toThrow(new RegExp(`Redis script conveyor\\.complete\\.v${LAYOUT_VERSION} failed`));
  });
});

describe("server checks", () => {
  it("refuses a Redis that may evict keys, saying how to fix it; checkEvictionPolicy: false overrides", async () => {
    const lru = await server({ args: ["--maxmemory-policy", "allkeys-lru"] });
    const strict = backend({ connection: lru.url });
    await expect(strict.migrate()).rejects.toThrow(/maxmemory-policy allkeys-lru/);
    await expect(strict.enqueue([spec()])).rejects.toThrow(/noeviction.*checkEvictionPolicy: false/s);
    const lenient = backend({ connection: lru.url, checkEvictionPolicy: false });
    await lenient.migrate();
    expect(await lenient.enqueue([spec({ jobId: "ok" })])).toEqual([{ id: "ok", duplicate: false }]);
  });

  it("refuses data written in a newer layout", async () => {
    const prefix = stores.prefix("layout");
    await admin.set(`${prefix}:layout`, "99");
    await expect(backend({ prefix }).migrate()).rejects.toThrow(/layout version 99, newer than this Conveyor/);
    // Not only migrate: the first call of any kind checks the layout at connect, names both
    // versions, and writes nothing (an older process must not store jobs a newer one cannot see).
    const old = backend({ prefix });
    await expect(old.enqueue([spec({ jobId: "lost" })])).rejects.toThrow(/layout version 99, newer than this Conveyor \(knows up to \d+\); upgrade conveyor/);
    await expect(old.claim({ queues: ["q"], names: ["job"], worker: { id: "w", host: "h", pid: 1 }, limit: 1, leaseMs: 1_000 })).rejects.toThrow(
      /layout version 99/,
    );
    expect(await admin.get(`${prefix}:layout`)).toBe("99");
    expect((await admin.keys(`*${prefix}*`)).sort()).toEqual([`${prefix}:layout`]);
  });

  it("leaves a client it was given connected when closed", async () => {
    const client = new Redis(url);
    try {
      const b = new RedisBackend({ connection: client, prefix: testPrefix("own"), logger: silentLogger });
      await b.enqueue([spec()]);
      await b.close();
      expect(await client.ping()).toBe("PONG");
      expect(client.listenerCount("ready")).toBe(0);
    } finally {
      client.disconnect();
    }
  });
});

describe("Redis' own clock (no injected clock)", () => {
  it("now() and leases come from Redis TIME, not this process's clock", async () => {
    const b = backend();
    const serverNow = async () => {
      const [seconds, micros] = await admin.time();
      return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    };
    // This process's clock runs a day ahead; the server's does not.
    await expectServerClock(b, serverNow);
  });

  it("idempotency keys are SET NX PX keys that Redis expires itself", async () => {
    const prefix = testPrefix("once");
    const b = backend({ prefix });
    expect(await b.idempotency.once("charge:1", 60_000)).toBe(true);
    expect(await b.idempotency.once("charge:1", 60_000)).toBe(false);
    const ttl = await admin.pttl(`${prefix}:idem:charge:1`);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(60_000);
    expect((await b.prune()).idempotencyKeys).toBe(0);
  });
});

describe("key layout", () => {
  it("every key of a queue carries that queue's hash tag; the rest are the documented per-prefix keys", async () => {
    const prefix = testPrefix("layout");
    const clock = new FakeClock();
    const b = backend({ prefix, clock });
    await b.enqueue([spec({ jobId: "a1", queue: "alpha" }), spec({ jobId: "a2", queue: "alpha", delayMs: 5_000 })]);
    await b.enqueue([spec({ jobId: "b1", queue: "beta", name: "other" }), spec({ jobId: "b2", queue: "beta" })]);
    const [a] = await b.claim({ queues: ["alpha"], names: ["job"], worker: WORKER, limit: 1, leaseMs: 1_000 });
    await b.progress(a!.lease, { pct: 5 });
    await b.fail([{ lease: a!.lease, error: { name: "E", message: "m", stack: null }, retryDelayMs: null }]);
    await b.replay("a1");
    const [b2] = await b.claim({ queues: ["beta"], names: ["job"], worker: WORKER, limit: 1, leaseMs: 1_000 });
    await b.complete([{ lease: b2!.lease, result: 1 }]);
    await b.cancel("b1");
    await b.pause("beta");
    await b.idempotency.once("k", 1_000);
    clock.advance(10_000);
    await b.rescueExpired();
    await b.promoteDue();
    await b.prune();
    expect(await b.list()).not.toEqual([]);

    const keys = [...(await scanKeys(`${prefix}:*`)), ...(await scanKeys(`{${prefix}:*`))];
    // <prefix>:ready, the ready index, is kept on one server only (ready-index.ts): this runs on one.
    const perPrefix = new Set([
      `${prefix}:queues`,
      `${prefix}:layout`,
      `${prefix}:event-log`,
      `${prefix}:ready`,
      `{${prefix}:idem}:exp`,
      `{${prefix}:idem}:k:k`,
    ]);
    const byTag = new Map<string, string[]>();
    for (const key of keys) {
      if (perPrefix.has(key)) continue;
      const tag = /\{([^}]*)\}/.exec(key)?.[1];
      expect(["alpha", "beta"], `${key} carries a queue's hash tag`).toContain(tag);
      expect(key.startsWith(`${prefix}:{${tag}}:`), key).toBe(true);
      byTag.set(tag!, [...(byTag.get(tag!) ?? []), key]);
    }
    expect(byTag.get("alpha")?.length).toBeGreaterThan(3);
    expect(byTag.get("beta")?.length).toBeGreaterThan(3);
  });

  it("job ids are unique per queue: an id held by two queues names no one job until the queue is given", async () => {
    const b = backend({ clock: new FakeClock() });
    expect(await b.enqueue([spec({ jobId: "same", queue: "zeta", data: 1 })])).toEqual([{ id: "same", duplicate: false }]);
    expect(await b.get("same")).toMatchObject({ queue: "zeta", data: 1 });
    expect(await b.enqueue([spec({ jobId: "same", queue: "eta", data: 2 })])).toEqual([{ id: "same", duplicate: false }]);
    // Guessing a copy let one API key cancel another's job through a shared id (issue 10, probe 1).
    await expect(b.get("same")).rejects.toBeInstanceOf(AmbiguousJobIdError);
    await expect(b.cancel("same")).rejects.toBeInstanceOf(AmbiguousJobIdError);
    await expect(b.replay("same")).rejects.toBeInstanceOf(AmbiguousJobIdError);
    await expect(b.remove("same")).rejects.toBeInstanceOf(AmbiguousJobIdError);
    expect(await b.get("same", "eta")).toMatchObject({ queue: "eta", data: 2 });
    expect(await b.cancel("same", "eta")).toBe("cancelled");
    expect((await b.get("same", "zeta"))?.state).toBe("waiting");
  });

  it('a waiting job with a small payload costs under 120 bytes of Redis memory (compact record and lane entry), its "added" event under 80 more', async () => {
    const prefix = testPrefix("mem");
    const b = backend({ prefix });
    await b.enqueue([spec({ data: { i: 0 } })]);
    // The event log (the stream <base>ev) is bounded by its retention, not by the backlog: counted apart.
    const isEventLog = (key: string) => key.endsWith(":ev");
    const jobsBefore = await prefixBytes(prefix, (key) => !isEventLog(key));
    const eventsBefore = await prefixBytes(prefix, isEventLog);
    await b.enqueue(Array.from({ length: 2_000 }, (_, i) => spec({ data: { i: i + 1 } })));
    // Regression guards, measured on Redis 7.0 at ~85 per job (the hash of its own it had in
    // layout 1: ~255) and ~66 per event (~120 with its details spelled out).
    expect(((await prefixBytes(prefix, (key) => !isEventLog(key))) - jobsBefore) / 2_000).toBeLessThan(120);
    expect(((await prefixBytes(prefix, isEventLog)) - eventsBefore) / 2_000).toBeLessThan(80);
  });
});

describe("flow keys (job groups and limiter keys)", () => {
  const keyed = (jobId: string, tenant: string) =>
    buildJobSpec({
      queue: "q",
      name: "job",
      data: {},
      options: { jobId, group: { key: tenant, concurrency: 1 }, limiter: { key: `acct-${tenant}`, max: 100, durationMs: 2_000 } },
    });

  it("keep memory bounded: lanes of idle groups are removed, limiter windows and key holds expire; a retried job goes back to its lane", async () => {
    const prefix = testPrefix("flowkeys");
    const clock = new FakeClock();
    const b = backend({ prefix, clock });
    const tenants = Array.from({ length: 10 }, (_, i) => `t${i}`);
    await b.enqueue(tenants.flatMap((t) => [keyed(`${t}-1`, t), keyed(`${t}-2`, t)]));
    await b.enqueue([spec({ jobId: "plain" })]);
    expect(await b.stats("q")).toMatchObject([{ counts: { waiting: 21 } }]);
    // A lane whose only job is cancelled is left listed until a claim visits it.
    await b.cancel("t9-1");
    await b.cancel("t9-2");
    expect((await scanKeys(`${prefix}:{q}:L:*`)).length).toBe(9);

    const claimAll = () => b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 100, leaseMs: 60_000 });
    const first = await claimAll();
    // One per group (concurrency 1) and the unkeyed job.
    expect(first.map((c) => c.job.id).sort()).toEqual(["plain", ...tenants.slice(0, 9).map((t) => `${t}-1`)].sort());
    expect(await claimAll()).toEqual([]);
    // t0-1 fails a moment later and retries at once: back in its group's lane, behind t0-2 (run_at order).
    const t0 = first.find((c) => c.job.id === "t0-1")!;
    clock.advance(1);
    await b.fail([{ lease: t0.lease, error: { name: "E", message: "m", stack: null }, retryDelayMs: 0 }]);
    await b.complete(first.filter((c) => c.job.id !== "t0-1").map((c) => ({ lease: c.lease, result: null })));
    clock.advance(1);
    const second = await claimAll();
    expect(second.map((c) => c.job.id).sort()).toEqual(tenants.slice(0, 9).map((t) => `${t}-2`));
    await b.complete(second.map((c) => ({ lease: c.lease, result: null })));
    clock.advance(1);
    const third = await claimAll();
    expect(third.map((c) => c.job.id)).toEqual(["t0-1"]);
    await b.holdQueue("q", 5_000, { keyOfJob: "t0-1" });
    await b.complete(third.map((c) => ({ lease: c.lease, result: null })));
    expect(await claimAll()).toEqual([]);

    // Nothing waits: no lane and no lane set is left; windows and the hold expire on their own.
    expect(await scanKeys(`${prefix}:{q}:L:*`)).toEqual([]);
    expect(await scanKeys(`${prefix}:{q}:ls:*`)).toEqual([]);
    const windows = await scanKeys(`${prefix}:{q}:kr:*`);
    expect(windows).toHaveLength(9);
    for (const key of windows) expect(Number(await admin.pttl(key)), key).toBeGreaterThan(0);
    // Their counts (layout 3, with their keys' lifetime since layout 4) expire with them.
    const counts = await scanKeys(`${prefix}:{q}:kn:*`);
    expect(counts).toHaveLength(9);
    for (const key of counts) expect(Number(await admin.pttl(key)), key).toBeGreaterThan(0);
    const holds = await scanKeys(`${prefix}:{q}:kh:*`);
    expect(holds).toEqual([`${prefix}:{q}:kh:acct-t0`]);
    expect(Number(await admin.pttl(holds[0]!))).toBeGreaterThan(0);
    // Nothing runs: no running count is left (layout 4).
    expect(await admin.exists(`${prefix}:{q}:run`)).toBe(0);
  });

  it("a flow's children keep their group: they wait in its lane and obey its concurrency", async () => {
    const b = backend({ clock: new FakeClock() });
    const root = buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId: "root" } });
    await b.enqueueFlow([
      { spec: root, parent: null, onChildFailure: "fail" },
      { spec: keyed("c1", "t"), parent: 0, onChildFailure: "fail" },
      { spec: keyed("c2", "t"), parent: 0, onChildFailure: "fail" },
    ]);
    const claimed = await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 10, leaseMs: 60_000 });
    // The root waits for its children; of the two children of group t (concurrency 1), one runs.
    expect(claimed.map((c) => c.job.id)).toEqual(["c1"]);
    expect(await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 10, leaseMs: 60_000 })).toEqual([]);
  });
});

describe("compact waiting jobs", () => {
  /** Every bucket of queue q: its length and encoding. */
  async function buckets(prefix: string): Promise<{ key: string; length: number; encoding: string }[]> {
    const keys = await scanKeys(`${prefix}:{q}:w:*`);
    return Promise.all(keys.map(async (key) => ({ key, length: await admin.hlen(key), encoding: String(await admin.call("OBJECT", "ENCODING", key)) })));
  }

  it("a small waiting job has no hash of its own until it is claimed", async () => {
    const prefix = testPrefix("compact");
    const b = backend({ prefix, clock: new FakeClock() });
    await b.enqueue([spec({ jobId: "small", data: { to: "a@example.com" } })]);
    expect(await admin.exists(`${prefix}:{q}:j:small`)).toBe(0);
    expect(await b.get("small")).toMatchObject({ id: "small", name: "job", state: "waiting", data: { to: "a@example.com" }, attempt: 0 });
    const [c] = await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 1, leaseMs: 1_000 });
    expect(c!.job).toMatchObject({ id: "small", state: "active", data: { to: "a@example.com" }, maxAttempts: 3 });
    expect(await admin.exists(`${prefix}:{q}:j:small`)).toBe(1);
    expect(await buckets(prefix)).toEqual([]);
  });

  it("jobs that do not fit a bucket (large payload or id, meta) get a hash of their own and behave the same", async () => {
    const prefix = testPrefix("fallback");
    const b = backend({ prefix, clock: new FakeClock() });
    const long = "x".repeat(65);
    await b.enqueue([
      spec({ jobId: "big", data: { text: long } }),
      spec({ jobId: long }),
      buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId: "meta", meta: { by: "test" } } }),
      spec({ jobId: "small" }),
    ]);
    for (const id of ["big", long, "meta"]) expect(await admin.exists(`${prefix}:{q}:j:${id}`), id).toBe(1);
    expect(await admin.exists(`${prefix}:{q}:j:small`)).toBe(0);
    expect(await b.enqueue([spec({ jobId: "big" }), spec({ jobId: "small" })])).toEqual([
      { id: "big", duplicate: true },
      { id: "small", duplicate: true },
    ]);
    const claimed = await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 10, leaseMs: 1_000 });
    expect(claimed.map((c) => c.job.id)).toEqual(["big", long, "meta", "small"]);
    expect(claimed[2]!.job.meta).toEqual({ by: "test" });
  });

  it("the bucket table grows with the backlog, keeps every bucket listpack-encoded, and shrinks back as it drains", async () => {
    const prefix = testPrefix("table");
    const b = backend({ prefix, clock: new FakeClock() });
    const ids = (await b.enqueue(Array.from({ length: 3_000 }, (_, i) => spec({ data: { i } })))).map((r) => r.id);
    const grown = await buckets(prefix);
    expect(grown.length).toBeGreaterThan(40);
    expect(grown.every((bucket) => bucket.encoding === "listpack" && bucket.length <= 128)).toBe(true);
    expect(grown.reduce((sum, bucket) => sum + bucket.length, 0)).toBe(3_000);
    expect(await admin.hmget(`${prefix}:{q}:meta`, "wb", "wn")).toEqual([String(grown.length), "3000"]);

    // Every job is found by id wherever the table's growth moved it.
    expect((await b.enqueue(ids.slice(0, 500).map((jobId) => spec({ jobId })))).every((r) => r.duplicate)).toBe(true);
    expect((await b.get(ids[2_999]!))?.data).toEqual({ i: 2_999 });
    expect(await b.cancel(ids[1_500]!)).toBe("cancelled");

    // Claims take them in order while the table shrinks under them.
    const seen: string[] = [];
    for (;;) {
      const claimed = await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 100, leaseMs: 60_000 });
      if (claimed.length === 0) break;
      seen.push(...claimed.map((c) => c.job.id));
      const remaining = 2_999 - seen.length;
      const [size, count] = (await admin.hmget(`${prefix}:{q}:meta`, "wb", "wn")).map(Number);
      expect(count).toBe(remaining);
      if (remaining > 0) expect(size).toBeLessThanOrEqual(Math.max(1, Math.ceil(remaining / 10) + 2));
    }
    expect(seen).toEqual(ids.filter((_, i) => i !== 1_500));
    expect(await buckets(prefix)).toEqual([]);
    expect(await admin.hmget(`${prefix}:{q}:meta`, "wb", "wn")).toEqual(["1", "0"]);
  });

  it("the queue's default options follow its jobs: an unusual first job does not stop later ones from being compact", async () => {
    const prefix = testPrefix("defaults");
    const b = backend({ prefix, clock: new FakeClock() });
    await b.enqueue([
      buildJobSpec({
        queue: "q",
        name: "job",
        data: {},
        options: { jobId: "unusual", attempts: 7, timeoutMs: 123_456, removeOnComplete: { ageMs: 3_600_000 } },
      }),
    ]);
    const [first] = await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 1, leaseMs: 60_000 });
    expect(first!.job).toMatchObject({ id: "unusual", maxAttempts: 7, timeoutMs: 123_456 });
    const ids = (await b.enqueue(Array.from({ length: 50 }, (_, i) => spec({ data: { i } })))).map((r) => r.id);
    const withHash = (await Promise.all(ids.map((id) => admin.exists(`${prefix}:{q}:j:${id}`)))).filter((n) => n === 1);
    expect(withHash).toEqual([]);
    // The common options are the default now, so the records leave them out.
    expect(await admin.hget(`${prefix}:{q}:meta`, "do")).not.toContain("123456");
    // Mixed with a job of other options while compact ones exist: each keeps its own.
    await b.enqueue([buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId: "other", attempts: 2 } })]);
    const claimed = await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 100, leaseMs: 60_000 });
    expect(claimed.map((c) => c.job.id)).toEqual([...ids, "other"]);
    expect(claimed.slice(0, 50).every((c) => c.job.maxAttempts === 3 && c.job.timeoutMs === null)).toBe(true);
    expect(claimed[50]!.job.maxAttempts).toBe(2);
  });

  it("a job whose bucket is full gets a hash of its own", async () => {
    const prefix = testPrefix("full");
    const b = backend({ prefix, clock: new FakeClock() });
    await b.enqueue([spec({ jobId: "first" })]);
    // One bucket while the queue is small; fill it behind the table's back.
    await admin.hset(`${prefix}:{q}:w:0`, ...Array.from({ length: 127 }, (_, i) => [`filler-${i}`, "x"]).flat());
    await b.enqueue([spec({ jobId: "second" })]);
    expect(await admin.exists(`${prefix}:{q}:j:second`)).toBe(1);
    expect(String(await admin.call("OBJECT", "ENCODING", `${prefix}:{q}:w:0`))).toBe("listpack");
    const claimed = await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 5, leaseMs: 1_000 });
    expect(claimed.map((c) => c.job.id)).toEqual(["first", "second"]);
  });

  it("a job a shrinking table has no room for gets its hash and stays waiting in its place", async () => {
    const prefix = testPrefix("overflow");
    const b = backend({ prefix, clock: new FakeClock() });
    const ids = (await b.enqueue(Array.from({ length: 200 }, (_, i) => spec({ data: { i } })))).map((r) => r.id);
    // Claim down until the table has merged everything into bucket 0, which is kept full behind the
    // table's back (it does not count these fields), so the merges into it find no room.
    const seen: string[] = [];
    let fillers = 0;
    while ((await admin.hget(`${prefix}:{q}:meta`, "wb")) !== "1") {
      const missing = 128 - (await admin.hlen(`${prefix}:{q}:w:0`));
      if (missing > 0) await admin.hset(`${prefix}:{q}:w:0`, ...Array.from({ length: missing }, () => [`filler-${fillers++}`, "x"]).flat());
      const claimed = await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 1, leaseMs: 60_000 });
      expect(claimed.length).toBe(1);
      seen.push(claimed[0]!.job.id);
    }
    const rest = ids.slice(seen.length);
    const withHash = (await Promise.all(rest.map((id) => admin.exists(`${prefix}:{q}:j:${id}`)))).filter((n) => n === 1).length;
    expect(withHash).toBeGreaterThan(0);
    expect((await b.get(rest[rest.length - 1]!))?.state).toBe("waiting");
    const claimed = await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 1_000, leaseMs: 60_000 });
    expect([...seen, ...claimed.map((c) => c.job.id)]).toEqual(ids);
  });
});

describe("data layout", () => {
  it("upgrades layout 1 data in place: jobs stored as hashes of their own keep working next to compact ones", async () => {
    const prefix = stores.prefix("upgrade");
    const base = `${prefix}:{q}:`;
    // What layout 1 wrote for one waiting job of the fast lane.
    await admin.set(`${prefix}:layout`, "1");
    await admin.sadd(`${prefix}:queues`, "q");
    await admin.hset(`${base}meta`, "seq", "1", "fw", "1000");
    await admin.hset(
      `${base}j:old`,
      "n",
      "job",
      "d",
      '{"v":1}',
      "p",
      "0",
      "r",
      "1000",
      "c",
      "1000",
      "s",
      "1",
      "o",
      "3|86400000|604800000||e1000,60000",
      "st",
      "w",
    );
    await admin.rpush(`${base}f:job`, "old");
    await admin.sadd(`${base}names`, "job");

    const logger = recordingLogger();
    const b = backend({ prefix, clock: new FakeClock(5_000), logger });
    await b.migrate();
    expect(await admin.get(`${prefix}:layout`)).toBe(String(LAYOUT_VERSION));
    expect(logger.messages.join("\n")).toMatch(/upgraded the Redis data layout/);
    expect(await b.enqueue([spec({ jobId: "old" }), spec({ jobId: "new" })])).toEqual([
      { id: "old", duplicate: true },
      { id: "new", duplicate: false },
    ]);
    expect(await b.get("old")).toMatchObject({ state: "waiting", data: { v: 1 }, maxAttempts: 3 });
    const claimed = await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 5, leaseMs: 1_000 });
    expect(claimed.map((c) => c.job.id)).toEqual(["old", "new"]);
  });
});

describe("openBackend", () => {
  it("opens redis:// URLs with ?prefix=, checked and ready", async () => {
    const prefix = stores.prefix("open");
    const b = closeAfterTest(await openBackend(`${url}/0?prefix=${prefix}`));
    await b.enqueue([spec({ jobId: "via-url" })]);
    expect(await admin.hget(`${prefix}:{q}:w:0`, "via-url")).not.toBeNull();
    expect(b.description).toContain(`prefix ${prefix}`);
  });

  it("never shows the password in its description", async () => {
    const b = backend({ connection: "redis://:s3cret@127.0.0.1:1/0" });
    expect(b.description).not.toContain("s3cret");
    expect(b.description).toContain("127.0.0.1:1");
  });
});

describe("wake-ups", () => {
  it("an idle worker starts a job within moments of its enqueue, also after its subscriber connection was killed", async () => {
    const s = await server();
    const prefix = testPrefix("wake");
    const b = backend({ connection: s.url, prefix });
    const producer = backend({ connection: s.url, prefix });
    const started: string[] = [];
    // Polling every minute: only a wake-up can start these jobs in time.
    worker({ backend: b, queues: "q", pollIntervalMs: 60_000, handlers: { job: async (job) => void started.push(job.id) } });
    const sAdmin = new Redis(s.url);
    try {
      await waitFor(async () => String(await sAdmin.call("CLIENT", ["LIST", "TYPE", "pubsub"])).includes("sub=1"), { description: "subscribed" });
      await producer.enqueue([spec({ jobId: "first" })]);
      await waitFor(() => started.includes("first"), { description: "first job started by a wake-up" });

      await sAdmin.call("CLIENT", ["KILL", "TYPE", "pubsub"]);
      await waitFor(async () => String(await sAdmin.call("CLIENT", ["LIST", "TYPE", "pubsub"])).includes("sub=1"), { description: "resubscribed" });
      await producer.enqueue([spec({ jobId: "second" })]);
      await waitFor(() => started.includes("second"), { description: "second job started by a wake-up after the reconnect" });
    } finally {
      sAdmin.disconnect();
    }
  });

  it("an idle worker starts a delayed job when it comes due, without waiting for its next poll", async () => {
    const prefix = testPrefix("delayed");
    const b = backend({ prefix });
    // Counts the worker's claims that have returned: the delayed job must be enqueued after its
    // first (empty) one, or that claim itself would learn the due time and prove nothing about
    // the wake-up message.
    let claims = 0;
    let claiming = 0;
    const counted = new Proxy(b, {
      get(target, key, receiver) {
        if (key === "claim")
          return async (...args: Parameters<RedisBackend["claim"]>) => {
            claiming++;
            try {
              return await target.claim(...args);
            } finally {
              claiming--;
              claims++;
            }
          };
        const value: unknown = Reflect.get(target, key, receiver);
        return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const started: string[] = [];
    // No maintenance loop either: its promotion of due jobs would start the job without the wake-up.
    worker({ backend: counted, queues: "q", pollIntervalMs: 60_000, maintenance: false, handlers: { job: async (job) => void started.push(job.id) } });
    await waitFor(async () => claims >= 1 && Number(((await admin.call("PUBSUB", ["NUMSUB", `${prefix}:wake`])) as [string, number])[1]) >= 1, {
      description: "the worker's first claim returned and it listens for wake-ups",
    });
    // Once subscribed, the backend wakes every known queue to catch up on missed messages; a
    // claim of that catch-up could also learn the due time. An immediate job started through a
    // wake-up message shows the message path works and comes after that catch-up.
    const producer = backend({ prefix });
    await producer.enqueue([spec({ jobId: "probe" })]);
    await waitFor(() => started.includes("probe"), { description: "a job started by a wake-up message" });
    // Then the worker goes idle (probe settled, no claim in flight) until a wake-up or its next poll.
    await waitFor(async () => (await b.get("probe"))?.state === "completed" && claiming === 0 && workers[0]!.activeCount === 0, {
      description: "the worker idle again",
    });
    const claimsBefore = claims;
    // From another process's connection: the worker's own backend would learn the due time from
    // its enqueue's reply, not from the wake-up message.
    await producer.enqueue([spec({ jobId: "later", delayMs: 300 })]);
    await waitFor(() => started.includes("later"), { description: "delayed job started on time" });
    // Started by a claim the wake-up triggered, not by a poll (the next is a minute away).
    expect(claims).toBeGreaterThan(claimsBefore);
  });
});

describe("faults, with the worker runtime", () => {
  /**
   * Runs `total` jobs through a worker while `fault` strikes once `strikeAfter` have finished.
   * Returns the ids every handler run saw and what the backend logged.
   */
  async function runThrough(s: ThrowawayRedis, total: number, strikeAfter: number, fault: () => Promise<void>) {
    const prefix = testPrefix("fault");
    const logger = recordingLogger();
    const b = backend({ connection: s.url, prefix, logger });
    const queue = new Queue("q", { backend: b });
    const ids = (await queue.addBulk(Array.from({ length: total }, (_, i) => ({ name: "job", data: { i } })))).map((r) => r.id);
    const seen = new Set<string>();
    worker({
      backend: b,
      queues: "q",
      concurrency: 10,
      leaseMs: 2_000,
      pollIntervalMs: 50,
      maintenance: { rescueIntervalMs: 200 },
      handlers: {
        job: async (job) => {
          await sleep(1);
          seen.add(job.id);
        },
      },
    });
    await waitFor(() => seen.size >= strikeAfter, { timeoutMs: 20_000, description: `${strikeAfter} jobs done` });
    await fault();
    await waitFor(
      async () => {
        const [stats] = await b.stats("q");
        return stats!.counts.completed === total && stats!.counts.active === 0 && stats!.counts.waiting === 0;
      },
      { timeoutMs: 30_000, intervalMs: 100, description: "every job completed, none active or waiting" },
    );
    return { ids, seen, logger, backend: b };
  }

  it("CLIENT KILL of the backend's connections mid-run: the worker reconnects and finishes every job", async () => {
    const s = await server();
    const killer = new Redis(s.url);
    try {
      const { ids, seen, logger } = await runThrough(s, 600, 150, async () => {
        const clients = String(await killer.client("LIST"))
          .split("\n")
          .filter((line) => / name=cvt-fault-\S+-conveyor /.test(line));
        expect(clients.length).toBeGreaterThanOrEqual(2); // commands and wake-ups
        for (const line of clients) await killer.client("KILL", "ID", /\bid=(\d+)/.exec(line)![1]!);
      });
      expect(ids.every((id) => seen.has(id))).toBe(true);
      expect(logger.messages).toContain("Redis connection lost; reconnecting");
      expect(logger.messages).toContain("Redis connection restored");
    } finally {
      killer.disconnect();
    }
  });

  it("a command written from the offline queue when the connection came back, then dropped with it, fails instead of hanging", async () => {
    const s = await server();
    const control = new Redis(s.url);
    const b = backend({ connection: s.url, prefix: testPrefix("offline"), logger: silentLogger });
    try {
      const queue = new Queue("q", { backend: b });
      await queue.add("warm", {});
      const client = (b as unknown as { client: Redis }).client;
      const killBackend = async (what: RegExp) => {
        const lines = String(await control.client("LIST"))
          .split("\n")
          .filter((line) => what.test(line));
        expect(lines.length).toBeGreaterThanOrEqual(1);
        for (const line of lines) await control.client("KILL", "ID", /\bid=(\d+)/.exec(line)![1]!);
      };
      // Scripts wait while writes are paused; CLIENT and INFO (the reconnect's ready check) do not.
      await control.call("CLIENT", ["PAUSE", "20000", "WRITE"]);
      const closed = new Promise((resolve) => client.once("close", resolve));
      await killBackend(/ name=cvt-offline\S*-conveyor .*cmd=(?!subscribe)/);
      await closed;
      // Issued while the connection is down: it waits in ioredis' offline queue, is written when
      // the connection is ready again, and then waits on the pause.
      const add = queue.add("offline", {}).then(
        () => "stored",
        (error: unknown) => (error instanceof Error ? error.message : String(error)),
      );
      await waitFor(async () => String(await control.client("LIST")).includes("cmd=evalsha"), { description: "the add written and paused" });
      await killBackend(/cmd=evalsha/);
      // Dropped with the connection that took it: it fails (it may or may not have run), never hangs.
      const outcome = await Promise.race([add, sleep(10_000).then(() => "still waiting")]);
      await control.call("CLIENT", ["UNPAUSE"]);
      expect(outcome).toMatch(/dropped before it answered/);
    } finally {
      await control.call("CLIENT", ["UNPAUSE"]).catch(() => undefined);
      control.disconnect();
    }
  });

  it("Redis restarted mid-run: the worker logs, reconnects, reloads its scripts and finishes every job", async () => {
    const s = await server({ persistence: "everysec" });
    const { ids, seen, logger } = await runThrough(s, 600, 150, async () => {
      await s.terminate();
      await s.start();
    });
    expect(ids.every((id) => seen.has(id))).toBe(true);
    expect(logger.messages).toContain("Redis connection lost; reconnecting");
    expect(logger.messages).toContain("Redis connection restored");
  });

  it("SIGKILL under appendfsync always mid-run: every acknowledged enqueue is processed, nothing stays active", async () => {
    const s = await server({ persistence: "always" });
    const prefix = testPrefix("crash");
    const b = backend({ connection: s.url, prefix, logger: recordingLogger() });
    const producer = backend({ connection: s.url, prefix, logger: recordingLogger() });
    const seen = new Set<string>();
    worker({
      backend: b,
      queues: "q",
      concurrency: 8,
      leaseMs: 1_500,
      pollIntervalMs: 50,
      maintenance: { rescueIntervalMs: 200 },
      handlers: { job: async (job) => void seen.add(job.id) },
    });
    const acknowledged: string[] = [];
    let producing = true;
    const producer$ = (async () => {
      for (let i = 0; producing; i++) {
        try {
          const [result] = await producer.enqueue([spec({ jobId: `job-${i}` })]);
          acknowledged.push(result!.id);
        } catch {
          // Not acknowledged: the crash took the reply (or the request) with it. It may or may
          // not exist; only acknowledged jobs are promised.
          await sleep(5);
        }
      }
    })();
    await waitFor(() => seen.size >= 100, { timeoutMs: 20_000, description: "100 jobs done before the crash" });
    await s.kill();
    const beforeRestart = acknowledged.length;
    await s.start();
    await waitFor(() => acknowledged.length >= beforeRestart + 100, { timeoutMs: 20_000, description: "enqueues resumed" });
    producing = false;
    await producer$;

    await waitFor(() => acknowledged.every((id) => seen.has(id)), {
      timeoutMs: 30_000,
      intervalMs: 100,
      description: "every acknowledged job processed",
    });
    await waitFor(
      async () => {
        const [stats] = await b.stats("q");
        return stats!.counts.active === 0 && stats!.counts.waiting === 0 && stats!.counts.scheduled === 0;
      },
      { timeoutMs: 30_000, intervalMs: 100, description: "nothing left active or waiting" },
    );
    for (const id of acknowledged) expect((await b.get(id))?.state, id).toBe("completed");
  });
});

/**
 * The event log's entries (layout 6, log_event in src/backend/redis/lua/_common.lua): t holds
 * "<type>[ <attempt>[ <at>]]". An "added" entry leaves its type blank (5 bytes of its ~45, for the
 * memory per waiting job) and attempt 0 out; an entry at Redis' own time of its script takes that
 * time as its stream id and leaves its time out (about 8 bytes); any other writes its time out.
 * Readers (event-log.ts, prune-events-1.lua) fill the blanks back in, and read entries of layouts
 * 4 and 5 (attempt and time as fields a and at).
 */
function eventsBackend(clock?: FakeClock) {
  const prefix = testPrefix("events");
  const b = backend({ prefix, ...(clock ? { clock } : {}) });
  const stream = async () => (await admin.xrange(`${prefix}:{q}:ev`, "-", "+")) as Array<[string, string[]]>;
  return { prefix, b, stream };
}
const eventSpec = (jobId: string) => buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId } });
const fieldsOf = (entry: [string, string[]]) => Object.fromEntries(entry[1].flatMap((v, i, all) => (i % 2 === 0 ? [[v, all[i + 1]!]] : [])));

describe("completed jobs", () => {
  const worker = { id: "worker-deployment-7d9f8b6c5d-x2k4p:12345:abcdef", host: "worker-deployment-7d9f8b6c5d-x2k4p", pid: 12345 };
  const claimOne = async (b: RedisBackend) => (await b.claim({ queues: ["q"], names: ["job"], worker, limit: 1, leaseMs: 10_000 }))[0]!;

  it("the completed attempt is not stored in the history field (the hash holds it); a read shows it after the failed ones, once", async () => {
    const prefix = testPrefix("done");
    const b = backend({ prefix });
    await b.enqueue([spec({ jobId: "once" }), spec({ jobId: "twice" })]);
    const first = await claimOne(b);
    await b.complete([{ lease: first.lease, result: { ok: 1 } }]);
    // Before, complete appended a JSON record of about 150 bytes here on every job.
    expect(await admin.hget(`${prefix}:{q}:j:once`, "h")).toBeNull();
    const once = (await b.get("once"))!;
    expect(once.history).toEqual([
      {
        attempt: 1,
        workerId: worker.id,
        host: worker.host,
        pid: worker.pid,
        startedAt: once.startedAt,
        finishedAt: once.finishedAt,
        outcome: "completed",
        error: null,
      },
    ]);
    const failed = await claimOne(b);
    await b.fail([{ lease: failed.lease, error: { name: "E", message: "m", stack: null }, retryDelayMs: 0 }]);
    const again = await claimOne(b);
    await b.complete([{ lease: again.lease, result: null }]);
    expect(JSON.parse((await admin.hget(`${prefix}:{q}:j:twice`, "h"))!)).toHaveLength(1);
    const twice = (await b.get("twice"))!;
    expect(twice.history.map((h) => [h.attempt, h.outcome])).toEqual([
      [1, "failed"],
      [2, "completed"],
    ]);
    expect(twice.history[1]).toMatchObject({ workerId: worker.id, startedAt: twice.startedAt, finishedAt: twice.finishedAt, error: null });
  });

  it("a job completed by an earlier version (its completed record stored) shows that record once", async () => {
    const prefix = testPrefix("done");
    const b = backend({ prefix });
    await b.enqueue([spec({ jobId: "old" })]);
    const c = await claimOne(b);
    await b.complete([{ lease: c.lease, result: null }]);
    const key = `${prefix}:{q}:j:old`;
    const [sa, f] = await admin.hmget(key, "sa", "f");
    // What the complete script of 0.1.0 stored.
    const record = { a: 1, w: worker, s: Number(sa), f: Number(f), o: "completed", e: null };
    await admin.hset(key, "h", JSON.stringify([record]));
    const job = (await b.get("old"))!;
    expect(job.history).toEqual([
      { attempt: 1, workerId: worker.id, host: worker.host, pid: worker.pid, startedAt: Number(sa), finishedAt: Number(f), outcome: "completed", error: null },
    ]);
  });
});

describe("the worker stored with a claim", () => {
  // A worker id made by newWorkerId holds the host and pid: `<host>:<pid>:<suffix>`.
  const podHost = "worker-deployment-7d9f8b6c5d-x2k4p";
  const generated = { id: `${podHost}:12345:abcdef`, host: podHost, pid: 12345 };
  const claimOne = async (b: RedisBackend, worker: typeof generated) =>
    (await b.claim({ queues: ["q"], names: ["job"], worker, limit: 1, leaseMs: 10_000 }))[0]!;
  // Redis 7 says listpack, 6 ziplist: both the small encoding, which a value over 64 bytes ends.
  const smallEncoding = /^(listpack|ziplist)$/;

  it("is its id alone when the id holds host and pid: a pod-length host name keeps the hash small, and reads give host and pid back", async () => {
    const prefix = testPrefix("wkr");
    const b = backend({ prefix });
    await b.enqueue([spec({ jobId: "a" }), spec({ jobId: "b" })]);
    const key = `${prefix}:{q}:j:a`;
    const first = await claimOne(b, generated);
    expect(await admin.hget(key, "w")).toBe(JSON.stringify({ id: generated.id }));
    // The whole identity as JSON is 103 bytes: past hash-max-listpack-value, the hash became a
    // hash table at the claim and stayed one while the completed job was retained.
    expect(await admin.call("OBJECT", "ENCODING", key)).toMatch(smallEncoding);
    expect((await b.get("a"))!.lease!.worker).toEqual(generated);
    await b.complete([{ lease: first.lease, result: { ok: 1 } }]);
    expect(await admin.call("OBJECT", "ENCODING", key)).toMatch(smallEncoding);
    expect((await b.get("a"))!.history.map((h) => [h.outcome, h.workerId, h.host, h.pid])).toEqual([["completed", generated.id, podHost, 12345]]);
    // A failed attempt's record (stored in the history, with the worker as stored) reads the same.
    const second = await claimOne(b, generated);
    await b.fail([{ lease: second.lease, error: { name: "E", message: "m", stack: null }, retryDelayMs: 0 }]);
    const again = await claimOne(b, generated);
    await b.complete([{ lease: again.lease, result: null }]);
    expect((await b.get("b"))!.history.map((h) => [h.outcome, h.workerId, h.host, h.pid])).toEqual([
      ["failed", generated.id, podHost, 12345],
      ["completed", generated.id, podHost, 12345],
    ]);
  });

  it("is the whole identity when the id does not hold them (a caller's own id)", async () => {
    const prefix = testPrefix("wkr");
    const b = backend({ prefix });
    await b.enqueue([spec({ jobId: "a" })]);
    const own = { id: "billing-worker-1", host: podHost, pid: 7 };
    await claimOne(b, own);
    expect(JSON.parse((await admin.hget(`${prefix}:{q}:j:a`, "w"))!)).toEqual(own);
    expect((await b.get("a"))!.lease!.worker).toEqual(own);
  });

  it("reads back every identity it encodes, and a whole one as stored before", () => {
    const identities = [
      generated,
      { id: "vm:1:a1b2c3", host: "vm", pid: 1 },
      { id: ":0:x", host: "", pid: 0 },
      // A host holding colons: all before the pid is the host.
      { id: "::1:5:abc", host: "::1", pid: 5 },
      { id: "h:1:", host: "h", pid: 1 },
      // Not of the generated form: kept whole.
      { id: "h:1:x:y", host: "h", pid: 1 },
      { id: "h:2:x", host: "h", pid: 1 },
      { id: "h:1", host: "h", pid: 1 },
      { id: "h:-1:x", host: "h", pid: -1 },
      { id: "h:1.5:x", host: "h", pid: 1.5 },
      { id: "anything", host: "h", pid: 9 },
    ];
    for (const worker of identities) expect(decodeWorker(encodeWorker(worker))).toEqual(worker);
    expect(JSON.parse(encodeWorker({ id: "h:1:x:y", host: "h", pid: 1 }))).toEqual({ id: "h:1:x:y", host: "h", pid: 1 });
    expect(decodeWorker(JSON.stringify(generated))).toEqual(generated);
    expect(decodeWorker(undefined)).toBeNull();
  });
});

describe("event entries (layout 6)", () => {
  it("on Redis' own clock: the type of an 'added' entry blank, the job's time as the stream id, even late in a long script", async () => {
    const { b, stream } = eventsBackend();
    const cursor = await b.latestEventCursor();
    const ids = Array.from({ length: 2_000 }, (_, i) => `a${i}`);
    // One script for the whole batch: every entry's id has the time the script read for the jobs,
    // however late in the script its XADD runs.
    await b.enqueue(ids.map((id) => eventSpec(id)));
    await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 1, leaseMs: 60_000 });
    const claimed = await b.get("a0");

    const entries = await stream();
    const idTime = (entry: [string, string[]]) => Number(entry[0].split("-")[0]);
    // Attempt 0 and Redis' own time are left out of t (an id of a caller's shape is stored as it is).
    expect(fieldsOf(entries[0]!)).toEqual({ t: "", n: "job", j: "a0", d: "" });
    expect(idTime(entries[0]!)).toBe((await b.get("a0"))!.createdAt);
    expect(idTime(entries[ids.length - 1]!)).toBe((await b.get(ids.at(-1)!))!.createdAt);
    expect(fieldsOf(entries.at(-1)!)).toEqual({ t: "active 1", n: "job", j: "a0", d: '{"workerId":"w1"}' });
    expect(idTime(entries.at(-1)!)).toBe(claimed!.startedAt);
    const events = [];
    for (let after = cursor; ;) {
      const page = await b.readEvents(after, 1_000);
      events.push(...page.events);
      if (page.events.length === 0) break;
      after = page.cursor;
    }
    expect(events).toHaveLength(ids.length + 1);
    for (const id of [ids[0]!, ids.at(-1)!]) {
      const job = (await b.get(id))!;
      const added = events.find((e) => e.type === "added" && e.jobId === id)!;
      expect(added.at).toBe(job.createdAt);
      expect(added.data).toEqual({ state: "waiting", runAt: job.runAt, priority: 0 });
    }
    expect(events.at(-1)).toMatchObject({ type: "active", jobId: "a0", attempt: 1, at: claimed!.startedAt });
  });

  it("a stream whose last id is later than Redis' time (a clock set back) still takes the entry, with its time written out", async () => {
    const { prefix, b, stream } = eventsBackend();
    const cursor = await b.latestEventCursor();
    const ahead = (await stores.redisNow()) + 3_600_000;
    await admin.xadd(`${prefix}:{q}:ev`, `${ahead}-0`, "t", "", "n", "job", "j", "future", "a", "0", "at", "", "d", "");
    await b.enqueue([eventSpec("a")]);
    const job = (await b.get("a"))!;
    const last = (await stream()).at(-1)!;
    expect(fieldsOf(last)).toEqual({ t: ` 0 ${job.createdAt}`, n: "job", j: "a", d: "" });
    expect(Number(last[0].split("-")[0])).toBeGreaterThanOrEqual(ahead);
    const events = (await b.readEvents(cursor, 10)).events;
    expect(events.map((e) => [e.jobId, e.at])).toEqual([
      ["future", ahead],
      ["a", job.createdAt],
    ]);
  });

  it("on an injected clock the time is written out, and entries of layouts 4 and 5 (attempt and time as fields) read the same", async () => {
    const clock = new FakeClock();
    const { prefix, b, stream } = eventsBackend(clock);
    const cursor = await b.latestEventCursor();
    const generated = buildJobSpec({ queue: "q", name: "job", data: {} });
    await b.enqueue([eventSpec("a"), generated]);
    const [job] = await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 1, leaseMs: 60_000 });
    expect((await stream()).map(fieldsOf)).toEqual([
      { t: ` 0 ${clock.now()}`, n: "job", j: "a", d: "" },
      { t: ` 0 ${clock.now()}`, n: "job", j: storedJobId(generated.id), d: "" },
      { t: `active 1 ${clock.now()}`, n: "job", j: "a", d: '{"workerId":"w1"}' },
    ]);
    expect(job!.job.id).toBe("a");
    await admin.xadd(`${prefix}:{q}:ev`, "*", "t", "added", "n", "job", "j", "old", "a", "0", "at", "1234", "d", "");
    await admin.xadd(`${prefix}:{q}:ev`, "*", "t", "retrying", "n", "job", "j", generated.id, "a", "2", "at", "", "d", "");
    const events = (await b.readEvents(cursor, 10)).events;
    const lastIdTime = Number((await stream()).at(-1)![0].split("-")[0]);
    expect(events.map((e) => [e.type, e.jobId, e.attempt, e.at])).toEqual([
      ["added", "a", 0, clock.now()],
      ["added", generated.id, 0, clock.now()],
      ["active", "a", 1, clock.now()],
      ["added", "old", 0, 1234],
      ["retrying", generated.id, 2, lastIdTime],
    ]);
    expect(events[3]!.data).toEqual({ state: "waiting", runAt: 1234, priority: 0 });
  });

  it("pruning by age reads the time written out in t, and an older entry's at", async () => {
    const clock = new FakeClock();
    const { prefix, b, stream } = eventsBackend(clock);
    await admin.xadd(`${prefix}:{q}:ev`, "*", "t", "", "n", "job", "j", "old", "a", "0", "at", String(clock.now() - 100), "d", "");
    await b.enqueue([eventSpec("a")]);
    clock.advance(50);
    await b.enqueue([eventSpec("b")]);
    // Kept: 30 ms back from now. The first two (100 and 50 ms old) go, by the time each wrote out.
    expect(await b.pruneEvents({ maxAgeMs: 30 })).toBe(2);
    expect((await stream()).map((e) => fieldsOf(e).j)).toEqual(["b"]);
  });

  it("pruning by age takes entries whose time is their stream id's", async () => {
    const { b, stream } = eventsBackend();
    await b.enqueue([eventSpec("a"), eventSpec("b")]);
    const written = Number((await stream())[1]![0].split("-")[0]);
    // Redis' clock moves past the entries' time by more than the age kept.
    await waitFor(async () => (await stores.redisNow()) > written + 5, { timeoutMs: 10_000, description: "Redis' clock 5 ms past the entries" });
    expect(await b.pruneEvents({ maxAgeMs: 2 })).toBe(2);
    expect(await stream()).toEqual([]);
  });
});
