/**
 * The Redis event log's entries (layout 5, log_event in src/backend/redis/lua/_common.lua): an
 * "added" entry leaves its type blank, and an entry made at Redis' own time (no injected clock)
 * leaves its `at` blank, the stream id carrying that time; 13 bytes of an "added" entry's ~60,
 * for the memory per waiting job. Readers (event-log.ts, prune-events-1.lua) fill both back in.
 */
import { Redis } from "ioredis";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { inject } from "vitest";
import { RedisBackend } from "../../src/backend/redis/backend.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { FakeClock, silentLogger } from "../../src/index.js";
import { deletePrefix, requireRedis, testPrefix } from "../helpers/redis.js";
import { waitFor } from "../helpers/wait-for.js";

const url = requireRedis(inject("redisUrl"), inject("redisUnavailable"));
const admin = new Redis(url);
const prefixes: string[] = [];
const backends: RedisBackend[] = [];

afterEach(async () => {
  await Promise.all(backends.splice(0).map((b) => b.close()));
});

afterAll(async () => {
  for (const prefix of prefixes) await deletePrefix(url, prefix);
  await admin.quit();
});

const WORKER = { id: "w1", host: "h", pid: 1 };

function fresh(clock?: FakeClock) {
  const prefix = testPrefix("events");
  prefixes.push(prefix);
  const b = new RedisBackend({ connection: url, logger: silentLogger, prefix, ...(clock ? { clock } : {}) });
  backends.push(b);
  const stream = async () => (await admin.xrange(`${prefix}:{q}:ev`, "-", "+")) as Array<[string, string[]]>;
  return { prefix, b, stream };
}

const spec = (jobId: string) => buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId } });
const redisMs = async () => {
  const [s, us] = await admin.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
};
const fieldsOf = (entry: [string, string[]]) => Object.fromEntries(entry[1].flatMap((v, i, all) => (i % 2 === 0 ? [[v, all[i + 1]!]] : [])));

describe("Redis event entries (layout 5)", () => {
  it("on Redis' own clock: type and time blank in the stream, read back as 'added' / 'active' at the stream id's time", async () => {
    const { b, stream } = fresh();
    const cursor = await b.latestEventCursor();
    const before = await redisMs();
    await b.enqueue([spec("a")]);
    await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 1, leaseMs: 60_000 });
    const after = await redisMs();

    const entries = await stream();
    expect(entries.map(fieldsOf)).toEqual([
      { t: "", n: "job", j: "a", a: "0", at: "", d: "" },
      { t: "active", n: "job", j: "a", a: "1", at: "", d: '{"workerId":"w1"}' },
    ]);
    const page = await b.readEvents(cursor, 10);
    expect(page.events.map((e) => [e.type, e.jobId, e.attempt])).toEqual([
      ["added", "a", 0],
      ["active", "a", 1],
    ]);
    for (const [i, event] of page.events.entries()) {
      expect(event.at).toBe(Number(entries[i]![0].split("-")[0]));
      expect(event.at).toBeGreaterThanOrEqual(before);
      expect(event.at).toBeLessThanOrEqual(after);
    }
    expect(page.events[0]!.data).toEqual({ state: "waiting", runAt: page.events[0]!.at, priority: 0 });
  });

  it("on an injected clock the time is written out, and a layout 4 entry (type and time in full) reads the same", async () => {
    const clock = new FakeClock();
    const { prefix, b, stream } = fresh(clock);
    const cursor = await b.latestEventCursor();
    await b.enqueue([spec("a")]);
    expect(fieldsOf((await stream())[0]!)).toMatchObject({ t: "", at: String(clock.now()) });
    await admin.xadd(`${prefix}:{q}:ev`, "*", "t", "added", "n", "job", "j", "old", "a", "0", "at", "1234", "d", "");
    const events = (await b.readEvents(cursor, 10)).events;
    expect(events.map((e) => [e.type, e.jobId, e.at])).toEqual([
      ["added", "a", clock.now()],
      ["added", "old", 1234],
    ]);
    expect(events[1]!.data).toEqual({ state: "waiting", runAt: 1234, priority: 0 });
  });

  it("pruning by age takes entries whose time is their stream id's", async () => {
    const { b, stream } = fresh();
    await b.enqueue([spec("a"), spec("b")]);
    const written = Number((await stream())[1]![0].split("-")[0]);
    // Redis' clock moves past the entries' time by more than the age kept.
    await waitFor(async () => (await redisMs()) > written + 5, { timeoutMs: 10_000, description: "Redis' clock 5 ms past the entries" });
    expect(await b.pruneEvents({ maxAgeMs: 2 })).toBe(2);
    expect(await stream()).toEqual([]);
  });
});
