/**
 * Redis layout 6: job ids in their stored form where a key holds one entry per waiting job (a fast
 * lane's entries, a bucket's fields, an event entry's `j`): 16 bytes for an id made by newJobId,
 * any other id as it is (id_store in lua/_common.lua, storedJobId and jobIdFromStored in codec.ts).
 * What a caller sees is unchanged: every read gives the id back. Data of layout 5 (every id as it
 * is) keeps working after the upgrade, beside new jobs in the stored form.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import type { RedisBackend } from "../../src/backend/redis/backend.js";
import { jobIdFromStored, storedJobId } from "../../src/backend/redis/codec.js";
import { LAYOUT_VERSION } from "../../src/backend/redis/keys.js";
import { helpersFor, parseLuaHelpers } from "../../src/backend/redis/lua-helpers.js";
import { JOB_ID_DIGITS, newJobId } from "../../src/core/ids.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { FakeClock } from "../../src/index.js";
import { redisTestStores } from "../helpers/redis-stores.js";

const stores = redisTestStores();
const { admin } = stores;

// The Redis event log's cursor before every entry: no position in any queue.
const START = Buffer.from("{}").toString("base64url");
const WORKER = { id: "w1", host: "h", pid: 1 };
const spec = (jobId?: string) => buildJobSpec({ queue: "q", name: "job", data: { n: jobId ?? "generated" }, options: jobId === undefined ? {} : { jobId } });
const claimAll = async (b: RedisBackend) =>
  (await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 100, leaseMs: 60_000 })).map((c) => c.job.id);

/**
 * An id of newJobId's shape made at `ms`: newJobId(ms) itself never goes back in time within a
 * process (it would keep the latest time it was given), which would shift every later id.
 */
function idMadeAt(ms: number): string {
  let time = "";
  for (let t = ms, i = 0; i < 10; i++, t = Math.floor(t / 32)) time = JOB_ID_DIGITS[t % 32]! + time;
  return time + newJobId().slice(10);
}

/** Every field of every bucket of queue q. */
async function bucketFields(prefix: string): Promise<string[]> {
  const buckets = Number((await admin.hget(`${prefix}:{q}:meta`, "wb")) ?? 1);
  const fields: string[] = [];
  for (let b = 0; b < buckets; b++) fields.push(...(await admin.hkeys(`${prefix}:{q}:w:${b}`)));
  return fields;
}

/** The `j` value of every event entry of queue q, oldest first. */
async function eventEntryIds(prefix: string): Promise<string[]> {
  const entries = (await admin.xrange(`${prefix}:{q}:ev`, "-", "+")) as [string, string[]][];
  return entries.map(([, fields]) => fields[fields.indexOf("j") + 1]!);
}

describe("stored job ids (layout 6)", () => {
  it("the stored form takes 16 ASCII bytes, starts with a control character, and gives the id back", () => {
    // The extremes are spelled out: newJobId(t) never goes back in time within a process, so an id
    // made for a far future time would shift every later test's ids.
    const ids = [...Array.from({ length: 2_000 }, () => newJobId()), "0".repeat(22), "z".repeat(22)];
    for (const id of ids) {
      const stored = storedJobId(id);
      expect(stored).toHaveLength(16);
      expect(stored.charCodeAt(0)).toBeLessThan(32);
      expect([...stored].every((c) => c.charCodeAt(0) < 128)).toBe(true);
      expect(jobIdFromStored(stored)).toBe(id);
    }
    // Distinct ids, distinct forms (the packing keeps all 110 bits).
    expect(new Set(ids.map(storedJobId)).size).toBe(new Set(ids).size);
    // Ids a caller chose stay as they are, including near misses of newJobId's shape.
    for (const id of ["order-1", "0".repeat(21), "0".repeat(23), "I".repeat(22), "0000000000000000000001u", "Ω".repeat(22)]) {
      expect(storedJobId(id)).toBe(id);
      expect(jobIdFromStored(id)).toBe(id);
    }
  });

  it("the scripts make and read the same form as the backend (id_store, id_text, id_time in lua/_common.lua)", async () => {
    const common = readFileSync(new URL("../../src/backend/redis/lua/_common.lua", import.meta.url), "utf8");
    const body = `local out = {}
      for i, id in ipairs(ARGV) do
        local s = id_store(id)
        local t = id_time(s)
        out[i] = { s, id_text(s), t and int(t) or 'nil' }
      end
      return out`;
    const ids = [
      ...Array.from({ length: 3_000 }, () => newJobId()),
      "0".repeat(22),
      "z".repeat(22),
      idMadeAt(0),
      idMadeAt(2 ** 50 - 1),
      "order-1",
      "0".repeat(21),
    ];
    const replies = (await admin.eval(helpersFor(parseLuaHelpers(common), body) + "\n" + body, 0, ...ids)) as string[][];
    const timeOf = (id: string) => [...id.slice(0, 10)].reduce((t, c) => t * 32 + JOB_ID_DIGITS.indexOf(c), 0);
    replies.forEach((reply, i) => {
      const id = ids[i]!;
      const canonical = storedJobId(id) !== id;
      expect(reply).toEqual([storedJobId(id), id, canonical ? String(timeOf(id)) : "nil"]);
    });
    // id_text reads two digits at a time from the table ID_PAIRS: every one of its 1,024 entries.
    const table = /^local ID_PAIRS = '([^']*)'$/m.exec(common)?.[1];
    expect(table).toBe(Array.from({ length: 1_024 }, (_, p) => JOB_ID_DIGITS[p >> 5]! + JOB_ID_DIGITS[p & 31]!).join(""));
  });

  it("lanes, buckets and event entries hold the form the TypeScript reader expects; every read gives the ids back", async () => {
    const prefix = stores.prefix("sid");
    const b = stores.backend({ prefix, clock: new FakeClock() });
    const generated = [spec(), spec(), spec()];
    // A caller's id of newJobId's shape is stored short too; any other as it is.
    const lookalike = "0123456789abcdefghjkmn";
    const specs = [...generated, spec(lookalike), spec("order-1")];
    const ids = specs.map((s) => s.id);
    expect((await b.enqueue(specs)).map((r) => r.duplicate)).toEqual(Array(5).fill(false));

    const stored = ids.map(storedJobId);
    expect(stored.slice(0, 4).every((s) => s.length === 16)).toBe(true);
    expect(stored[4]).toBe("order-1");
    expect(await admin.lrange(`${prefix}:{q}:f:job`, 0, -1)).toEqual(stored);
    expect((await bucketFields(prefix)).sort()).toEqual([...stored].sort());
    expect(await eventEntryIds(prefix)).toEqual(stored);

    const events = await b.readEvents(START, 100);
    expect(events.events.map((e) => e.jobId)).toEqual(ids);
    expect((await b.list({ queue: "q", state: "waiting" })).map((j) => j.id).sort()).toEqual([...ids].sort());
    for (const id of ids) expect((await b.get(id, "q"))?.state).toBe("waiting");
    expect(await b.enqueue([spec(ids[0])])).toMatchObject([{ duplicate: true }]);
    expect((await b.stats("q"))[0]?.counts.waiting).toBe(5);

    expect(await b.cancel(ids[1]!, "q")).toBe("cancelled");
    expect(await admin.lrange(`${prefix}:{q}:f:job`, 0, -1)).toEqual(stored.filter((_, i) => i !== 1));
    expect(await claimAll(b)).toEqual(ids.filter((_, i) => i !== 1));
    expect(await admin.exists(`${prefix}:{q}:f:job`)).toBe(0);
    expect(await bucketFields(prefix)).toEqual([]);
    // Claimed jobs have their hashes under their ids; event readers see the ids.
    for (const id of ids.filter((_, i) => i !== 1)) expect(await admin.hget(`${prefix}:{q}:j:${id}`, "st")).toBe("a");
    const after = await b.readEvents(events.cursor, 100);
    expect(after.events.map((e) => `${e.type} ${e.jobId}`)).toEqual([`cancelled ${ids[1]}`, ...ids.filter((_, i) => i !== 1).map((id) => `active ${id}`)]);
  });
});

describe("stored job ids are not job ids", () => {
  it("a lookup by a job's stored form finds nothing and changes nothing (no job id has a control character)", async () => {
    const prefix = stores.prefix("sidx");
    const b = stores.backend({ prefix, clock: new FakeClock() });
    const job = spec();
    await b.enqueue([job]);
    const stored = storedJobId(job.id);
    expect(stored).not.toBe(job.id);
    expect(await b.get(stored, "q")).toBeNull();
    expect(await b.get(stored)).toBeNull();
    expect(await b.cancel(stored, "q")).toBe("not-found");
    expect(await b.remove(stored, "q")).toBe("not-found");
    expect(await b.replay(stored, "q")).toBe("not-found");
    expect(await b.flow(stored, "q")).toBeNull();
    // The job itself is untouched: still waiting under its id, in its lane and bucket.
    expect(await b.get(job.id, "q")).toMatchObject({ id: job.id, state: "waiting" });
    expect(await admin.lrange(`${prefix}:{q}:f:job`, 0, -1)).toEqual([stored]);
    expect(await bucketFields(prefix)).toEqual([stored]);
    expect(await admin.exists(`${prefix}:{q}:j:${stored}`)).toBe(0);
    expect(await claimAll(b)).toEqual([job.id]);
  });
});

describe("compact records: created_at from the id's time (layout 6)", () => {
  it("a record keeps its created_at as the distance from its id's time, and every read gives the time back", async () => {
    const prefix = stores.prefix("sidc");
    const clock = new FakeClock();
    const b = stores.backend({ prefix, clock });
    const now = clock.now();
    // Ids made 5 s before the add, 7 s after it (a producer's clock ahead), 30 days before (too far:
    // in full), and one a caller chose (in full).
    const specs = [spec(idMadeAt(now - 5_000)), spec(idMadeAt(now + 7_000)), spec(idMadeAt(now - 30 * 86_400_000)), spec("order-1")];
    await b.enqueue(specs);
    const records = await admin.hgetall(`${prefix}:{q}:w:0`);
    const createdText = (id: string) => records[storedJobId(id)]!.split(" ")[1];
    expect(specs.map((j) => createdText(j.id))).toEqual(["+" + (5_000).toString(36), "-" + (7_000).toString(36), now.toString(36), now.toString(36)]);

    for (const job of specs) expect(await b.get(job.id, "q")).toMatchObject({ createdAt: now, runAt: now, state: "waiting" });
    expect((await b.list({ queue: "q", state: "waiting" })).map((j) => [j.createdAt, j.runAt])).toEqual(Array(4).fill([now, now]));
    clock.advance(1_000);
    expect((await b.stats("q"))[0]?.oldestWaitingAgeMs).toBe(1_000);
    const claimed = await b.claim({ queues: ["q"], names: ["job"], worker: WORKER, limit: 100, leaseMs: 60_000 });
    expect(claimed.map((c) => [c.job.id, c.job.createdAt, c.job.runAt])).toEqual(specs.map((j) => [j.id, now, now]));
    for (const job of specs) expect((await b.get(job.id, "q"))?.createdAt).toBe(now);
  });
});

describe("stored job ids: data of layout 5", () => {
  /** An id made 60 days before the clock's time: too far for a delta, so its record keeps created_at in full, as layout 5 did. */
  const layout5Id = (clock: FakeClock) => idMadeAt(clock.now() - 60 * 86_400_000);

  /** Rewrites queue q's lane, bucket and event entries to what layout 5 wrote: every id as it is. */
  async function asLayout5(prefix: string): Promise<void> {
    const base = `${prefix}:{q}:`;
    expect(await admin.hget(`${base}meta`, "wb")).toBe("1"); // one bucket: a field's bucket does not depend on its hash
    const lane = await admin.lrange(`${base}f:job`, 0, -1);
    await admin.del(`${base}f:job`);
    await admin.rpush(`${base}f:job`, ...lane.map(jobIdFromStored));
    const bucket = await admin.hgetall(`${base}w:0`);
    // Layout 5 wrote created_at in full (layout5Id: so do these records).
    for (const record of Object.values(bucket)) expect(record.split(" ")[1]).toMatch(/^[0-9a-z]{8}$/);
    await admin.del(`${base}w:0`);
    await admin.hset(`${base}w:0`, Object.fromEntries(Object.entries(bucket).map(([field, record]) => [jobIdFromStored(field), record])));
    const entries = (await admin.xrange(`${base}ev`, "-", "+")) as [string, string[]][];
    await admin.del(`${base}ev`);
    for (const [id, fields] of entries) {
      await admin.xadd(`${base}ev`, id, ...fields.map((v, i) => (fields[i - 1] === "j" ? jobIdFromStored(v) : v)));
    }
    await admin.hset(`${base}meta`, "lv", "5");
    await admin.hdel(`${base}meta`, "wl");
    await admin.set(`${prefix}:layout`, "5");
  }

  it("after the upgrade, jobs stored as layout 5 did are found, listed, cancelled and claimed in order beside new ones", async () => {
    const prefix = stores.prefix("sid5");
    const clock = new FakeClock();
    const before = stores.backend({ prefix, clock });
    const old = [spec(layout5Id(clock)), spec(layout5Id(clock)), spec(layout5Id(clock)), spec("order-1")];
    await before.enqueue(old);
    await before.close();
    await asLayout5(prefix);
    expect(await admin.lrange(`${prefix}:{q}:f:job`, 0, 0)).toEqual([old[0]!.id]);

    const b = stores.backend({ prefix, clock });
    await b.migrate();
    expect(await admin.get(`${prefix}:layout`)).toBe(String(LAYOUT_VERSION));
    // The stamp marks the queue's table as holding fields of the older form.
    expect(await admin.hget(`${prefix}:{q}:meta`, "wl")).toBe("1");
    for (const job of old) expect(JSON.stringify((await b.get(job.id, "q"))?.data)).toBe(job.payload);
    expect(await b.enqueue([spec(old[0]!.id)])).toMatchObject([{ duplicate: true }]);
    expect((await b.readEvents(START, 100)).events.map((e) => e.jobId)).toEqual(old.map((j) => j.id));

    const fresh = [spec(), spec()];
    await b.enqueue(fresh);
    expect(await admin.lrange(`${prefix}:{q}:f:job`, 0, -1)).toEqual([...old.map((j) => j.id), ...fresh.map((j) => storedJobId(j.id))]);
    expect((await b.list({ queue: "q", state: "waiting" })).map((j) => j.id).sort()).toEqual([...old, ...fresh].map((j) => j.id).sort());

    expect(await b.cancel(old[1]!.id, "q")).toBe("cancelled");
    expect(await b.get(old[1]!.id, "q")).toMatchObject({ state: "cancelled", data: JSON.parse(old[1]!.payload) as unknown });
    // Out of its lane too (a claim would skip a stale entry, so the lane itself is checked).
    expect(await admin.lrange(`${prefix}:{q}:f:job`, 0, -1)).toEqual([old[0]!.id, old[2]!.id, old[3]!.id, ...fresh.map((j) => storedJobId(j.id))]);
    const expected = [old[0]!, old[2]!, old[3]!, ...fresh].map((j) => j.id);
    expect(await claimAll(b)).toEqual(expected);
    for (const id of expected) expect((await b.get(id, "q"))?.state).toBe("active");
    // The table emptied: no older fields are left, and lookups stop trying the older form.
    expect(await bucketFields(prefix)).toEqual([]);
    expect(await admin.hget(`${prefix}:{q}:meta`, "wl")).toBeNull();
    expect(await admin.exists(`${prefix}:{q}:f:job`)).toBe(0);
  });

  it("a queue whose compact table is empty at the upgrade is not marked: its lookups try one form only", async () => {
    const prefix = stores.prefix("sid5e");
    const clock = new FakeClock();
    const before = stores.backend({ prefix, clock });
    await before.enqueue([spec(layout5Id(clock))]);
    expect(await claimAll(before)).toHaveLength(1);
    await before.close();
    expect(await admin.hget(`${prefix}:{q}:meta`, "wn")).toBe("0");
    await admin.hset(`${prefix}:{q}:meta`, "lv", "5");
    await admin.set(`${prefix}:layout`, "5");
    const b = stores.backend({ prefix, clock });
    await b.migrate();
    expect(await admin.hget(`${prefix}:{q}:meta`, "lv")).toBe(String(LAYOUT_VERSION));
    expect(await admin.hget(`${prefix}:{q}:meta`, "wl")).toBeNull();
  });

  it("a queue read before its first layout 6 write (lv still 5) finds its older fields", async () => {
    const prefix = stores.prefix("sid5r");
    const clock = new FakeClock();
    const before = stores.backend({ prefix, clock });
    const old = [spec(layout5Id(clock)), spec(layout5Id(clock))];
    await before.enqueue(old);
    await before.close();
    await asLayout5(prefix);
    // Another process upgraded the prefix but has not stamped this queue yet.
    await admin.set(`${prefix}:layout`, String(LAYOUT_VERSION));

    const b = stores.backend({ prefix, clock });
    for (const job of old) expect((await b.get(job.id, "q"))?.state).toBe("waiting");
    expect((await b.stats("q"))[0]?.counts.waiting).toBe(2);
    expect(await claimAll(b)).toEqual(old.map((j) => j.id));
  });
});
