import { describe, expect, it } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { InvalidInputError } from "../../src/core/errors.js";
import type { QueueEvent } from "../../src/core/queue-events.js";
import { A, B, claim, claimOne, enqueueMany, enqueueOne, errorInfo, LEASE_MS, type SuiteContext } from "./fixtures.js";

type EventLog = Required<Pick<Backend, "readEvents" | "latestEventCursor" | "pruneEvents">>;

function log(b: Backend): EventLog {
  if (!b.readEvents || !b.latestEventCursor || !b.pruneEvents) throw new Error("the event log methods are missing");
  return b as Backend & EventLog;
}

/**
 * Every event after `cursor`, read in small pages (so paging is exercised too); read again until
 * there are at least `atLeast` and `until` holds. PostgreSQL shows an event once every transaction older than its
 * own has ended, in the whole cluster: a test file writing beside this one can hold the last few
 * back for a moment.
 */
async function readAll(
  b: Backend,
  cursor: string,
  atLeast = 0,
  until: (events: QueueEvent[]) => boolean = () => true,
): Promise<{ events: QueueEvent[]; cursor: string }> {
  const from = cursor;
  const deadline = Date.now() + 10_000;
  for (;;) {
    const events: QueueEvent[] = [];
    cursor = from;
    for (;;) {
      const page = await log(b).readEvents(cursor, 3);
      events.push(...page.events);
      if (page.events.length === 0) break;
      cursor = page.cursor;
    }
    if ((events.length >= atLeast && until(events)) || Date.now() > deadline) return { events, cursor };
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const brief = (events: QueueEvent[]) => events.map((e) => `${e.jobId}:${e.type}:${e.attempt}`);

/** The durable event log (capabilities.eventLog): one event per change, written with it. */
export function eventLogTests(t: SuiteContext): void {
  const declared = t.factory.capabilities.eventLog === true;
  describe("event log", () => {
    // A store without a log has no readers; one whose log is switched off (Redis, PostgreSQL:
    // eventLog false) keeps them and refuses each by name.
    it.skipIf(declared)("has no readEvents, or refuses it by name [no eventLog]", async () => {
      if (!("readEvents" in t.b)) return;
      await expect(log(t.b).readEvents("0-0", 1)).rejects.toMatchObject({ name: "UnsupportedByStoreError", capability: "eventLog" });
      await expect(log(t.b).latestEventCursor()).rejects.toMatchObject({ capability: "eventLog" });
      await expect(log(t.b).pruneEvents()).rejects.toMatchObject({ capability: "eventLog" });
    });

    it.runIf(declared)("records each change of a job in order, with its details", async () => {
      const start = await log(t.b).latestEventCursor();
      const id = await enqueueOne(t.b, { attempts: 2, data: { n: 1 } });
      const first = await claimOne(t.b, { worker: A });
      await t.b.progress(first.lease, { pct: 50 });
      await t.b.progress(first.lease, { pct: 50 }); // unchanged: no event
      await t.b.fail([{ lease: first.lease, error: errorInfo("flaky"), retryDelayMs: 1_000 }]);
      t.clock.advance(1_000);
      await t.b.promoteDue();
      const second = await claimOne(t.b, { worker: B });
      await t.b.complete([{ lease: second.lease, result: { ok: true } }]);
      // A retry that becomes due is "waiting" where the store relabels it (promoteDue), or
      // claimed straight from scheduled: both are fine, the rest is exact. So 6 or 7 events: read
      // until the last one is visible (6 alone let a read stop before the completion showed).
      const { events } = await readAll(t.b, start, 6, (read) => read.some((e) => e.type === "completed"));
      expect(brief(events).filter((e) => !e.endsWith(":waiting:1"))).toEqual([
        `${id}:added:0`,
        `${id}:active:1`,
        `${id}:progress:1`,
        `${id}:retrying:1`,
        `${id}:active:2`,
        `${id}:completed:2`,
      ]);
      const byType = new Map(events.map((e) => [e.type, e]));
      expect(byType.get("added")).toMatchObject({ queue: "q", name: "job", data: { state: "waiting", priority: 0 } });
      expect(byType.get("active")?.data).toMatchObject({ workerId: B.id });
      expect(byType.get("progress")?.data).toEqual({ progress: { pct: 50 } });
      expect(byType.get("retrying")?.data).toMatchObject({ error: { name: "Error", message: "flaky" } });
      expect(byType.get("completed")?.data).toEqual({ result: { ok: true } });
      expect(byType.get("completed")?.at).toBe(t.clock.now());
      // Ids are unique, and the log read again from the start is the same: the same events, each
      // id resuming right after its event. (Redis may give an event of the last second another id
      // on a second read: its ids carry the read's view of the queues' clocks.)
      expect(new Set(events.map((e) => e.id)).size).toBe(events.length);
      const again = (await readAll(t.b, start)).events;
      const withoutId = (list: QueueEvent[]) => list.map(({ id: _id, ...rest }) => rest);
      expect(withoutId(again)).toEqual(withoutId(events));
      for (const [i, e] of again.entries()) expect(withoutId((await readAll(t.b, e.id)).events)).toEqual(withoutId(events.slice(i + 1)));
    });

    it.runIf(declared)("records dead, cancelled, replayed, released and stalled", async () => {
      const start = await log(t.b).latestEventCursor();
      const dead = await enqueueOne(t.b, { attempts: 1 });
      const d = await claimOne(t.b);
      await t.b.fail([{ lease: d.lease, error: errorInfo("fatal"), retryDelayMs: null }]);
      expect(await t.b.replay(dead)).toBe("replayed");
      const cancelled = await enqueueOne(t.b, { name: "other" });
      expect(await t.b.cancel(cancelled)).toBe("cancelled");
      const r = await claimOne(t.b);
      expect(r.job.id).toBe(dead);
      await t.b.release([r.lease]);
      const s = await claimOne(t.b, { leaseMs: 1_000 });
      t.clock.advance(1_001);
      await t.b.rescueExpired(); // its one attempt is used up: dead
      const stalls = await enqueueOne(t.b, { attempts: 3 });
      await claimOne(t.b, { leaseMs: 1_000 });
      t.clock.advance(1_001);
      await t.b.rescueExpired(); // attempts left: waiting again
      const { events } = await readAll(t.b, start, 13);
      expect(brief(events)).toEqual([
        `${dead}:added:0`,
        `${dead}:active:1`,
        `${dead}:dead:1`,
        `${dead}:replayed:0`,
        `${cancelled}:added:0`,
        `${cancelled}:cancelled:0`,
        `${dead}:active:1`,
        `${dead}:released:0`,
        `${dead}:active:1`,
        `${dead}:dead:1`,
        `${stalls}:added:0`,
        `${stalls}:active:1`,
        `${stalls}:stalled:1`,
      ]);
      expect(s.job.id).toBe(dead);
      expect(events.find((e) => e.type === "dead")?.data).toMatchObject({ error: { message: "fatal" } });
      expect(events.find((e) => e.type === "cancelled")?.data).toEqual({ previousState: "waiting" });
    });

    it.runIf(declared)("records the completion and the death of a job deleted as it finishes (removeOnComplete / removeOnFail: true)", async () => {
      const start = await log(t.b).latestEventCursor();
      const done = await enqueueOne(t.b, { removeOnComplete: true });
      const c = await claimOne(t.b);
      expect(c.job.id).toBe(done);
      expect(await t.b.complete([{ lease: c.lease, result: { ok: 1 } }])).toEqual(["applied"]);
      const buried = await enqueueOne(t.b, { attempts: 1, removeOnFail: true });
      const d = await claimOne(t.b);
      expect(d.job.id).toBe(buried);
      expect(await t.b.fail([{ lease: d.lease, error: errorInfo("fatal"), retryDelayMs: null }])).toEqual(["applied"]);
      // Both are gone from the store, and the log says how they ended.
      expect(await t.b.get(done)).toBeNull();
      expect(await t.b.get(buried)).toBeNull();
      const { events } = await readAll(t.b, start, 6);
      expect(brief(events)).toEqual([
        `${done}:added:0`,
        `${done}:active:1`,
        `${done}:completed:1`,
        `${buried}:added:0`,
        `${buried}:active:1`,
        `${buried}:dead:1`,
      ]);
      expect(events[2]).toMatchObject({ queue: "q", name: "job", data: { result: { ok: 1 } }, at: t.clock.now() });
      expect(events[5]).toMatchObject({ queue: "q", name: "job", data: { error: { name: "Error", message: "fatal" } }, at: t.clock.now() });
      // A stale settle of a deleted job logs nothing more.
      expect(await t.b.complete([{ lease: c.lease, result: null }])).toEqual(["stale"]);
      expect((await readAll(t.b, events.at(-1)!.id)).events).toEqual([]);
      // Nor does a lease that expires on the last attempt, deleting the job as it dies, go unlogged.
      const lost = await enqueueOne(t.b, { attempts: 1, removeOnFail: true });
      const l = await claimOne(t.b, { leaseMs: 1_000 });
      expect(l.job.id).toBe(lost);
      t.clock.advance(1_001);
      await t.b.rescueExpired();
      expect(await t.b.get(lost)).toBeNull();
      const after = (await readAll(t.b, events.at(-1)!.id, 3)).events;
      expect(brief(after)).toEqual([`${lost}:added:0`, `${lost}:active:1`, `${lost}:dead:1`]);
      expect(after[2]).toMatchObject({ data: { error: { name: "LeaseExpiredError" } }, at: t.clock.now() });
    });

    it.runIf(declared)("records one event per job for batch calls, none for heartbeats", async () => {
      const start = await log(t.b).latestEventCursor();
      const ids = await enqueueMany(t.b, 3, (i) => ({ data: { i } }));
      const claimed = await claim(t.b, { limit: 3 });
      expect(claimed).toHaveLength(3);
      await t.b.heartbeat(
        claimed.map((c) => c.lease),
        LEASE_MS,
      );
      await t.b.progress(claimed[0]!.lease, { pct: 10 });
      await t.b.complete(claimed.map((c, i) => ({ lease: c.lease, result: { i } })));
      const { events } = await readAll(t.b, start, 10);
      // Bulk enqueue keeps the caller's order; within the other batch calls the order between jobs is open.
      expect(brief(events.slice(0, 3))).toEqual(ids.map((id) => `${id}:added:0`));
      expect(brief(events.slice(3, 6)).sort()).toEqual(ids.map((id) => `${id}:active:1`).sort());
      expect(brief(events.slice(6, 7))).toEqual([`${claimed[0]!.job.id}:progress:1`]);
      expect(brief(events.slice(7)).sort()).toEqual(ids.map((id) => `${id}:completed:1`).sort());
      for (const c of claimed) {
        expect(events.find((e) => e.jobId === c.job.id && e.type === "completed")?.data).toEqual({ result: { i: claimed.indexOf(c) } });
        expect(events.find((e) => e.jobId === c.job.id && e.type === "active")?.data).toMatchObject({ workerId: A.id });
      }
    });

    it.runIf(declared)("resumes after any event id; the latest cursor skips the past; bad cursors are refused", async () => {
      const before = await log(t.b).latestEventCursor();
      await enqueueOne(t.b);
      await readAll(t.b, before, 1); // readable now: every later cursor is past it
      const now = await log(t.b).latestEventCursor();
      expect((await log(t.b).readEvents(now, 100)).events).toEqual([]);
      const ids = [await enqueueOne(t.b), await enqueueOne(t.b), await enqueueOne(t.b)];
      const { events } = await readAll(t.b, now, 3);
      expect(events.map((e) => e.jobId)).toEqual(ids);
      const resumed = await log(t.b).readEvents(events[0]!.id, 100);
      expect(resumed.events.map((e) => e.jobId)).toEqual(ids.slice(1));
      expect(resumed.cursor).toBe(resumed.events.at(-1)!.id);
      expect((await log(t.b).readEvents(resumed.cursor, 100)).events).toEqual([]);
      // Numbers past a 64-bit integer, in every store's shape: PostgreSQL answered its own "out of range" (a 500 over HTTP).
      const overflowing = ["0-9223372036854775808", "9999999999999999999-9999999999999999999", "9223372036854775808", "99999999999999999999"];
      for (const bad of ["", "x", "1; DROP TABLE", "-1", "9".repeat(40), ...overflowing]) {
        await expect(log(t.b).readEvents(bad, 10)).rejects.toBeInstanceOf(InvalidInputError);
      }
    });

    it.runIf(declared)("prunes by count and by age, oldest first", async () => {
      const start = await log(t.b).latestEventCursor();
      for (let i = 0; i < 5; i++) await enqueueOne(t.b);
      expect(await log(t.b).pruneEvents({ maxEvents: 3 })).toBeGreaterThanOrEqual(2);
      const kept = (await readAll(t.b, start, 3)).events;
      expect(kept).toHaveLength(3);
      t.clock.advance(60_000);
      const young = await enqueueOne(t.b);
      expect(await log(t.b).pruneEvents({ maxAgeMs: 30_000 })).toBe(3);
      expect((await readAll(t.b, start, 1)).events.map((e) => e.jobId)).toEqual([young]);
      await expect(log(t.b).pruneEvents({ maxAgeMs: 0 })).rejects.toBeInstanceOf(InvalidInputError);
    });
  });
}
