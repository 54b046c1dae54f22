/**
 * Redis keeps a queue's running counts per job name and group in `<base>run` (layout 4) instead of
 * reading every active job's hash on every claim: the claim adds its jobs, and every script that
 * takes a job out of active (complete, fail, release, rescue, cancel) takes it off. A way out that
 * forgot would leak a slot for good, so each one is tested here: the slot comes back and no count
 * is left behind. Also: counting starts from the jobs already active when a queue first needs it
 * (caps set while jobs run, or data of layout 3), and stops with the caps. And a limiter key's
 * window, which a claim trims only when its kept count says the key is full or when it has grown
 * to twice the members of its last trim: the limit holds exactly and the window stays bounded.
 */
import { describe, expect, it } from "vitest";
import { RedisBackend } from "../../src/backend/redis/backend.js";
import { normalizeQueueLimits } from "../../src/core/flow.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { FakeClock, type ClaimedJob } from "../../src/index.js";
import { redisTestStores } from "../helpers/redis-stores.js";

const stores = redisTestStores();
const { admin } = stores;

const WORKER = { id: "w1", host: "h", pid: 1 };
const LEASE_MS = 1_000;

function fresh() {
  const prefix = stores.prefix("run");
  const clock = new FakeClock();
  const b = stores.backend({ prefix, clock });
  const claim = (limit = 10) => b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit, leaseMs: LEASE_MS });
  const counts = () => admin.hgetall(`${prefix}:{q}:run`);
  return { prefix, clock, b, claim, counts };
}

const grouped = (jobId: string) => buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId, group: { key: "t", concurrency: 1 } } });
const plain = (jobId: string) => buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId } });
const ERROR = { name: "E", message: "m", stack: null };

type Exit = (b: RedisBackend, job: ClaimedJob, clock: FakeClock) => Promise<unknown>;
const EXITS: Record<string, Exit> = {
  complete: (b, job) => b.complete([{ lease: job.lease, result: null }]),
  "fail with a retry": (b, job) => b.fail([{ lease: job.lease, error: ERROR, retryDelayMs: 60_000 }]),
  "fail for good": (b, job) => b.fail([{ lease: job.lease, error: ERROR, retryDelayMs: null }]),
  release: (b, job) => b.release([job.lease]),
  cancel: (b, job) => b.cancel(job.job.id, "q"),
  "rescue of an expired lease": async (b, _job, clock) => {
    clock.advance(LEASE_MS + 1);
    expect(await b.rescueExpired()).toHaveLength(1);
  },
};

describe("Redis running counts (layout 4)", () => {
  for (const [exit, leave] of Object.entries(EXITS)) {
    it(`${exit}: the job's group and name slots come back, and no count is left`, async () => {
      const { b, clock, claim, counts } = fresh();
      await b.setQueueLimits("q", normalizeQueueLimits({ maxRunningPerName: { job: 1 } }));
      await b.enqueue([grouped("a"), grouped("b")]);
      const first = await claim();
      expect(first.map((c) => c.job.id)).toEqual(["a"]);
      expect(await counts()).toEqual({ "n:job": "1", "g:t": "1" });
      expect(await claim()).toEqual([]);

      await leave(b, first[0]!, clock);
      expect(await counts()).toEqual({});
      // Released and rescued jobs wait again: a is claimable too, so either may come; one at a time.
      const next = await claim();
      expect(next).toHaveLength(1);
      expect(await counts()).toEqual({ "n:job": "1", "g:t": "1" });
      await b.complete([{ lease: next[0]!.lease, result: null }]);
      expect(await counts()).toEqual({});
    });
  }

  it("a batch of completions over several groups takes each off its own count", async () => {
    const { b, claim, counts } = fresh();
    const specs = ["a", "b", "c"].flatMap((g) =>
      [1, 2, 3].map((n) => buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId: `${g}${n}`, group: { key: g, concurrency: 2 } } })),
    );
    await b.enqueue(specs);
    const first = await claim();
    expect(first).toHaveLength(6);
    expect(await counts()).toEqual({ "n:job": "6", "g:a": "2", "g:b": "2", "g:c": "2" });
    await b.complete(first.filter((c) => c.job.id !== "b1").map((c) => ({ lease: c.lease, result: null })));
    expect(await counts()).toEqual({ "n:job": "1", "g:b": "1" });
    const second = await claim();
    expect(second.map((c) => c.job.id).sort()).toEqual(["a3", "b3", "c3"]);
    expect(await counts()).toEqual({ "n:job": "4", "g:a": "1", "g:b": "2", "g:c": "1" });
  });

  it("counting starts from the jobs already running when a cap is set, and stops with it", async () => {
    const { prefix, b, claim, counts } = fresh();
    await b.enqueue(["a", "b", "c", "d"].map(plain));
    const running = await claim(2);
    // A queue without caps or keyed jobs counts nothing (its claims and settles pay nothing for it).
    expect(await admin.exists(`${prefix}:{q}:run`)).toBe(0);
    expect(await admin.hget(`${prefix}:{q}:j:a`, "rc")).toBeNull();

    await b.setQueueLimits("q", normalizeQueueLimits({ maxRunningPerName: { job: 2 } }));
    expect(await claim()).toEqual([]);
    expect(await counts()).toEqual({ "n:job": "2" });
    await b.complete([{ lease: running[0]!.lease, result: null }]);
    expect(await counts()).toEqual({ "n:job": "1" });
    const third = await claim();
    expect(third).toHaveLength(1);
    expect(await counts()).toEqual({ "n:job": "2" });

    await b.setQueueLimits("q", normalizeQueueLimits({}));
    expect(await admin.exists(`${prefix}:{q}:run`)).toBe(0);
    // Jobs counted before stop being taken off once nothing counts: no count comes back.
    await b.complete([running[1]!, third[0]!].map((c) => ({ lease: c.lease, result: null })));
    expect(await admin.exists(`${prefix}:{q}:run`)).toBe(0);
    // A cap set again counts afresh.
    const last = await claim();
    expect(last.map((c) => c.job.id)).toEqual(["d"]);
    await b.setQueueLimits("q", normalizeQueueLimits({ maxRunningPerName: { job: 1 } }));
    await b.enqueue([plain("e")]);
    expect(await claim()).toEqual([]);
    expect(await counts()).toEqual({ "n:job": "1" });
  });

  it("layout 3 data: a group's jobs active without counts hold their slots, and give them back", async () => {
    const { prefix, b, claim, counts } = fresh();
    await b.enqueue([grouped("a"), grouped("b")]);
    const first = await claim();
    expect(first.map((c) => c.job.id)).toEqual(["a"]);
    // What a layout 3 claim leaves: no counts, no marks.
    await admin.del(`${prefix}:{q}:run`);
    await admin.hdel(`${prefix}:{q}:flow`, "rc");
    await admin.hdel(`${prefix}:{q}:j:a`, "rc");

    expect(await claim()).toEqual([]);
    expect(await counts()).toEqual({ "n:job": "1", "g:t": "1" });
    expect(await admin.hget(`${prefix}:{q}:j:a`, "rc")).toBe("1");
    await b.complete([{ lease: first[0]!.lease, result: null }]);
    expect(await counts()).toEqual({});
    expect((await claim()).map((c) => c.job.id)).toEqual(["b"]);
  });
});

describe("Redis limiter windows between trims (layout 4)", () => {
  const limited = (jobId: string, max: number) =>
    buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId, limiter: { key: "acct", max, durationMs: 1_000 } } });

  it("a window trimmed only when full or grown still starts exactly max per window", async () => {
    const { b, clock, claim } = fresh();
    await b.enqueue(Array.from({ length: 40 }, (_, i) => limited(`j${i}`, 3)));
    const starts: number[] = [];
    for (let step = 0; step < 40; step++) {
      const got = await claim();
      starts.push(...got.map(() => clock.now()));
      await b.complete(got.map((c) => ({ lease: c.lease, result: null })));
      clock.advance(250);
    }
    expect(starts).toHaveLength(30);
    // Any 1,000 ms window (now - 1000, now] holds at most 3 starts, and a slot is used as soon as one opens.
    for (const at of starts) expect(starts.filter((t) => t > at - 1_000 && t <= at).length).toBeLessThanOrEqual(3);
    expect(starts.slice(0, 6)).toEqual([0, 0, 0, 1_000, 1_000, 1_000].map((ms) => starts[0]! + ms));
  });

  it("a window nobody fills keeps at most about twice its claims", async () => {
    const { prefix, b, clock, claim } = fresh();
    await b.enqueue(Array.from({ length: 200 }, (_, i) => limited(`j${i}`, 1_000_000)));
    let most = 0;
    for (let step = 0; step < 200; step++) {
      const got = await claim(1);
      expect(got).toHaveLength(1);
      await b.complete([{ lease: got[0]!.lease, result: null }]);
      most = Math.max(most, await admin.zcard(`${prefix}:{q}:kr:acct`));
      clock.advance(100);
    }
    // Ten claims fall in one window: trimmed at twice the members kept (and 16), it never holds 200.
    expect(most).toBeGreaterThanOrEqual(11);
    expect(most).toBeLessThanOrEqual(2 * 11 + 16 + 1);
  });
});

const limited = (jobId: string) => buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId, limiter: { key: "acct", max: 3, durationMs: 1_000 } } });

/*
 * A limiter key's window kr:<key> must expire "one to two minutes after it
 * last counts" (keys.ts). Layout 4 renews the expiry only when the count kn:<key> says it is near
 * (windows_write in claim-4.lua). A claim that trims the window to empty (Redis deletes the empty
 * ZSET) and then starts jobs of the key re-creates kr:<key> with ZADD, without any expiry, while the
 * count still says the keys live long enough: the window then never expires (a key per tenant,
 * kept for ever once the tenant goes idle).
 */
describe("Redis limiter window expiry (layout 4)", () => {
  it("a window trimmed to empty and refilled by the same claim still expires", async () => {
    const prefix = stores.prefix("kexp");
    const clock = new FakeClock();
    const b = stores.backend({ prefix, clock });
    const claim = () => b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 10, leaseMs: 60_000 });
    const windowKey = `${prefix}:{q}:kr:acct`;
    const countKey = `${prefix}:{q}:kn:acct`;

    await b.enqueue(Array.from({ length: 6 }, (_, i) => limited(`j${i}`)));
    expect(await claim()).toHaveLength(3);
    // Both keys expire: renewed by the first start.
    expect(await admin.pttl(windowKey)).toBeGreaterThan(0);
    expect(await admin.pttl(countKey)).toBeGreaterThan(0);

    // The window's three starts leave it; the next claim finds the count full, trims the window
    // (all of it: Redis deletes the empty set) and starts three more.
    clock.advance(1_500);
    expect(await claim()).toHaveLength(3);
    expect(await admin.zcard(windowKey)).toBe(1);
    expect(await admin.pttl(countKey)).toBeGreaterThan(0);
    // -1: the re-created window has no expiry; it outlives its count and stays for ever.
    expect(await admin.pttl(windowKey)).toBeGreaterThan(0);
  });
});
