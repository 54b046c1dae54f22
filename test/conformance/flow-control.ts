/**
 * Flow control (src/core/flow.ts): queue limits stored in the store and obeyed by every claim,
 * whoever makes it. Time moves with the suite's FakeClock; the race tests use several
 * connections to one store and check the limits from the store's own records (start times and
 * the active jobs it lists), never from what the claimers remember.
 */
import { describe, expect, it } from "vitest";
import { UnsupportedByStoreError } from "../../src/core/errors.js";
import type { Backend, ClaimThrottle } from "../../src/backend/contract.js";
import { normalizeQueueLimits, type QueueLimits } from "../../src/core/flow.js";
import { LEASE_MS, NAME, QUEUE, claim, enqueueMany, spec, worker, type SuiteContext } from "./fixtures.js";

async function setLimits(b: Backend, limits: QueueLimits, queue = QUEUE): Promise<void> {
  await b.setQueueLimits(queue, normalizeQueueLimits(limits));
}

/** A claim of up to `limit` that also returns what its throttle listener heard. */
async function claimWatched(b: Backend, limit: number, names: readonly string[] = [NAME], leaseMs = LEASE_MS) {
  const throttles: ClaimThrottle[] = [];
  const jobs = await b.claim({ queues: [QUEUE], names, worker: worker("A"), limit, leaseMs, onThrottle: (t) => throttles.push(t) });
  return { jobs, throttles };
}

/** Start times of every job of the queue that was ever claimed, from the store, ascending. */
async function startTimes(b: Backend): Promise<number[]> {
  const jobs = await b.list({ queue: QUEUE }, { limit: 1_000 });
  return jobs.flatMap((j) => (j.startedAt === null ? [] : [j.startedAt])).sort((x, y) => x - y);
}

/** The largest number of starts in any window (t - durationMs, t]. */
function busiestWindow(starts: readonly number[], durationMs: number): number {
  let most = 0;
  for (let i = 0; i < starts.length; i++) {
    let n = 0;
    for (let j = i; j >= 0 && starts[j]! > starts[i]! - durationMs; j--) n++;
    most = Math.max(most, n);
  }
  return most;
}

export function flowControlTests(t: SuiteContext): void {
  it.skipIf(t.factory.capabilities.queueLimits)(
    "a store without queue limits refuses setQueueLimits, getQueueFlow and holdQueue with UnsupportedByStoreError",
    async () => {
      await expect(t.b.setQueueLimits(QUEUE, normalizeQueueLimits({ rate: { max: 1, durationMs: 1000 } }))).rejects.toThrow(UnsupportedByStoreError);
      await expect(t.b.getQueueFlow(QUEUE)).rejects.toThrow(UnsupportedByStoreError);
      await expect(t.b.holdQueue(QUEUE, 1000)).rejects.toThrow(UnsupportedByStoreError);
    },
  );

  describe.skipIf(!t.factory.capabilities.queueLimits)(t.factory.capabilities.queueLimits ? "flow control" : "flow control [needs queueLimits]", () => {
    it("stores a queue's limits and reads them back; limits that limit nothing remove them", async () => {
      expect(await t.b.getQueueFlow(QUEUE)).toBeNull();
      await setLimits(t.b, { rate: { max: 10, durationMs: 1_000 }, maxRunning: 3, maxRunningPerName: { export: 1 } });
      expect(await t.b.getQueueFlow(QUEUE)).toEqual({
        limits: { rate: { max: 10, durationMs: 1_000 }, maxRunning: 3, maxRunningPerName: { export: 1 } },
        heldUntil: null,
      });
      expect(await t.b.getQueueFlow("other")).toBeNull();
      await setLimits(t.b, { maxRunning: 5 });
      expect(await t.b.getQueueFlow(QUEUE)).toEqual({ limits: { rate: null, maxRunning: 5, maxRunningPerName: {} }, heldUntil: null });
      await setLimits(t.b, {});
      expect(await t.b.getQueueFlow(QUEUE)).toBeNull();
    });

    it("rate: at most max starts per window across claims; the claim says when the next slot opens", async () => {
      await enqueueMany(t.b, 10);
      await setLimits(t.b, { rate: { max: 3, durationMs: 1_000 } });
      const first = await claimWatched(t.b, 10);
      expect(first.jobs).toHaveLength(3);
      // It took the window's last slot: it says so at once (see the next test).
      expect(first.throttles).toEqual([{ queue: QUEUE, retryInMs: 1_000 }]);
      t.clock.advance(400);
      const limited = await claimWatched(t.b, 10);
      expect(limited.jobs).toEqual([]);
      expect(limited.throttles).toEqual([{ queue: QUEUE, retryInMs: 600 }]);
      t.clock.advance(599);
      expect((await claimWatched(t.b, 10)).jobs).toEqual([]);
      t.clock.advance(1);
      expect((await claimWatched(t.b, 10)).jobs).toHaveLength(3);
      expect(busiestWindow(await startTimes(t.b), 1_000)).toBe(3);
    });

    it("rate: a claim that takes the last open slot says when the next opens; a claim that leaves slots open says nothing", async () => {
      await enqueueMany(t.b, 40);
      await setLimits(t.b, { rate: { max: 3, durationMs: 1_000 } });
      const t0 = t.clock.now();
      const partial = await claimWatched(t.b, 2);
      expect(partial.jobs).toHaveLength(2);
      expect(partial.throttles).toEqual([]);
      t.clock.advance(100);
      // One slot left: this claim takes it and is told the next opens when the first start leaves.
      const last = await claimWatched(t.b, 10);
      expect(last.jobs).toHaveLength(1);
      expect(last.throttles).toEqual([{ queue: QUEUE, retryInMs: 900 }]);
      // A claimer that only comes back when told never meets a full queue: each claim takes the
      // slots that opened (2 at t0 + k s, 1 at t0 + k s + 100 ms) and is told the next.
      let retryInMs = last.throttles[0]!.retryInMs!;
      for (let claim = 1; claim <= 14; claim++) {
        t.clock.advance(retryInMs);
        const claimed = await claimWatched(t.b, 10);
        expect(claimed.jobs, `claim ${claim}`).toHaveLength(claim % 2 === 1 ? 2 : 1);
        expect(claimed.throttles, `claim ${claim}`).toEqual([{ queue: QUEUE, retryInMs: claim % 2 === 1 ? 100 : 900 }]);
        retryInMs = claimed.throttles[0]!.retryInMs!;
      }
      const starts = await startTimes(t.b);
      expect(starts).toEqual(Array.from({ length: 24 }, (_, i) => t0 + Math.floor(i / 3) * 1_000 + (i % 3 === 2 ? 100 : 0)));
      expect(busiestWindow(starts, 1_000)).toBe(3);
    });

    it("rate: over many windows, a claimer that comes back exactly when told starts max per window, no fewer", async () => {
      // Three starts staggered in the first window; then claim only at the reported slot times.
      // Each slot must be reported open exactly one window after the start that held it and
      // be claimable then, so the starts repeat with period durationMs: a slot reported even
      // 1 ms late (rounding, a stale clock, a poll interval added) shifts every later start and
      // the queue under-delivers by that much per window.
      await enqueueMany(t.b, 40);
      await setLimits(t.b, { rate: { max: 3, durationMs: 1_000 } });
      const t0 = t.clock.now();
      for (const offset of [0, 250, 500]) {
        t.clock.set(t0 + offset);
        expect((await claimWatched(t.b, 1)).jobs).toHaveLength(1);
      }
      for (let slot = 3; slot < 3 * 8; slot++) {
        const full = await claimWatched(t.b, 10);
        expect(full.jobs).toEqual([]);
        const expectedAt = t0 + Math.floor(slot / 3) * 1_000 + [0, 250, 500][slot % 3]!;
        expect(full.throttles).toEqual([{ queue: QUEUE, retryInMs: expectedAt - t.clock.now() }]);
        t.clock.advance(full.throttles[0]!.retryInMs!);
        expect((await claimWatched(t.b, 10)).jobs).toHaveLength(1);
      }
      const starts = await startTimes(t.b);
      expect(starts).toEqual(Array.from({ length: 24 }, (_, i) => t0 + Math.floor(i / 3) * 1_000 + [0, 250, 500][i % 3]!));
      expect(busiestWindow(starts, 1_000)).toBe(3);
    });

    it("rate: other queues are not limited", async () => {
      await enqueueMany(t.b, 4, () => ({ queue: "free" }));
      await setLimits(t.b, { rate: { max: 1, durationMs: 60_000 } });
      expect(await claim(t.b, { queues: ["free"], limit: 10 })).toHaveLength(4);
    });

    it("maxRunning: counts active jobs fleet-wide; a finished job frees its slot", async () => {
      await enqueueMany(t.b, 5);
      await setLimits(t.b, { maxRunning: 2 });
      const first = await claimWatched(t.b, 10);
      expect(first.jobs).toHaveLength(2);
      const second = await claim(t.b, { worker: worker("B"), limit: 10 });
      expect(second).toEqual([]);
      const full = await claimWatched(t.b, 10);
      expect(full.throttles).toEqual([{ queue: QUEUE, retryInMs: null }]);
      expect(await t.b.complete([{ lease: first.jobs[0]!.lease, result: null }])).toEqual(["applied"]);
      expect(await claim(t.b, { worker: worker("B"), limit: 10 })).toHaveLength(1);
      expect(await t.b.list({ queue: QUEUE, state: "active" })).toHaveLength(2);
    });

    it("maxRunningPerName: caps one name, leaves the others to the queue's limits", async () => {
      await enqueueMany(t.b, 3, () => ({ name: "export" }));
      await enqueueMany(t.b, 2, () => ({ name: "email" }));
      await setLimits(t.b, { maxRunningPerName: { export: 1 } });
      const got = await claimWatched(t.b, 10, ["export", "email"]);
      expect(got.jobs.map((c) => c.job.name).sort()).toEqual(["email", "email", "export"]);
      const only = await claimWatched(t.b, 10, ["export"]);
      expect(only.jobs).toEqual([]);
      expect(only.throttles).toEqual([{ queue: QUEUE, retryInMs: null }]);
      const exporting = got.jobs.find((c) => c.job.name === "export")!;
      await t.b.fail([{ lease: exporting.lease, error: { name: "Error", message: "x", stack: null }, retryDelayMs: null }]);
      expect((await claimWatched(t.b, 10, ["export"])).jobs).toHaveLength(1);
    });

    it("holdQueue: nothing starts until the hold ends; a shorter hold does not cut a longer one", async () => {
      await enqueueMany(t.b, 2);
      await t.b.holdQueue(QUEUE, 500);
      await t.b.holdQueue(QUEUE, 100);
      const held = await claimWatched(t.b, 10);
      expect(held.jobs).toEqual([]);
      expect(held.throttles).toEqual([{ queue: QUEUE, retryInMs: 500 }]);
      expect((await t.b.getQueueFlow(QUEUE))?.heldUntil).toBe(t.clock.now() + 500);
      t.clock.advance(500);
      expect((await claimWatched(t.b, 10)).jobs).toHaveLength(2);
    });

    it("an expired lease keeps its slot until the rescue, which gives it back", async () => {
      await enqueueMany(t.b, 2);
      await setLimits(t.b, { maxRunning: 1 });
      expect((await claimWatched(t.b, 10, [NAME], 1_000)).jobs).toHaveLength(1);
      t.clock.advance(2_000);
      expect((await claimWatched(t.b, 10)).jobs).toEqual([]);
      const rescued = await t.b.rescueExpired();
      expect(rescued).toHaveLength(1);
      expect((await claimWatched(t.b, 10)).jobs).toHaveLength(1);
    });

    it.skipIf(!t.factory.openSecond)(
      "race: 8 claimers on their own connections never start more than the rate allows (store start times) [needs factory.openSecond]",
      async () => {
        const fleet = [t.b, ...(await Promise.all(Array.from({ length: 7 }, () => t.second())))];
        await enqueueMany(t.b, 200);
        await setLimits(t.b, { rate: { max: 5, durationMs: 1_000 } });
        for (let round = 0; round < 12; round++) {
          await Promise.all(fleet.map((b, i) => claim(b, { worker: worker(`w${i}`), limit: 3 })));
          t.clock.advance(250);
        }
        const starts = await startTimes(t.b);
        expect(busiestWindow(starts, 1_000)).toBe(5);
        // 12 rounds over 2.75 s: the windows opening at 0, 1 s and 2 s each let exactly 5 start.
        expect(starts).toHaveLength(15);
      },
    );

    it.skipIf(!t.factory.openSecond)(
      "race: 8 claimers on their own connections never run more than maxRunning at once (store's active jobs) [needs factory.openSecond]",
      async () => {
        const fleet = [t.b, ...(await Promise.all(Array.from({ length: 7 }, () => t.second())))];
        await enqueueMany(t.b, 100);
        await setLimits(t.b, { maxRunning: 3 });
        let started = 0;
        for (let round = 0; round < 10; round++) {
          const claims = await Promise.all(fleet.map((b, i) => claim(b, { worker: worker(`w${i}`), limit: 2 })));
          started += claims.flat().length;
          const active = await t.b.list({ queue: QUEUE, state: "active" });
          expect(active.length).toBeLessThanOrEqual(3);
          // Settle two of the running jobs, so later rounds have slots to race for.
          await t.b.complete(active.slice(0, 2).map((j) => ({ lease: { jobId: j.id, token: j.lease!.token }, result: null })));
          t.clock.advance(10);
        }
        expect(started).toBeGreaterThanOrEqual(3 + 2 * 9);
      },
    );

    const keyed = t.factory.capabilities.jobFlowKeys;

    it.skipIf(keyed)("a job with a group or limiter is refused by a backend without jobFlowKeys [jobFlowKeys false]", async () => {
      await expect(t.b.enqueue([spec({ group: { key: "tenant-a", concurrency: 1 } })])).rejects.toThrow(/group|limiter/);
      await expect(t.b.enqueue([spec({ limiter: { key: "acct", max: 1, durationMs: 1_000 } })])).rejects.toThrow(/group|limiter/);
      expect(await t.b.stats(QUEUE)).toMatchObject([{ counts: { waiting: 0 } }]);
    });

    it.skipIf(!keyed)("groups: at most `concurrency` of a group run at once; other groups are not held back [needs jobFlowKeys]", async () => {
      await enqueueMany(t.b, 4, (i) => ({ jobId: `a${i}`, group: { key: "tenant-a", concurrency: 2 } }));
      await enqueueMany(t.b, 2, (i) => ({ jobId: `b${i}`, group: { key: "tenant-b", concurrency: 1 } }));
      const first = await claimWatched(t.b, 10);
      expect(first.jobs.map((c) => c.job.id).sort()).toEqual(["a0", "a1", "b0"]);
      const full = await claimWatched(t.b, 10);
      expect(full.jobs).toEqual([]);
      expect(full.throttles).toEqual([{ queue: QUEUE, retryInMs: null }]);
      await t.b.complete([{ lease: first.jobs.find((c) => c.job.id === "a0")!.lease, result: null }]);
      expect((await claimWatched(t.b, 10)).jobs.map((c) => c.job.id)).toEqual(["a2"]);
    });

    it.skipIf(!keyed)("pause: a paused queue whose jobs have groups and limiter keys starts nothing until resumed [needs jobFlowKeys]", async () => {
      await enqueueMany(t.b, 2, (i) => ({ jobId: `g${i}`, group: { key: "tenant-a", concurrency: 5 } }));
      await enqueueMany(t.b, 1, () => ({ jobId: "k0", limiter: { key: "account-1", max: 10, durationMs: 60_000 } }));
      expect((await claimWatched(t.b, 1)).jobs.map((c) => c.job.id)).toEqual(["g0"]);
      await t.b.pause(QUEUE);
      expect((await claimWatched(t.b, 10)).jobs).toEqual([]);
      expect((await claimWatched(t.b, 10)).jobs).toEqual([]);
      await t.b.resume(QUEUE);
      expect((await claimWatched(t.b, 10)).jobs.map((c) => c.job.id).sort()).toEqual(["g1", "k0"]);
    });

    it.skipIf(!keyed)("groups: claims take turns across groups, so a small group is not stuck behind a big one [needs jobFlowKeys]", async () => {
      await enqueueMany(t.b, 30, (i) => ({ jobId: `big${String(i).padStart(2, "0")}`, group: { key: "big", concurrency: 100 } }));
      await enqueueMany(t.b, 3, (i) => ({ jobId: `small${i}`, group: { key: "small", concurrency: 100 } }));
      const order: string[] = [];
      for (let i = 0; i < 6; i++) order.push(...(await claimWatched(t.b, 1)).jobs.map((c) => c.job.id));
      // One claim of one job at a time: the groups alternate until the small one is empty.
      expect(order).toEqual(["big00", "small0", "big01", "small1", "big02", "small2"]);
      const batch = await claimWatched(t.b, 4);
      expect(batch.jobs.map((c) => c.job.id)).toEqual(["big03", "big04", "big05", "big06"]);
    });

    it.skipIf(!keyed)(
      "groups: a lane's jobs of several names leave it in claim order, each once; jobs of a name not asked for stay [needs jobFlowKeys]",
      async () => {
        // Lane "g": two names interleaved, three priorities; lane "h": one name. The claims take
        // turns, so each takes a few jobs of each lane: what one claim takes from a lane must be
        // that lane's next jobs in claim order (Redis removes them by rank, which relies on it).
        await enqueueMany(t.b, 12, (i) => ({
          jobId: `g${String(i).padStart(2, "0")}`,
          name: i % 2 === 0 ? NAME : "other",
          priority: i % 3,
          group: { key: "g", concurrency: 100 },
        }));
        await enqueueMany(t.b, 4, (i) => ({ jobId: `h${i}`, group: { key: "h", concurrency: 100 } }));
        const claimOrder = (ids: readonly string[]) => [...ids].sort((x, y) => (Number(x.slice(1)) % 3) - (Number(y.slice(1)) % 3) || x.localeCompare(y));
        const laneG = claimOrder(Array.from({ length: 12 }, (_, i) => `g${String(i).padStart(2, "0")}`));
        // Only the first name asked for: the other name's jobs stay where they are.
        const first = (await claimWatched(t.b, 2)).jobs.map((c) => c.job.id).sort();
        expect(first).toEqual(["g00", "h0"]);
        const takenG: string[] = ["g00"];
        const takenH: string[] = ["h0"];
        for (let call = 0; call < 20; call++) {
          const ids = (await claimWatched(t.b, 3, [NAME, "other"])).jobs.map((c) => c.job.id);
          if (ids.length === 0) break;
          takenG.push(...claimOrder(ids.filter((id) => id.startsWith("g"))));
          takenH.push(...ids.filter((id) => id.startsWith("h")).sort());
        }
        expect(takenG).toEqual(laneG);
        expect(takenH).toEqual(["h0", "h1", "h2", "h3"]);
        expect(await t.b.stats(QUEUE)).toMatchObject([{ counts: { waiting: 0, active: 16 } }]);
      },
    );

    it.skipIf(!keyed)("groups: turns go in the UTF-8 byte order of the group keys, on every store, wrapping round too [needs jobFlowKeys]", async () => {
      // UTF-16 order (JavaScript's <) puts U+10000 (a surrogate pair, 0xD800...) before U+E000;
      // UTF-8 byte order (PostgreSQL COLLATE "C", SQLite BINARY, Redis lex ranges) after it.
      const keys = ["\u{10000}", "\uE000", "z", "a"];
      for (const key of keys) await enqueueMany(t.b, 3, (i) => ({ jobId: `${key.codePointAt(0)}-${i}`, group: { key, concurrency: 100 } }));
      const turn = ["a", "z", "\uE000", "\u{10000}"].map((key) => key.codePointAt(0));
      const order: string[] = [];
      for (let i = 0; i < 4; i++) order.push(...(await claimWatched(t.b, 1)).jobs.map((c) => c.job.id));
      expect(order).toEqual(turn.map((c) => `${c}-0`));
      // The last claim ended on U+10000: the next one wraps round to the first lane and must
      // still see every lane up to it (a comparison in UTF-16 order stopped before U+E000).
      // (A claim returns its jobs in claim order, not in turn order: compare the sets.)
      const wrapped = (await claimWatched(t.b, 3)).jobs.map((c) => c.job.id).sort();
      expect(wrapped).toEqual(
        turn
          .slice(0, 3)
          .map((c) => `${c}-1`)
          .sort(),
      );
    });

    it.skipIf(!keyed)(
      "limiter keys: at most max starts per key per window; other keys go on; the claim says when the key reopens [needs jobFlowKeys]",
      async () => {
        await enqueueMany(t.b, 5, (i) => ({ jobId: `x${i}`, limiter: { key: "acct-x", max: 2, durationMs: 1_000 } }));
        await enqueueMany(t.b, 1, () => ({ jobId: "y0", limiter: { key: "acct-y", max: 2, durationMs: 1_000 } }));
        const first = await claimWatched(t.b, 10);
        expect(first.jobs.map((c) => c.job.id).sort()).toEqual(["x0", "x1", "y0"]);
        t.clock.advance(300);
        const limited = await claimWatched(t.b, 10);
        expect(limited.jobs).toEqual([]);
        expect(limited.throttles).toEqual([{ queue: QUEUE, retryInMs: 700 }]);
        t.clock.advance(700);
        expect((await claimWatched(t.b, 10)).jobs.map((c) => c.job.id).sort()).toEqual(["x2", "x3"]);
        expect(busiestWindow(await startTimes(t.b), 1_000)).toBeLessThanOrEqual(3);
      },
    );

    it.skipIf(!keyed)("holdQueue with keyOfJob holds that job's limiter key only, until the hold ends [needs jobFlowKeys]", async () => {
      await enqueueMany(t.b, 3, (i) => ({ jobId: `x${i}`, limiter: { key: "acct-x", max: 100, durationMs: 1_000 } }));
      await enqueueMany(t.b, 2, (i) => ({ jobId: `y${i}`, limiter: { key: "acct-y", max: 100, durationMs: 1_000 } }));
      const [x0] = (await claimWatched(t.b, 1)).jobs;
      expect(x0!.job.id).toBe("x0");
      await t.b.holdQueue(QUEUE, 500, { keyOfJob: "x0" });
      const rest = await claimWatched(t.b, 10);
      expect(rest.jobs.map((c) => c.job.id).sort()).toEqual(["y0", "y1"]);
      const held = await claimWatched(t.b, 10);
      expect(held.jobs).toEqual([]);
      expect(held.throttles).toEqual([{ queue: QUEUE, retryInMs: 500 }]);
      expect(await t.b.getQueueFlow(QUEUE)).toMatchObject({ heldUntil: null });
      t.clock.advance(500);
      expect((await claimWatched(t.b, 10)).jobs.map((c) => c.job.id)).toEqual(["x1", "x2"]);
    });

    it.skipIf(!keyed)("a laned queue still claims its jobs without a group, and the queue's own limits hold [needs jobFlowKeys]", async () => {
      // One unkeyed job from before the queue had keyed jobs, one after.
      await enqueueMany(t.b, 1, () => ({ jobId: "early" }));
      await enqueueMany(t.b, 2, (i) => ({ jobId: `g${i}`, group: { key: "g", concurrency: 5 } }));
      await enqueueMany(t.b, 2, (i) => ({ jobId: `plain${i}` }));
      await setLimits(t.b, { maxRunning: 3 });
      const got = await claimWatched(t.b, 10);
      expect(got.jobs.map((c) => c.job.id).sort()).toEqual(["early", "g0", "plain0"]);
      await setLimits(t.b, {});
      expect((await claimWatched(t.b, 10)).jobs.map((c) => c.job.id).sort()).toEqual(["g1", "plain1"]);
    });

    it.skipIf(!keyed)(
      "jobs running or dead when the queue first gets a keyed job are claimed when they wait again: retry, release, rescue, replay [needs jobFlowKeys]",
      async () => {
        // Four unkeyed jobs, claimed; then the queue's first keyed job turns its claims to lanes.
        await enqueueMany(t.b, 4, (i) => ({ jobId: `u${i}` }));
        const running = await claim(t.b, { limit: 4 });
        expect(running.map((c) => c.job.id).sort()).toEqual(["u0", "u1", "u2", "u3"]);
        const lease = (id: string) => running.find((c) => c.job.id === id)!.lease;
        // u3 dies before the queue is laned; the others are still running.
        expect(await t.b.fail([{ lease: lease("u3"), error: { name: "Error", message: "x", stack: null }, retryDelayMs: null }])).toEqual(["applied"]);
        await enqueueMany(t.b, 1, () => ({ jobId: "g0", group: { key: "g", concurrency: 5 } }));
        // u0 retried, u1 released, u2's lease runs out and is rescued, u3 replayed.
        expect(await t.b.fail([{ lease: lease("u0"), error: { name: "Error", message: "x", stack: null }, retryDelayMs: 0 }])).toEqual(["applied"]);
        expect(await t.b.release([lease("u1")])).toEqual(["applied"]);
        t.clock.advance(LEASE_MS + 1);
        expect((await t.b.rescueExpired()).map((r) => r.id)).toEqual(["u2"]);
        expect(await t.b.replay("u3")).toBe("replayed");
        const got = await claimWatched(t.b, 10);
        expect(got.jobs.map((c) => c.job.id).sort()).toEqual(["g0", "u0", "u1", "u2", "u3"]);
      },
    );

    it.skipIf(!keyed || !t.factory.openSecond)(
      "race: 8 claimers on their own connections never run more of a group than its concurrency (store's active jobs) [needs jobFlowKeys, factory.openSecond]",
      async () => {
        const fleet = [t.b, ...(await Promise.all(Array.from({ length: 7 }, () => t.second())))];
        await enqueueMany(t.b, 60, (i) => ({ data: { g: `tenant-${i % 3}` }, group: { key: `tenant-${i % 3}`, concurrency: 2 } }));
        let started = 0;
        for (let round = 0; round < 8; round++) {
          started += (await Promise.all(fleet.map((b, i) => claim(b, { worker: worker(`w${i}`), limit: 2 })))).flat().length;
          const active = await t.b.list({ queue: QUEUE, state: "active" }, { limit: 1_000 });
          const perGroup = new Map<string, number>();
          for (const j of active) {
            const group = (j.data as { g?: string }).g ?? "";
            perGroup.set(group, (perGroup.get(group) ?? 0) + 1);
          }
          for (const [group, n] of perGroup) expect(n, group).toBeLessThanOrEqual(2);
          expect(active.length).toBeLessThanOrEqual(6);
          await t.b.complete(active.slice(0, 3).map((j) => ({ lease: { jobId: j.id, token: j.lease!.token }, result: null })));
        }
        expect(started).toBeGreaterThanOrEqual(6 + 3 * 7);
      },
    );

    it.skipIf(!keyed || !t.factory.openSecond)(
      "race: 8 claimers on their own connections never start more of a limiter key than its max per window (store start times) [needs jobFlowKeys, factory.openSecond]",
      async () => {
        const fleet = [t.b, ...(await Promise.all(Array.from({ length: 7 }, () => t.second())))];
        await enqueueMany(t.b, 90, (i) => ({ data: { k: `acct-${i % 3}` }, limiter: { key: `acct-${i % 3}`, max: 4, durationMs: 1_000 } }));
        for (let round = 0; round < 12; round++) {
          await Promise.all(fleet.map((b, i) => claim(b, { worker: worker(`w${i}`), limit: 3 })));
          t.clock.advance(250);
        }
        const startsByKey = new Map<string, number[]>();
        for (const job of await t.b.list({ queue: QUEUE }, { limit: 1_000 })) {
          if (job.startedAt === null) continue;
          const key = (job.data as { k: string }).k;
          startsByKey.set(key, [...(startsByKey.get(key) ?? []), job.startedAt]);
        }
        expect([...startsByKey.keys()].sort()).toEqual(["acct-0", "acct-1", "acct-2"]);
        for (const [key, starts] of startsByKey) {
          starts.sort((x, y) => x - y);
          expect(busiestWindow(starts, 1_000), key).toBe(4);
          // 12 rounds over 2.75 s: the windows opening at 0, 1 s and 2 s each let exactly 4 of the key start.
          expect(starts, key).toHaveLength(12);
        }
      },
    );
  });
}
