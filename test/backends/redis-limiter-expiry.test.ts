/**
 * A limiter key's window kr:<key> must expire "one to two minutes after it
 * last counts" (keys.ts). Layout 4 renews the expiry only when the count kn:<key> says it is near
 * (windows_write in claim-4.lua). A claim that trims the window to empty (Redis deletes the empty
 * ZSET) and then starts jobs of the key re-creates kr:<key> with ZADD, without any expiry, while the
 * count still says the keys live long enough: the window then never expires (a key per tenant,
 * kept for ever once the tenant goes idle).
 */
import { Redis } from "ioredis";
import { afterAll, afterEach, describe, expect, inject, it } from "vitest";
import { RedisBackend } from "../../src/backend/redis/backend.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { FakeClock, silentLogger } from "../../src/index.js";
import { deletePrefix, requireRedis, testPrefix } from "../helpers/redis.js";

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
const limited = (jobId: string) => buildJobSpec({ queue: "q", name: "job", data: {}, options: { jobId, limiter: { key: "acct", max: 3, durationMs: 1_000 } } });

describe("Redis limiter window expiry (layout 4)", () => {
  it("a window trimmed to empty and refilled by the same claim still expires", async () => {
    const prefix = testPrefix("kexp");
    prefixes.push(prefix);
    const clock = new FakeClock();
    const b = new RedisBackend({ connection: url, logger: silentLogger, prefix, clock });
    backends.push(b);
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
