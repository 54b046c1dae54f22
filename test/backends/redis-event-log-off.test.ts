/**
 * The Redis event log switched off per prefix (RedisBackendOptions.eventLog, `?eventLog=off`):
 * no stream is written, every reader refuses by name, the prefix records the setting so a process
 * configured otherwise refuses to start, and per-job event streams still work (by polling).
 * The conformance suite runs the event-log tests with the log on (the default).
 */
import { afterEach, describe, expect, it } from "vitest";
import { openBackend } from "../../src/backend/open.js";
import { type RedisBackendOptions } from "../../src/backend/redis/backend.js";
import { Worker } from "../../src/index.js";
import { expectEventLogReadersRefused, expectJobEventStreamByPolling, runEveryEventPath } from "../helpers/event-log-off.js";
import { testPrefix } from "../helpers/redis.js";
import { redisTestStores } from "../helpers/redis-stores.js";

const stores = redisTestStores();
const { url, admin, closeAfterTest } = stores;
const workers: Worker[] = [];

// Registered after the stores, so it runs before they close (vitest runs afterEach hooks last first).
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.close({ force: true })));
});

const backend = (options: Partial<RedisBackendOptions> & { prefix: string }) => stores.backend(options);

async function streamKeys(prefix: string): Promise<string[]> {
  return (await admin.keys(`${prefix}:*`)).filter((k) => k.endsWith(":ev"));
}

describe("Redis event log off (eventLog: false)", () => {
  it("writes no stream while jobs are added, run, retried, removed and dead; the same run with the log on writes one", async () => {
    const offPrefix = testPrefix("evoff");
    const off = backend({ prefix: offPrefix, eventLog: false });
    expect(off.capabilities.eventLog).toBe(false);
    await runEveryEventPath(off, 20, workers);
    expect(await streamKeys(offPrefix)).toEqual([]);

    const onPrefix = testPrefix("evon");
    const on = backend({ prefix: onPrefix });
    expect(on.capabilities.eventLog).toBe(true);
    await runEveryEventPath(on, 20, workers);
    const keys = await streamKeys(onPrefix);
    expect(keys).toHaveLength(1);
    // added, active and completed/retrying/dead for each of the 22 jobs (one runs twice)
    expect(await admin.xlen(keys[0]!)).toBeGreaterThanOrEqual(22 * 3);
  });

  it("refuses every reader by name: readEvents, queue.events(), GET /v1/events (501); no event tail for the dashboard", async () => {
    const b = backend({ prefix: testPrefix("evoff"), eventLog: false });
    await b.migrate();
    await expectEventLogReadersRefused(b, { cursor: "0", scope: "prefix" });
  });

  it("a job's own event stream (GET /v1/jobs/{id}/events) still reports its completion, by polling", async () => {
    await expectJobEventStreamByPolling(backend({ prefix: testPrefix("evoff"), eventLog: false }), workers);
  });

  it("one setting per prefix: the first process records it, a process configured otherwise refuses to start", async () => {
    const prefix = testPrefix("evset");
    await backend({ prefix, eventLog: false }).migrate();
    expect(await admin.get(`${prefix}:event-log`)).toBe("off");
    await expect(backend({ prefix }).migrate()).rejects.toThrow(/keeps its event log off.*pass eventLog: false \(\?eventLog=off in a URL\)/);
    await backend({ prefix, eventLog: false }).migrate();

    const other = testPrefix("evset");
    await backend({ prefix: other }).migrate();
    expect(await admin.get(`${other}:event-log`)).toBe("on");
    await expect(backend({ prefix: other, eventLog: false }).migrate()).rejects.toThrow(/keeps its event log on/);

    // Data from before the setting existed had the log on: it is recorded as on.
    const old = stores.prefix("evold");
    await admin.sadd(`${old}:queues`, "q");
    await expect(backend({ prefix: old, eventLog: false }).migrate()).rejects.toThrow(/keeps its event log on/);
  });

  it("?eventLog=off in a redis:// URL (the CLI's --db) turns it off; another value is refused", async () => {
    const prefix = stores.prefix("evurl");
    const b = closeAfterTest(await openBackend(`${url}${url.includes("?") ? "&" : "?"}prefix=${prefix}&eventLog=off`));
    expect(b.capabilities.eventLog).toBe(false);
    await expect(openBackend(`${url}${url.includes("?") ? "&" : "?"}prefix=${prefix}&eventLog=no`)).rejects.toThrow(/\?eventLog= takes on or off/);
  });
});
