/**
 * Redis' event ids stay short whatever the number of queues (event-log.ts): a watermark and the
 * queues with events in about the last second, not a position per queue. Before, an id named
 * every queue with events (about 33 bytes each): past about 270 queues a client of
 * `GET /v1/events` could not send its id back (400 on `?lastEventId=`, 431 on `Last-Event-ID`
 * past about 500). Each test here checks the one promise that matters besides the length: resuming
 * after any id hands out every later event once, none earlier.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { EventSource } from "eventsource";
import { afterEach, describe, expect, it } from "vitest";
import { STREAM_ENTRIES_PER_CALL, type RedisBackend } from "../../src/backend/redis/backend.js";
import { CLOCK_SKEW_ALLOWANCE_MS, MAX_ISSUED_CURSOR_LENGTH } from "../../src/backend/redis/event-log.js";
import { InvalidInputError } from "../../src/core/errors.js";
import { buildJobSpec } from "../../src/core/spec.js";
import type { QueueEvent } from "../../src/core/queue-events.js";
import { hashApiKey } from "../../src/http/auth.js";
import { createServer } from "../../src/http/index.js";
import { redisTestStores } from "../helpers/redis-stores.js";
import { openStream } from "../http/harness.js";
import { waitFor } from "../helpers/wait-for.js";

const stores = redisTestStores({}, { prefixLabel: "evid" });
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const START = Buffer.from("{}").toString("base64url");
const spec = (queue: string, jobId: string) => buildJobSpec({ queue, name: "job", data: {}, options: { jobId } });
const key = (e: QueueEvent) => `${e.queue}/${e.jobId}/${e.type}`;
/** Long enough for every event written before it to be settled (the watermark passes them). */
const settle = () => sleep(CLOCK_SKEW_ALLOWANCE_MS + 200);

/**
 * How far past MAX_ISSUED_CURSOR_LENGTH an id may go: only an id naming no more queues than the one
 * before it passes the bound, by the few characters its queue's new position takes.
 */
const LONGEST_ID = MAX_ISSUED_CURSOR_LENGTH + 64;

/**
 * Every event after `cursor`, in pages of `limit`, until pages have been empty for longer than the
 * skew allowance (`settled`: events written more than that ago, so the first empty page is the end).
 */
async function readToEnd(b: RedisBackend, cursor: string, limit: number, settled = false): Promise<{ events: QueueEvent[]; cursor: string }> {
  const events: QueueEvent[] = [];
  let quietSince: number | null = null;
  for (;;) {
    const page = await b.readEvents(cursor, limit);
    for (const e of page.events) expect(e.id.length).toBeLessThanOrEqual(Math.max(LONGEST_ID, cursor.length));
    if (settled && page.events.length === 0) return { events, cursor };
    events.push(...page.events);
    cursor = page.cursor;
    if (page.events.length > 0) quietSince = null;
    else if (quietSince === null) quietSince = Date.now();
    else if (Date.now() - quietSince > CLOCK_SKEW_ALLOWANCE_MS + 200) return { events, cursor };
    if (page.events.length === 0) await sleep(50);
  }
}

describe("Redis event ids", () => {
  it("stay short with 600 queues, and resuming after any of them hands out exactly the events after it", async () => {
    const b = stores.backend();
    const queues = Array.from({ length: 600 }, (_, i) => `q${String(i).padStart(3, "0")}`);
    for (const q of queues) await b.enqueue([spec(q, `${q}-a`)]);
    await settle();
    const all = (await readToEnd(b, START, 97, true)).events;
    expect(all.map(key).sort()).toEqual(queues.map((q) => `${q}/${q}-a/added`).sort());
    // Settled events: a watermark alone (a queue more only for a tie of stream ids).
    expect(Math.max(...all.map((e) => e.id.length))).toBeLessThan(200);
    for (const i of [0, 1, 299, 598, 599]) {
      expect((await readToEnd(b, all[i]!.id, 50, true)).events.map(key)).toEqual(all.slice(i + 1).map(key));
    }
    // The latest cursor too: nothing before it, the next event after it.
    const latest = await b.latestEventCursor();
    expect(latest.length).toBeLessThan(200);
    await b.enqueue([spec("q123", "q123-b")]);
    expect((await readToEnd(b, latest, 10)).events.map(key)).toEqual(["q123/q123-b/added"]);
  });

  it("600 queues with events this very second: pages stop at the longest id and hand out the rest as the watermark moves, each event once", async () => {
    const b = stores.backend();
    const from = await b.latestEventCursor();
    const queues = Array.from({ length: 600 }, (_, i) => `burst-${i}`);
    const burstStart = await stores.redisNow();
    await b.enqueue(queues.map((q) => spec(q, "j")));
    const first = await b.readEvents(from, 1_000);
    // About a hundred queues can be named in an id; the rest waits for the watermark (if the
    // burst was written within half a second: on a machine so loaded that it took longer, part of
    // it is settled already and comes with short ids).
    expect(first.events.length).toBeGreaterThan(0);
    if ((await stores.redisNow()) - burstStart < 500) expect(first.events.length).toBeLessThan(600);
    for (const e of first.events) expect(e.id.length).toBeLessThanOrEqual(LONGEST_ID);
    const rest = await readToEnd(b, first.cursor, 1_000);
    const seen = [...first.events, ...rest.events].map(key);
    expect(seen.slice().sort()).toEqual(queues.map((q) => `${q}/j/added`).sort());
    expect(new Set(seen).size).toBe(seen.length);
  });

  it("many writers on many queues while a reader pages through: every event exactly once, in each queue's order", async () => {
    const prefix = stores.prefix("evid");
    const b = stores.backend({ prefix });
    const writer = stores.backend({ prefix });
    const from = await b.latestEventCursor();
    const queues = Array.from({ length: 40 }, (_, i) => `w${i}`);
    let writing = true;
    const writers = Array.from({ length: 8 }, async (_, w) => {
      for (let n = 0; writing; n++) {
        const q = queues[(n * 7 + w) % queues.length]!;
        await writer.enqueue([spec(q, `${w}-${n}`)]);
      }
    });
    const read: QueueEvent[] = [];
    let cursor = from;
    const until = Date.now() + 2_500;
    while (Date.now() < until) {
      // Small pages, each resumed from the last id handed out (as an SSE client would).
      const page = await b.readEvents(cursor, 7);
      read.push(...page.events);
      if (page.events.length > 0) cursor = page.events.at(-1)!.id;
    }
    writing = false;
    await Promise.all(writers);
    read.push(...(await readToEnd(b, cursor, 7)).events);
    const written = (await readToEnd(b, from, 500)).events;
    expect(written.length).toBeGreaterThan(100);
    expect(read.map(key)).toHaveLength(new Set(read.map(key)).size);
    expect(read.map(key).sort()).toEqual(written.map(key).sort());
    for (const q of queues) expect(read.filter((e) => e.queue === q).map(key)).toEqual(written.filter((e) => e.queue === q).map(key));
  });

  it("takes the cursor earlier versions handed out (every queue's position) and resumes after it", async () => {
    const prefix = stores.prefix("evid");
    const b = stores.backend({ prefix });
    for (const q of ["a", "b", "c"]) await b.enqueue([spec(q, "one")]);
    await settle();
    const lastId = async (q: string) => ((await stores.admin.xrevrange(`${prefix}:{${q}}:ev`, "+", "-", "COUNT", 1)) as [string, string[]][])[0]![0];
    const positions: Record<string, string> = { a: await lastId("a"), b: await lastId("b") };
    const old = Buffer.from(JSON.stringify(positions)).toString("base64url");
    await b.enqueue([spec("a", "two")]);
    // Queue c is not named: an earlier version's cursor read it from its start.
    expect((await readToEnd(b, old, 10)).events.map(key).sort()).toEqual(["a/two/added", "c/one/added"]);
    // A cursor of the new shape with an exception at or before its watermark was never issued.
    const forged = Buffer.from(JSON.stringify(["5-0", { a: "4-0" }])).toString("base64url");
    await expect(b.readEvents(forged, 10)).rejects.toThrow(/not one this store issued/);
  });

  it("a queue is in the registry before its first event is written (a reader takes a queue it does not find there to have none before)", async () => {
    const prefix = stores.prefix("evid");
    const b = stores.backend({ prefix });
    const monitor = await stores.admin.duplicate().monitor();
    cleanups.push(() => monitor.disconnect() as unknown as Promise<void>);
    const commands: string[][] = [];
    monitor.on("monitor", (_time: string, args: string[]) => {
      if (args.some((a) => a.includes(prefix))) commands.push(args.map(String));
    });
    await b.enqueue([spec("first", "a")]);
    await b.enqueue([spec("m1", "a"), spec("m2", "b")]);
    await sleep(200);
    for (const q of ["first", "m1", "m2"]) {
      const registered = commands.findIndex((c) => c[0]!.toLowerCase() === "sadd" && c.slice(2).includes(q));
      const written = commands.findIndex((c) => /^eval/i.test(c[0]!) && c.some((a) => a.startsWith(`${prefix}:{${q}}:`)));
      // Before, the add and the registration went out together: the event could come first.
      expect(registered, q).toBeGreaterThanOrEqual(0);
      expect(written, q).toBeGreaterThan(registered);
    }
  });

  it("the latest cursor stays short after 3,000 queues' events in one burst (it starts at the watermark, repeating that second)", async () => {
    const b = stores.backend();
    const queues = Array.from({ length: 3_000 }, (_, i) => `l${i}`);
    await b.enqueue(queues.map((q) => spec(q, "j")));
    const latest = await b.latestEventCursor();
    expect(latest.length).toBeLessThanOrEqual(MAX_ISSUED_CURSOR_LENGTH);
    await b.enqueue([spec("l7", "after")]);
    const read = (await readToEnd(b, latest, 500)).events.map(key);
    // Every event after the cursor, maybe some of the burst again, never none of what follows.
    expect(read).toContain("l7/after/added");
    expect(read.filter((k) => k !== "l7/after/added").every((k) => k.endsWith("/j/added"))).toBe(true);
  });

  it("refuses a cursor whose stream ids Redis would refuse (a sequence past 2^64 - 1) as one it never issued, not as a store error", async () => {
    const b = stores.backend();
    await b.enqueue([spec("b", "x")]);
    for (const doc of [["1-99999999999999999999", {}, "a"], ["1-0", { b: "2-99999999999999999999" }], ["1-99999999999999999999"]]) {
      await expect(b.readEvents(Buffer.from(JSON.stringify(doc)).toString("base64url"), 10)).rejects.toBeInstanceOf(InvalidInputError);
    }
  });

  it("streams stamped an hour ahead of Redis' clock (a clock set back) on 150 queues: every event still comes, ids past the bound rather than a stall", async () => {
    const prefix = stores.prefix("evid");
    const b = stores.backend({ prefix });
    const from = await b.latestEventCursor();
    const ahead = (await stores.redisNow()) + 3_600_000;
    const queues = Array.from({ length: 150 }, (_, i) => `f${i}`);
    for (const q of queues) {
      await b.enqueue([spec(q, "before")]);
      await stores.admin.xadd(`${prefix}:{${q}}:ev`, `${ahead}-0`, "t", "", "n", "job", "j", "future", "d", "");
      await b.enqueue([spec(q, "after")]);
    }
    const started = Date.now();
    const read: QueueEvent[] = [];
    let cursor = from;
    while (read.length < 450 && Date.now() - started < 10_000) {
      const page = await b.readEvents(cursor, 1_000);
      read.push(...page.events);
      cursor = page.cursor;
      if (page.events.length === 0) await sleep(50);
    }
    expect(read.map(key).sort()).toEqual(queues.flatMap((q) => [`${q}/before/added`, `${q}/future/added`, `${q}/after/added`]).sort());
  });

  it(
    "an EventSource (the eventsource package) on a store with 600 queues reconnects with its Last-Event-ID after the server restarts and misses nothing",
    { timeout: 60_000 },
    async () => {
      const b = stores.backend();
      const KEY = "read-key-0123456789abcdef";
      const serve = async (port = 0) => {
        const app = await createServer({ backend: b, logger: false, apiKeys: [{ id: "reader", sha256: hashApiKey(KEY), scopes: ["read"] }] });
        await app.listen({ port, host: "127.0.0.1" });
        cleanups.push(() => app.close());
        return { app, port: (app.server.address() as { port: number }).port };
      };
      let server = await serve();
      const received: string[] = [];
      const source = new EventSource(`http://127.0.0.1:${server.port}/v1/events`, {
        fetch: (input, init) => fetch(input, { ...init, headers: { ...init.headers, authorization: `Bearer ${KEY}` } }),
      });
      cleanups.push(async () => source.close());
      source.addEventListener("added", (e) => {
        const data = JSON.parse(e.data as string) as { queue: string; jobId: string };
        received.push(`${data.queue}/${data.jobId}`);
      });
      await new Promise<void>((resolve, reject) => {
        source.onopen = () => resolve();
        source.onerror = (e) => reject(new Error(`EventSource failed: ${String(e.message)}`));
      });
      source.onerror = null;
      const queues = Array.from({ length: 600 }, (_, i) => `s${i}`);
      for (const q of queues) await b.enqueue([spec(q, "one")]);
      await waitFor(() => received.length === 600, { timeoutMs: 20_000 });
      // Events of 600 queues behind its last id; then the server goes away, more events come, and
      // a new server on the same port takes the client's reconnect.
      await server.app.close();
      for (const q of queues.slice(0, 50)) await b.enqueue([spec(q, "two")]);
      server = await serve(server.port);
      await waitFor(() => received.length === 650, { timeoutMs: 20_000 });
      // Each event once (queues' events of one millisecond come in queue name order, not write order).
      expect(received.slice().sort()).toEqual([...queues.map((q) => `${q}/one`), ...queues.slice(0, 50).map((q) => `${q}/two`)].sort());
      for (const q of queues.slice(0, 50)) expect(received.indexOf(`${q}/one`)).toBeLessThan(received.indexOf(`${q}/two`));
    },
  );

  it("GET /v1/events resumes after Last-Event-ID and ?lastEventId= on a store with 600 queues", async () => {
    const b = stores.backend();
    const queues = Array.from({ length: 600 }, (_, i) => `h${i}`);
    for (const q of queues) await b.enqueue([spec(q, "x")]);
    const KEY = "read-key-0123456789abcdef";
    const app = await createServer({ backend: b, logger: false, apiKeys: [{ id: "reader", sha256: hashApiKey(KEY), scopes: ["read"] }] });
    await app.listen({ port: 0, host: "127.0.0.1" });
    cleanups.push(() => app.close());
    const base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}/v1/events`;
    const auth = { authorization: `Bearer ${KEY}` };
    const all = (await readToEnd(b, START, 1_000)).events;
    expect(all).toHaveLength(600);
    const after = all[300]!;
    for (const open of [() => openStream(base, { ...auth, "last-event-id": after.id }), () => openStream(`${base}?lastEventId=${after.id}`, auth)]) {
      const client = await open();
      cleanups.push(async () => client.close());
      expect(client.status).toBe(200);
      await client.waitForEvent(() => client.events.length >= 299, 10_000);
      client.close();
      expect(client.events.map((e) => `${String(e.data.jobId)}@${String(e.data.queue)}`)).toEqual(all.slice(301).map((e) => `x@${e.queue}`));
    }
  });
});

/**
 * On one server a read of the log takes one script call for many queues' streams (read-streams-1.lua),
 * where it took one per queue: an idle poll of 600 queues cost about 10 ms of the reader's CPU
 * and 6 ms of Redis'. Counted with MONITOR: script calls on the prefix's event streams.
 */
describe("Redis event log reads on one server", () => {
  /** The script calls (EVALSHA/EVAL) on `prefix`'s event streams while `work` runs, with their stream counts. */
  async function streamCalls(prefix: string, work: () => Promise<unknown>): Promise<number[]> {
    const monitor = await stores.admin.duplicate().monitor();
    const calls: number[] = [];
    monitor.on("monitor", (_time: string, args: string[]) => {
      if (!/^eval/i.test(String(args[0]))) return;
      const keys = args.slice(3, 3 + Number(args[2])).map(String);
      if (keys.length > 0 && keys.every((k) => k.startsWith(`${prefix}:`) && k.endsWith(":ev"))) calls.push(keys.length);
    });
    try {
      await work();
      await sleep(200);
    } finally {
      monitor.disconnect();
    }
    return calls;
  }

  it("an idle read and the latest cursor of 600 queues read every stream in one script call", async () => {
    const prefix = stores.prefix("evrd");
    const b = stores.backend({ prefix });
    for (let i = 0; i < 600; i++) await b.enqueue([spec(`q${i}`, "a")]);
    await settle();
    let latest = "";
    expect(await streamCalls(prefix, async () => (latest = await b.latestEventCursor()))).toEqual([600]);
    let page: Awaited<ReturnType<RedisBackend["readEvents"]>> | null = null;
    expect(await streamCalls(prefix, async () => (page = await b.readEvents(latest, 500)))).toEqual([600]);
    expect(page!.events).toEqual([]);
    // Still the events after it, and nothing else.
    await b.enqueue([spec("q7", "b")]);
    expect((await readToEnd(b, latest, 500)).events.map(key)).toEqual(["q7/b/added"]);
  });

  it("a read catching up on backlogs stops each call at its entry bound and reads the other streams in the next: every event once, in each queue's order", async () => {
    const prefix = stores.prefix("evrd");
    const b = stores.backend({ prefix });
    const limit = 500;
    // Each stream gives `limit` entries to the first read: the bound is met after `perCall` streams.
    const perCall = STREAM_ENTRIES_PER_CALL / limit;
    const queues = Array.from({ length: perCall + 3 }, (_, i) => `b${String(i).padStart(2, "0")}`);
    for (const q of queues) await b.enqueue(Array.from({ length: limit + 100 }, (_, j) => spec(q, `${q}-${String(j).padStart(4, "0")}`)));
    await settle();
    const calls = await streamCalls(prefix, () => b.readEvents(START, limit));
    expect(calls).toEqual([queues.length, queues.length - perCall]);
    const all = (await readToEnd(b, START, limit, true)).events;
    expect(all).toHaveLength(queues.length * (limit + 100));
    expect(new Set(all.map(key)).size).toBe(all.length);
    for (const q of queues) {
      const ids = all.filter((e) => e.queue === q).map((e) => e.jobId);
      expect(ids).toEqual([...ids].sort());
      expect(ids).toHaveLength(limit + 100);
    }
  });
});
