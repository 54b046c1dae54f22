/**
 * The Redis layout guard at run time: a process already connected when another process upgrades
 * the data layout is refused at its next call on the upgraded data (not only at connect), with a
 * typed error, writes nothing, and its worker stops. See layout_guard in lua/_common.lua.
 *
 * "Another process of a newer layout" is played by a plain client writing what such a process
 * writes: the queue's `lv` stamp (which a newer Conveyor sets in the script that stores its data)
 * and the prefix's `layout` key.
 */
import { afterEach, describe, expect, it } from "vitest";
import { SchemaTooNewError } from "../../src/backend/migration-files.js";
import { RedisBackend } from "../../src/backend/redis/backend.js";
import { LAYOUT_VERSION } from "../../src/backend/redis/keys.js";
import { RedisLayoutTooNewError } from "../../src/backend/redis/layout-error.js";
import { normalizeQueueLimits } from "../../src/core/flow.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { FakeClock, silentLogger, Worker } from "../../src/index.js";
import { testPrefix } from "../helpers/redis.js";
import { redisTestStores } from "../helpers/redis-stores.js";
import { waitFor } from "../helpers/wait-for.js";

const stores = redisTestStores();
const { admin } = stores;
const workers: Worker[] = [];

// Registered after the stores, so it runs before they close (vitest runs afterEach hooks last first).
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.close({ force: true })));
});

const backend = (prefix: string) => stores.backend({ prefix, clock: new FakeClock() });

const spec = (jobId: string) => buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId } });
const WORKER = { id: "w1", host: "h", pid: 1 };
const claimOne = (b: RedisBackend) => b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 1, leaseMs: 60_000 });

/** What a Conveyor of the next layout does before it stores data of that layout in queue q. */
const newerLayoutWritesQueue = (prefix: string) => admin.hset(`${prefix}:{q}:meta`, "lv", String(LAYOUT_VERSION + 1));

describe("Redis layout guard at run time", () => {
  it("a queue's scripts stamp this layout on it", async () => {
    const prefix = testPrefix("lv");
    const b = backend(prefix);
    await b.enqueue([spec("a")]);
    expect(await admin.hget(`${prefix}:{q}:meta`, "lv")).toBe(String(LAYOUT_VERSION));
  });

  it("a connected backend is refused its next enqueue and claim once a newer layout wrote the queue, and writes nothing", async () => {
    const prefix = testPrefix("lv");
    const b = backend(prefix);
    await b.enqueue([spec("before")]);
    await newerLayoutWritesQueue(prefix);

    const enqueue = b.enqueue([spec("after")]).catch((e: unknown) => e);
    expect(await enqueue).toBeInstanceOf(RedisLayoutTooNewError);
    // One type with the SQL stores' "schema newer than this code", so callers need not know the store.
    expect(await enqueue).toBeInstanceOf(SchemaTooNewError);
    expect(String(await enqueue)).toMatch(
      new RegExp(
        `queue "q" under prefix "${prefix}" has layout version ${LAYOUT_VERSION + 1}, newer than this Conveyor \\(knows up to ${LAYOUT_VERSION}\\); upgrade conveyor`,
      ),
    );
    await expect(claimOne(b)).rejects.toBeInstanceOf(RedisLayoutTooNewError);
    await expect(b.get("before", "q")).rejects.toBeInstanceOf(RedisLayoutTooNewError);

    // Nothing was written: the job stored before is still waiting, unclaimed, and "after" is absent.
    await admin.hset(`${prefix}:{q}:meta`, "lv", String(LAYOUT_VERSION));
    expect(await b.get("after", "q")).toBeNull();
    expect((await b.get("before", "q"))?.state).toBe("waiting");
    expect((await claimOne(b)).map((c) => c.job.id)).toEqual(["before"]);
  });

  it("settling a job is refused too once the queue was upgraded under its lease", async () => {
    const prefix = testPrefix("lv");
    const b = backend(prefix);
    await b.enqueue([spec("a")]);
    const [claimed] = await claimOne(b);
    await newerLayoutWritesQueue(prefix);
    await expect(b.complete([{ lease: claimed!.lease, result: null }])).rejects.toBeInstanceOf(RedisLayoutTooNewError);
    await expect(b.heartbeat([claimed!.lease], 60_000)).rejects.toBeInstanceOf(RedisLayoutTooNewError);
  });

  it("an upgrade of the prefix stamps every known queue, so an older process stops on all of them", async () => {
    const prefix = testPrefix("lv");
    const old = backend(prefix);
    await old.enqueue([spec("a")]);
    // The prefix looks like an older layout's data: the next process to connect upgrades it.
    await admin.set(`${prefix}:layout`, String(LAYOUT_VERSION - 1));
    await admin.hdel(`${prefix}:{q}:meta`, "lv");
    const upgrader = backend(prefix);
    await upgrader.migrate();
    expect(await admin.get(`${prefix}:layout`)).toBe(String(LAYOUT_VERSION));
    expect(await admin.hget(`${prefix}:{q}:meta`, "lv")).toBe(String(LAYOUT_VERSION));
  });

  it("a worker stops (worker:closed) when its store was upgraded past it while it ran, and runs nothing more", async () => {
    const prefix = testPrefix("lv");
    const b = backend(prefix);
    const ran: string[] = [];
    const w = new Worker({ backend: b, queues: "q", handlers: { job: async (j) => void ran.push(j.id) }, logger: silentLogger, pollIntervalMs: 50 });
    workers.push(w);
    const errors: Error[] = [];
    w.on("worker:error", ({ error }) => errors.push(error));
    let closed = false;
    w.on("worker:closed", () => (closed = true));
    await b.enqueue([spec("first")]);
    await waitFor(() => ran.includes("first"), { timeoutMs: 10_000 });

    await newerLayoutWritesQueue(prefix);
    await waitFor(() => closed, { timeoutMs: 10_000 });
    expect(errors.some((e) => e instanceof RedisLayoutTooNewError)).toBe(true);
    expect(w.mode).toBe("stopped");
    // A job the newer process stores afterwards is left for the newer workers.
    await admin.hset(`${prefix}:{q}:meta`, "lv", String(LAYOUT_VERSION));
    await b.enqueue([spec("second")]);
    expect((await b.get("second", "q"))?.state).toBe("waiting");
    expect(ran).toEqual(["first"]);
  });
});

describe("Redis layout 3: rate windows of layout 2 data", () => {
  // Layout 2 wrote one window member per start ("<counter>") and kept no count; layout 3 writes
  // one member per claim ("<counter>:<starts>") and keeps the count (flow field rn, kn:<key>).
  // A window a layout 2 process left must still count: the next claim sums its members once.
  const layout2Window = async (key: string, at: number, members: number) => {
    for (let m = 1; m <= members; m++) await admin.zadd(key, at, String(m));
    await admin.pexpire(key, 60_000);
  };
  const specOf = (jobId: string, options: Record<string, unknown> = {}) => buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId, ...options } });
  const freshBackend = () => {
    const prefix = stores.prefix("lv3");
    const clock = new FakeClock();
    const b = stores.backend({ prefix, clock });
    return { prefix, clock, b };
  };
  const claimUpTo = (b: RedisBackend, limit: number) => b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit, leaseMs: 60_000 });

  it("the queue's rate window: 3 starts left by layout 2 leave 2 of 5", async () => {
    const { prefix, clock, b } = freshBackend();
    await b.setQueueLimits("q", normalizeQueueLimits({ rate: { max: 5, durationMs: 1_000 } }));
    await b.enqueue(Array.from({ length: 10 }, (_, i) => specOf(`j${i}`)));
    await layout2Window(`${prefix}:{q}:rate`, clock.now(), 3);
    expect(await claimUpTo(b, 10)).toHaveLength(2);
    expect(await admin.hget(`${prefix}:{q}:flow`, "rn")).toBe("5");
    expect(await admin.zrange(`${prefix}:{q}:rate`, 0, -1)).toHaveLength(4);
    clock.advance(1_000);
    expect(await claimUpTo(b, 10)).toHaveLength(5);
    expect(await admin.hget(`${prefix}:{q}:flow`, "rn")).toBe("5");
  });

  it("a limiter key's window: 2 starts left by layout 2 leave 2 of 4", async () => {
    const { prefix, clock, b } = freshBackend();
    await b.enqueue(Array.from({ length: 10 }, (_, i) => specOf(`j${i}`, { limiter: { key: "acct", max: 4, durationMs: 1_000 } })));
    await layout2Window(`${prefix}:{q}:kr:acct`, clock.now(), 2);
    expect(await claimUpTo(b, 10)).toHaveLength(2);
    expect(await admin.get(`${prefix}:{q}:kn:acct`)).toMatch(/^4 \d+ \d+ \d+$/);
    expect(await admin.pttl(`${prefix}:{q}:kn:acct`)).toBeGreaterThan(0);
    clock.advance(1_000);
    expect(await claimUpTo(b, 10)).toHaveLength(4);
  });
});

describe("Redis layout 4: limiter counts of layout 3 data", () => {
  // Layout 3 kept a limiter key's count as "<starts>"; layout 4 as "<starts> <until>", renewing
  // the keys' expiry only when `until` is near. A layout 3 count must still count, and get its
  // keys renewed at the key's next start (it says nothing about how long they live).
  it("3 starts counted by layout 3 leave 1 of 4, and the keys are renewed", async () => {
    const prefix = stores.prefix("lv4");
    const clock = new FakeClock();
    const b = stores.backend({ prefix, clock });
    const specs = Array.from({ length: 10 }, (_, i) =>
      buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId: `j${i}`, limiter: { key: "acct", max: 4, durationMs: 1_000 } } }),
    );
    await b.enqueue(specs);
    await admin.zadd(`${prefix}:{q}:kr:acct`, clock.now(), "7:3");
    await admin.set(`${prefix}:{q}:kn:acct`, "3", "PX", 5_000);
    await admin.pexpire(`${prefix}:{q}:kr:acct`, 5_000);
    expect(await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 10, leaseMs: 60_000 })).toHaveLength(1);
    expect(await admin.get(`${prefix}:{q}:kn:acct`)).toMatch(/^4 \d+ \d+ \d+$/);
    // Renewed: a minute and the window at least, for both keys.
    expect(await admin.pttl(`${prefix}:{q}:kn:acct`)).toBeGreaterThan(61_000);
    expect(await admin.pttl(`${prefix}:{q}:kr:acct`)).toBeGreaterThan(61_000);
    expect(await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 10, leaseMs: 60_000 })).toHaveLength(0);
  });
});
