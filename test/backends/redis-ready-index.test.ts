/**
 * The ready index (issue #12, many empty queues; src/backend/redis/ready-index.ts and "Ready index"
 * in lua/_common.lua): on one Redis server the scripts keep `<prefix>:ready`, the queues that may
 * have a claimable job, and a claim naming many queues visits only those. A queue missing from it
 * while it holds a claimable job would be skipped by such claims, so every way a job becomes
 * claimable is tested here on its own: the job's queue starts without a mark (checked), the one
 * action under test puts the job back, and a claim naming 1,000 queues (999 of them empty) must
 * take it next. Also: such a claim runs the claim script on the busy queue alone, turn order across
 * busy queues is the one of trying every queue in turn, the upgrade from layout 4 builds the index,
 * and the full pass finds a job whose queue lost its mark.
 */
import { Redis } from "ioredis";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import { inject } from "vitest";
import { RedisBackend } from "../../src/backend/redis/backend.js";
import { LAYOUT_VERSION } from "../../src/backend/redis/keys.js";
import { READY_FULL_PASS_MS } from "../../src/backend/redis/ready-index.js";
import { ScriptRunner } from "../../src/backend/redis/scripts.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { FakeClock, silentLogger, type JobOptions } from "../../src/index.js";
import { deletePrefix, requireRedis, testPrefix } from "../helpers/redis.js";

const url = requireRedis(inject("redisUrl"), inject("redisUnavailable"));
const admin = new Redis(url);
const prefixes: string[] = [];
const backends: RedisBackend[] = [];

afterEach(async () => {
  vi.useRealTimers();
  await Promise.all(backends.splice(0).map((b) => b.close()));
});

afterAll(async () => {
  for (const prefix of prefixes) await deletePrefix(url, prefix);
  await admin.quit();
});

const WORKER = { id: "w1", host: "h", pid: 1 };
const LEASE_MS = 1_000;
/** 1,000 queue names; the tests put jobs into a few of them. One array: the facade keeps its checked copy. */
const QUEUES = Array.from({ length: 1_000 }, (_, i) => `q${String(i).padStart(4, "0")}`);
/** The queue the single-queue tests use: in the middle, so turn order reaches it after many empty ones. */
const Q = "q0500";
const ERROR = { name: "E", message: "m", stack: null };

function fresh(prefix = testPrefix("ready")) {
  if (!prefixes.includes(prefix)) prefixes.push(prefix);
  const clock = new FakeClock();
  const b = new RedisBackend({ connection: url, logger: silentLogger, prefix, clock });
  backends.push(b);
  const claimAll = (limit = 10) => b.claim({ queues: QUEUES, names: ["job"], worker: WORKER, limit, leaseMs: LEASE_MS });
  const claimQ = (limit = 10) => b.claim({ queues: [Q], names: ["job"], worker: WORKER, limit, leaseMs: LEASE_MS });
  const mark = async (queue = Q) => admin.zscore(`${prefix}:ready`, queue);
  const add = (jobId: string, options: JobOptions = {}, queue = Q) =>
    b.enqueue([buildJobSpec({ queue, name: "job", data: {}, options: { jobId, ...options } })]);
  /** Enqueues `jobId` and claims it from its queue alone: the queue is left empty and unmarked. */
  const running = async (jobId: string, options: JobOptions = {}) => {
    await add(jobId, options);
    const [job] = await claimQ();
    expect(job!.job.id).toBe(jobId);
    expect(await mark()).toBeNull();
    return job!;
  };
  return { prefix, clock, b, claimAll, claimQ, mark, add, running };
}

const ids = (claimed: readonly { job: { id: string; queue: string } }[]) => claimed.map((c) => `${c.job.queue}/${c.job.id}`);

/**
 * The script calls this process makes while `run` runs (spied on the script runner, so other
 * files' traffic on the shared Redis does not count): the queue of each claim script call and how
 * many reads of the ready index.
 */
async function scriptCalls(run: () => Promise<unknown>): Promise<{ claims: string[]; readyReads: number }> {
  const spy = vi.spyOn(ScriptRunner.prototype, "run");
  try {
    await run();
    const calls = spy.mock.calls;
    return {
      claims: calls.filter(([name]) => name === "claim").map(([, keys]) => /\{([^}]*)\}/.exec(keys[0]!)![1]!),
      readyReads: calls.filter(([name]) => name === "ready").length,
    };
  } finally {
    spy.mockRestore();
  }
}

describe("Redis ready index: a job that becomes claimable in an empty queue among 1,000 named is the next claim's", () => {
  it("enqueue, due now with priority 0 (a fast lane)", async () => {
    const t = fresh();
    await t.add("a");
    expect(await t.mark()).toBe("0");
    expect(ids(await t.claimAll())).toEqual([`${Q}/a`]);
  });

  it("enqueue with a priority (a slow lane)", async () => {
    const t = fresh();
    await t.add("a", { priority: 3 });
    expect(ids(await t.claimAll())).toEqual([`${Q}/a`]);
  });

  it("enqueue with a delay, once it comes due (promoted by the claim); not before", async () => {
    const t = fresh();
    await t.add("a", { delayMs: 5_000 });
    expect(Number(await t.mark())).toBe(t.clock.now() + 5_000);
    expect(await t.claimAll()).toEqual([]);
    t.clock.advance(5_000);
    expect(ids(await t.claimAll())).toEqual([`${Q}/a`]);
  });

  it("a retry (fail with a delay), once due", async () => {
    const t = fresh();
    const job = await t.running("a");
    await t.b.fail([{ lease: job.lease, error: ERROR, retryDelayMs: 1_000 }]);
    expect(await t.claimAll()).toEqual([]);
    t.clock.advance(1_000);
    expect(ids(await t.claimAll())).toEqual([`${Q}/a`]);
  });

  it("a release", async () => {
    const t = fresh();
    const job = await t.running("a");
    await t.b.release([job.lease]);
    expect(ids(await t.claimAll())).toEqual([`${Q}/a`]);
  });

  it("a rescue of an expired lease", async () => {
    const t = fresh();
    await t.running("a");
    t.clock.advance(LEASE_MS + 1);
    expect(await t.b.rescueExpired()).toHaveLength(1);
    expect(ids(await t.claimAll())).toEqual([`${Q}/a`]);
  });

  it("a replay of a dead job", async () => {
    const t = fresh();
    const job = await t.running("a");
    await t.b.fail([{ lease: job.lease, error: ERROR, retryDelayMs: null }]);
    expect(await t.b.replay("a", Q)).toBe("replayed");
    expect(ids(await t.claimAll())).toEqual([`${Q}/a`]);
  });

  it("a resume: a claim that met the queue paused took its mark, resuming gives it back", async () => {
    const t = fresh();
    await t.add("a");
    await t.b.pause(Q);
    expect(await t.claimAll()).toEqual([]);
    expect(await t.mark()).toBeNull();
    await t.b.resume(Q);
    expect(ids(await t.claimAll())).toEqual([`${Q}/a`]);
  });

  it("a flow parent released by its last child's completion", async () => {
    const t = fresh();
    const spec = (jobId: string) => buildJobSpec({ queue: Q, name: "job", data: {}, options: { jobId } });
    await t.b.enqueueFlow([
      { spec: spec("root"), parent: null, onChildFailure: "fail" },
      { spec: spec("child"), parent: 0, onChildFailure: "fail" },
    ]);
    const [child] = await t.claimQ();
    expect(child!.job.id).toBe("child");
    expect(await t.mark()).toBeNull();
    await t.b.complete([{ lease: child!.lease, result: null }]);
    expect(ids(await t.claimAll())).toEqual([`${Q}/root`]);
  });

  it("a dedup window's replace that brings a scheduled job's run time forward", async () => {
    const t = fresh();
    await t.add("a", { delayMs: 10_000, dedup: { key: "k", ttlMs: 60_000, mode: "replace" } });
    expect(await t.add("b", { delayMs: 1_000, dedup: { key: "k", ttlMs: 60_000, mode: "replace" } })).toEqual([
      { id: "a", duplicate: true, dedup: "replaced" },
    ]);
    t.clock.advance(1_000);
    expect(ids(await t.claimAll())).toEqual([`${Q}/a`]);
  });
});

// Filling 1,000 queues takes a few seconds on a loaded machine.
describe("Redis ready index: what a claim over many queues visits", { timeout: 60_000 }, () => {
  it("with one busy queue among 1,000 named, 999 of them known and empty, a claim runs the claim script on the busy queue alone", async () => {
    const t = fresh();
    // The 999 are known to the store: each had a job, cancelled (which takes its mark out).
    const empty = QUEUES.filter((q) => q !== Q);
    await t.b.enqueue(empty.map((queue) => buildJobSpec({ queue, name: "job", data: {}, options: { jobId: `x-${queue}` } })));
    await Promise.all(empty.map((queue) => t.b.cancel(`x-${queue}`, queue)));
    await t.b.enqueue(Array.from({ length: 50 }, (_, i) => buildJobSpec({ queue: Q, name: "job", data: {}, options: { jobId: `j${i}` } })));
    expect(await admin.zrange(`${t.prefix}:ready`, 0, -1)).toEqual([Q]);
    // The first claim reads the index; each claim script returns it as it leaves it, and the next
    // claim visits what that lists: one script call per claim.
    for (let i = 0; i < 3; i++) {
      const calls = await scriptCalls(async () => expect(await t.claimAll(5)).toHaveLength(5));
      expect(calls).toEqual({ claims: [Q], readyReads: i === 0 ? 1 : 0 });
    }
  });

  it("a queue that became ready after the last claim (not in its hint) is visited by the next claim that the hinted queues do not fill, else by the one after", async () => {
    const t = fresh();
    await t.b.enqueue(Array.from({ length: 20 }, (_, i) => buildJobSpec({ queue: Q, name: "job", data: {}, options: { jobId: `j${i}` } })));
    expect(await t.claimAll(5)).toHaveLength(5);
    // Another queue gets a job after the claim that left the hint ([Q]).
    await t.add("late", {}, "q0100");
    // The hinted queue fills this claim: the late job waits for the next one, whose hint lists its queue.
    const filled = await scriptCalls(async () => expect(ids(await t.claimAll(5))).not.toContain("q0100/late"));
    expect(filled).toEqual({ claims: [Q], readyReads: 0 });
    expect(ids(await t.claimAll(5))).toContain("q0100/late");
    // A claim the hinted queues cannot fill reads the index and visits the rest in the same claim.
    await t.add("later", {}, "q0200");
    const rest = await scriptCalls(async () => expect(ids(await t.claimAll(50))).toContain("q0200/later"));
    expect(rest.readyReads).toBe(1);
  });

  it("turn order across busy queues is that of trying every named queue in turn, each claim starting after the last queue the one before took from", async () => {
    const t = fresh();
    const busy = [0, 250, 500, 750].map((i) => QUEUES[i]!);
    for (const queue of busy) {
      await t.b.enqueue([1, 2].map((n) => buildJobSpec({ queue, name: "job", data: {}, options: { jobId: `${queue}-${n}` } })));
    }
    // Each claim takes from the first busy queue after the last one the claim before took from,
    // then the next (wrapping around), until it has its limit: round-robin over busy queues.
    expect(ids(await t.claimAll(1))).toEqual(["q0000/q0000-1"]);
    expect(ids(await t.claimAll(1))).toEqual(["q0250/q0250-1"]);
    expect(ids(await t.claimAll(1))).toEqual(["q0500/q0500-1"]);
    expect(ids(await t.claimAll(3))).toEqual(["q0750/q0750-1", "q0750/q0750-2", "q0000/q0000-2"]);
    expect(ids(await t.claimAll(3))).toEqual(["q0250/q0250-2", "q0500/q0500-2"]);
    expect(await admin.zcard(`${t.prefix}:ready`)).toBe(0);
  });

  it("a queue named just after a busy one that fills every claim gets its job in the next claim, not when the turn comes round", async () => {
    const t = fresh();
    await t.b.enqueue(Array.from({ length: 50 }, (_, n) => buildJobSpec({ queue: QUEUES[100]!, name: "job", data: {}, options: { jobId: `busy-${n}` } })));
    await t.b.enqueue([buildJobSpec({ queue: QUEUES[101]!, name: "job", data: {}, options: { jobId: "small" } })]);
    // The first claim fills from the busy queue; the next starts after it. (Starting one position
    // further per claim, the busy queue came first for about 100 claims.)
    expect(ids(await t.claimAll(5))).toEqual([0, 1, 2, 3, 4].map((n) => `${QUEUES[100]}/busy-${n}`));
    expect(ids(await t.claimAll(5))).toContain(`${QUEUES[101]}/small`);
  });

  it("a list mostly ready is claimed in turn without reading the index, until a claim meets empty queues", async () => {
    const t = fresh();
    const busy = QUEUES.slice(0, 300);
    await t.b.enqueue(busy.map((queue) => buildJobSpec({ queue, name: "job", data: {}, options: { jobId: `${queue}-1` } })));
    // The first claim reads the index: 300 of 1,000 ready is dense.
    expect(await scriptCalls(async () => expect(ids(await t.claimAll(1))).toEqual(["q0000/q0000-1"]))).toEqual({
      claims: ["q0000"],
      readyReads: 1,
    });
    // The next ones try the queues in turn, the same ones the index would have led to.
    expect(await scriptCalls(async () => expect(ids(await t.claimAll(1))).toEqual(["q0001/q0001-1"]))).toEqual({
      claims: ["q0001"],
      readyReads: 0,
    });
    // This one takes the other 298 and then tries the 702 empty queues in turn…
    const drain = await scriptCalls(async () => expect(await t.claimAll(300)).toHaveLength(298));
    expect(drain).toMatchObject({ claims: expect.arrayContaining(["q0999"]) as unknown, readyReads: 0 });
    expect(drain.claims).toHaveLength(1_000);
    // …so the next claim goes by the index again.
    expect(await scriptCalls(async () => expect(await t.claimAll(1)).toEqual([]))).toEqual({ claims: [], readyReads: 1 });
  });

  it("a claim that takes a queue's last job takes its mark out; a scheduled job leaves it at that job's run time", async () => {
    const t = fresh();
    await t.add("now");
    await t.add("later", { delayMs: 7_000 });
    expect(await t.mark()).toBe("0");
    expect(ids(await t.claimAll())).toEqual([`${Q}/now`]);
    expect(Number(await t.mark())).toBe(t.clock.now() + 7_000);
    t.clock.advance(7_000);
    expect(ids(await t.claimAll())).toEqual([`${Q}/later`]);
    expect(await t.mark()).toBeNull();
  });

  it("cancelling a queue's last pending job takes its mark out (a compact, a slow-lane and a scheduled job)", async () => {
    const t = fresh();
    for (const [jobId, options] of [
      ["compact", {}],
      ["slow", { priority: 2 }],
      ["scheduled", { delayMs: 5_000 }],
    ] as const) {
      await t.add(jobId, options);
      expect(await t.mark()).not.toBeNull();
      expect(await t.b.cancel(jobId, Q)).toBe("cancelled");
      expect(await t.mark()).toBeNull();
    }
  });

  it("a queue whose mark was lost (the index key edited by hand) is found by the full pass, which writes the mark again", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const t = fresh();
    await t.add("a");
    await admin.zrem(`${t.prefix}:ready`, Q);
    // The queue's meta still says it is marked, so this add writes nothing to the index either.
    await t.add("b");
    expect(await t.mark()).toBeNull();
    expect(await t.claimAll(1)).toEqual([]);
    vi.setSystemTime(Date.now() + READY_FULL_PASS_MS);
    const spy = vi.spyOn(ScriptRunner.prototype, "run");
    try {
      expect(ids(await t.claimAll(1))).toEqual([`${Q}/a`]);
      // Its hundreds of claim scripts (one per queue in turn) do not each return the index for a next claim (claim-4.lua ARGV[6] '').
      const claims = spy.mock.calls.filter(([name]) => name === "claim");
      expect(claims.length).toBeGreaterThan(100);
      expect(claims.filter(([, , args]) => args[5] !== "")).toEqual([]);
    } finally {
      spy.mockRestore();
    }
    // The full pass's claim of the queue wrote its mark: the next claim goes by the index again.
    expect(await t.mark()).toBe("0");
    expect(ids(await t.claimAll(1))).toEqual([`${Q}/b`]);
  });
  it("each queue list gets its own full pass: a list claiming first after the interval does not take another list's", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const t = fresh();
    // Another list, of every queue but Q: its full pass cannot find the job, and must not use up Q's list's.
    const others = QUEUES.filter((q) => q !== Q);
    const claimOthers = () => t.b.claim({ queues: others, names: ["job"], worker: WORKER, limit: 1, leaseMs: LEASE_MS });
    await t.add("a");
    await admin.zrem(`${t.prefix}:ready`, Q);
    expect(await claimOthers()).toEqual([]);
    expect(await t.claimAll(1)).toEqual([]);
    vi.setSystemTime(Date.now() + READY_FULL_PASS_MS);
    expect(await claimOthers()).toEqual([]);
    expect(ids(await t.claimAll(1))).toEqual([`${Q}/a`]);
  });
});

describe("Redis ready index: upgrade from layout 4", () => {
  it("data of layout 4 (no index) gets its marks when a process of layout 5 or later first connects", async () => {
    const prefix = testPrefix("ready-up");
    const before = fresh(prefix);
    await before.add("a");
    await before.add("later", { delayMs: 3_000 }, "q0900");
    await before.b.close();
    // What layout 4 left: no index, version 4 on the prefix and on each queue.
    await admin.del(`${prefix}:ready`);
    await admin.set(`${prefix}:layout`, "4");
    for (const queue of [Q, "q0900"]) await admin.hset(`${prefix}:{${queue}}:meta`, "lv", "4");

    const t = fresh(prefix);
    expect(ids(await t.claimAll())).toEqual([`${Q}/a`]);
    expect(await admin.get(`${prefix}:layout`)).toBe(String(LAYOUT_VERSION));
    t.clock.advance(3_000);
    expect(ids(await t.claimAll())).toEqual(["q0900/later"]);
  });
});

describe("Redis ready index: declared as a key", () => {
  it("every script call that reads or writes <prefix>:ready names it among its KEYS (seen with MONITOR)", async () => {
    const t = fresh();
    const readyKey = `${t.prefix}:ready`;
    // MONITOR shows a script's own line before the commands it runs ("lua" lines) up to Redis 7.0,
    // after them from 7.2 on. One Redis runs one script at a time, so the lua lines between two
    // script lines are one script's.
    const version = /redis_version:(\d+)\.(\d+)/.exec(await admin.info("server"))!;
    const linesAfter = Number(version[1]) * 100 + Number(version[2]) >= 702;
    const monitor = await admin.monitor();
    const calls: { keys: string[]; touched: boolean }[] = [];
    let inner: string[][] = [];
    monitor.on("monitor", (_time: string, args: string[], source: string) => {
      if (source === "lua") return void inner.push(args);
      const command = args[0]?.toLowerCase();
      if (command !== "evalsha" && command !== "eval") return;
      const call = { keys: args.slice(3, 3 + Number(args[2])), touched: false };
      if (linesAfter) call.touched = inner.some((a) => a[1] === readyKey);
      else if (calls.length > 0) calls[calls.length - 1]!.touched ||= inner.some((a) => a[1] === readyKey);
      inner = [];
      calls.push(call);
    });
    try {
      // Every kind of call that marks or unmarks a queue: fast lane, slow lane and scheduled enqueues,
      // claims (taking the last job, and a scheduled one left), a retry, a release, a rescue, a replay,
      // a cancel, a pause, a flow parent's release, a dedup replace.
      await t.add("a");
      await t.add("p", { priority: 2 });
      await t.add("d", { delayMs: 5_000 });
      await t.claimQ();
      await t.add("r");
      const [job] = await t.claimQ();
      await t.b.fail([{ lease: job!.lease, error: ERROR, retryDelayMs: 1_000 }]);
      t.clock.advance(1_000);
      const [retried] = await t.claimQ();
      await t.b.release([retried!.lease]);
      await t.claimQ();
      t.clock.advance(LEASE_MS + 1);
      await t.b.rescueExpired();
      const [rescued] = await t.claimQ();
      await t.b.fail([{ lease: rescued!.lease, error: ERROR, retryDelayMs: null }]);
      await t.b.replay("r", Q);
      await t.add("c");
      await t.b.cancel("c", Q);
      await t.b.pause(Q);
      await t.claimAll();
      await t.b.resume(Q);
      await t.add("x", { delayMs: 10_000, dedup: { key: "k", ttlMs: 60_000, mode: "replace" } });
      await t.add("y", { delayMs: 1_000, dedup: { key: "k", ttlMs: 60_000, mode: "replace" } });
      const spec = (jobId: string) => buildJobSpec({ queue: Q, name: "job", data: {}, options: { jobId } });
      await t.b.enqueueFlow([
        { spec: spec("root"), parent: null, onChildFailure: "fail" },
        { spec: spec("child"), parent: 0, onChildFailure: "fail" },
      ]);
      t.clock.advance(60_000);
      for (let claimed = await t.claimAll(); claimed.length > 0; claimed = await t.claimAll())
        await t.b.complete(claimed.map((c) => ({ lease: c.lease, result: null })));
      await t.b.complete([]);
      // MONITOR lines arrive after the commands' replies: one more command, answered once they all came.
      await admin.ping();
      await new Promise((resolve) => setTimeout(resolve, 100));
    } finally {
      monitor.disconnect();
    }
    if (!linesAfter && calls.length > 0) calls[calls.length - 1]!.touched ||= inner.some((a) => a[1] === readyKey);
    expect(calls.filter((c) => c.touched).length).toBeGreaterThan(15);
    expect(calls.filter((c) => c.touched && !c.keys.includes(readyKey))).toEqual([]);
  });
});
