import { describe, expect, it } from "vitest";
import { UnsupportedByStoreError } from "../../src/core/errors.js";
import { JOB_LOG_MAX_LINE_LENGTH, JOB_LOG_MAX_LINES, JOB_LOG_TRUNCATION_MARK } from "../../src/core/job-log.js";
import { A, B, claimOne, enqueueOne, errorInfo, mustGet, type SuiteContext } from "./fixtures.js";

/** Job logs (ctx.log): fenced like progress, bounded, kept across attempts, deleted with the job. */
export function logTests(t: SuiteContext): void {
  it.skipIf(t.factory.capabilities.jobRecords)(
    "a store without job records refuses to read logs with UnsupportedByStoreError, and takes lines only under a live lease",
    async () => {
      await expect(t.b.logs("nope")).rejects.toThrow(UnsupportedByStoreError);
      expect(await t.b.appendLogs({ jobId: "nope", token: 1 }, ["x"])).toBe("stale");
    },
  );

  describe.skipIf(!t.factory.capabilities.jobRecords)(t.factory.capabilities.jobRecords ? "job logs" : "job logs [needs jobRecords]", () => {
    it("appends lines in order with the store's time and the attempt, across attempts", async () => {
      const id = await enqueueOne(t.b, { attempts: 3 });
      const first = await claimOne(t.b, { worker: A });
      const at1 = t.clock.now();
      expect(await t.b.appendLogs(first.lease, ["one", "two"])).toBe("applied");
      expect(await t.b.appendLogs(first.lease, ["three"])).toBe("applied");
      expect(await t.b.fail([{ lease: first.lease, error: errorInfo("boom"), retryDelayMs: 0 }])).toEqual(["applied"]);
      t.clock.advance(1_000);
      const second = await claimOne(t.b, { worker: B });
      expect(await t.b.appendLogs(second.lease, ["four"])).toBe("applied");
      expect(await t.b.logs(id)).toEqual([
        { at: at1, attempt: 1, line: "one" },
        { at: at1, attempt: 1, line: "two" },
        { at: at1, attempt: 1, line: "three" },
        { at: at1 + 1_000, attempt: 2, line: "four" },
      ]);
      // The log does not change the job record itself.
      expect((await mustGet(t.b, id)).state).toBe("active");
    });

    it("keeps a line holding U+0000 and unpaired surrogates: lines are UTF-8 text, a lone surrogate U+FFFD, U+0000 kept or U+FFFD (PostgreSQL)", async () => {
      // PostgreSQL's text refused U+0000 and the line was dropped (the worker only logged the error).
      const id = await enqueueOne(t.b);
      const c = await claimOne(t.b);
      expect(await t.b.appendLogs(c.lease, ["a\u0000b\ud800c\udc00d", "plain"])).toBe("applied");
      const lines = (await t.b.logs(id)).map((l) => l.line);
      expect([
        ["a\u0000b\ufffdc\ufffdd", "plain"],
        ["a\ufffdb\ufffdc\ufffdd", "plain"],
      ]).toContainEqual(lines);
    });

    it("is fenced: a stale or forged lease, or a finished job, writes nothing", async () => {
      const id = await enqueueOne(t.b, { attempts: 5 });
      const a = await claimOne(t.b, { worker: A, leaseMs: 1_000 });
      expect(await t.b.appendLogs(a.lease, ["by A"])).toBe("applied");
      t.clock.advance(1_001);
      expect(await t.b.rescueExpired()).toHaveLength(1);
      expect(await t.b.appendLogs(a.lease, ["A after its lease expired"])).toBe("stale");
      const b = await claimOne(t.b, { worker: B });
      expect(await t.b.appendLogs(a.lease, ["A while B runs"])).toBe("stale");
      expect(await t.b.appendLogs({ jobId: id, token: b.lease.token + 1 }, ["forged"])).toBe("stale");
      expect(await t.b.appendLogs({ jobId: "no-such-job", token: 1 }, ["nobody"])).toBe("stale");
      expect(await t.b.appendLogs(b.lease, ["by B"])).toBe("applied");
      expect(await t.b.complete([{ lease: b.lease, result: null }])).toEqual(["applied"]);
      expect(await t.b.appendLogs(b.lease, ["after completion"])).toBe("stale");
      expect((await t.b.logs(id)).map((l) => l.line)).toEqual(["by A", "by B"]);
    });

    it(`keeps the newest ${JOB_LOG_MAX_LINES} lines of a job and cuts lines over ${JOB_LOG_MAX_LINE_LENGTH} characters`, async () => {
      const id = await enqueueOne(t.b);
      const c = await claimOne(t.b);
      const lines = Array.from({ length: JOB_LOG_MAX_LINES - 10 }, (_, i) => `line ${i}`);
      expect(await t.b.appendLogs(c.lease, lines)).toBe("applied");
      expect(
        await t.b.appendLogs(
          c.lease,
          Array.from({ length: 15 }, (_, i) => `more ${i}`),
        ),
      ).toBe("applied");
      const long = "x".repeat(JOB_LOG_MAX_LINE_LENGTH + 500);
      expect(await t.b.appendLogs(c.lease, [long])).toBe("applied");
      const stored = await t.b.logs(id);
      expect(stored).toHaveLength(JOB_LOG_MAX_LINES);
      // 990 + 15 + 1 lines written: the 6 oldest are gone.
      expect(stored[0]!.line).toBe("line 6");
      expect(stored.at(-2)!.line).toBe("more 14");
      expect(stored.at(-1)!.line).toHaveLength(JOB_LOG_MAX_LINE_LENGTH);
      expect(stored.at(-1)!.line.endsWith(JOB_LOG_TRUNCATION_MARK)).toBe(true);
      // One batch longer than the bound keeps its newest lines.
      const flood = Array.from({ length: JOB_LOG_MAX_LINES + 5 }, (_, i) => `flood ${i}`);
      expect(await t.b.appendLogs(c.lease, flood)).toBe("applied");
      const after = await t.b.logs(id);
      expect(after).toHaveLength(JOB_LOG_MAX_LINES);
      expect(after[0]!.line).toBe("flood 5");
    });

    it("follows the queue rule of get, and goes when its job is removed", async () => {
      const id = await enqueueOne(t.b, { queue: "q" });
      const c = await claimOne(t.b);
      await t.b.appendLogs(c.lease, ["kept"]);
      expect(await t.b.logs(id, "other")).toEqual([]);
      expect((await t.b.logs(id, "q")).map((l) => l.line)).toEqual(["kept"]);
      expect(await t.b.logs("never-enqueued")).toEqual([]);
      await t.b.complete([{ lease: c.lease, result: null }]);
      expect(await t.b.remove(id)).toBe("removed");
      expect(await t.b.logs(id)).toEqual([]);
      // The same id again starts with an empty log (nothing left behind by the removed job).
      await enqueueOne(t.b, { queue: "q", jobId: id });
      expect(await t.b.logs(id)).toEqual([]);
    });

    it("goes when the pruner deletes its job", async () => {
      const id = await enqueueOne(t.b, { removeOnComplete: { ageMs: 10_000 } });
      const c = await claimOne(t.b);
      await t.b.appendLogs(c.lease, ["pruned later"]);
      await t.b.complete([{ lease: c.lease, result: null }]);
      t.clock.advance(10_001);
      expect((await t.b.prune()).jobs).toBe(1);
      await enqueueOne(t.b, { jobId: id });
      expect(await t.b.logs(id)).toEqual([]);
    });

    it("a job completed with retention 0 takes its log with it", async () => {
      const id = await enqueueOne(t.b, { removeOnComplete: true });
      const c = await claimOne(t.b);
      await t.b.appendLogs(c.lease, ["short-lived"]);
      await t.b.complete([{ lease: c.lease, result: null }]);
      expect(await t.b.get(id)).toBeNull();
      await enqueueOne(t.b, { jobId: id });
      expect(await t.b.logs(id)).toEqual([]);
    });
  });
}
