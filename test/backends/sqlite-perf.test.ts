/**
 * The SQLite backend's fast paths (docs/performance-sqlite.md) answer exactly what the one-row
 * paths answer. The conformance suite's batches are mostly shorter than one multi-row statement,
 * so these tests use batches that cross every statement size (64 rows, 8 rows, single rows).
 */
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import type { JobOptions } from "../../src/core/spec.js";
import { buildJobSpec } from "../../src/core/spec.js";
import type { JobSpec, Lease } from "../../src/core/job.js";
import { statementsRun } from "../helpers/sqlite-statements.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs("conveyor-sqlite-perf-");
const closeAfterTest: Backend[] = [];

afterEach(async () => {
  for (const b of closeAfterTest.splice(0)) await b.close();
});
afterAll(() => temp.removeAll());

async function open(path?: string): Promise<Backend> {
  const backend = new SqliteBackend({ path: path ?? (await temp.file("jobs.db")) });
  closeAfterTest.push(backend);
  return backend;
}

const WORKER = { id: "w", host: "h", pid: 1 };

function spec(i: number, options: JobOptions = {}, queue = "q"): JobSpec {
  return buildJobSpec({ queue, name: "job", data: { i }, options: { jobId: `job-${i}`, ...options } });
}

/** Every job of queue `q` in claim order (all share priority and run_at, so seq order). */
async function claimAll(b: Backend, queue = "q"): Promise<string[]> {
  const claimed = await b.claim({ queues: [queue], names: ["job"], limit: 1_000, leaseMs: 60_000, worker: WORKER });
  return claimed.map((c) => c.job.id);
}

async function addedEvents(b: Backend): Promise<string[]> {
  const page = await b.readEvents!("0", 10_000);
  return page.events.filter((e) => e.type === "added").map((e) => e.jobId);
}

describe("bulk enqueue, many rows per statement", () => {
  it("stores a batch crossing every statement size in order, flagging ids taken before or earlier in the batch", async () => {
    const b = await open();
    await b.enqueue([spec(70)]);
    // 75 specs: one 64-row statement, one 8-row statement, 3 single rows. job-5 repeats inside the
    // first statement, job-70 was stored before and lands in the 8-row one, job-73 repeats across
    // the 8-row statement and a single row.
    const ids = [...Array.from({ length: 75 }, (_, i) => i)];
    ids[10] = 5;
    ids[74] = 73;
    const results = await b.enqueue(ids.map((i) => spec(i)));
    const duplicateAt = results.flatMap((r, at) => (r.duplicate ? [at] : []));
    expect(duplicateAt).toEqual([10, 70, 74]);
    expect(results.map((r) => r.id)).toEqual(ids.map((i) => `job-${i}`));

    const stored = ids.filter((_, at) => !duplicateAt.includes(at)).map((i) => `job-${i}`);
    expect(await claimAll(b)).toEqual(["job-70", ...stored]);
    expect(await addedEvents(b)).toEqual(["job-70", ...stored]);
  });

  it("keeps the order of the batch around jobs that take the one-row path (dedup windows, flow keys)", async () => {
    const b = await open();
    const specs = Array.from({ length: 150 }, (_, i) =>
      i === 40 ? spec(i, { dedup: { key: "k", ttlMs: 60_000 } }) : i === 100 ? spec(i, { group: { key: "g", concurrency: 5 } }) : spec(i),
    );
    const results = await b.enqueue(specs);
    expect(results.every((r) => !r.duplicate)).toBe(true);
    // The flow-keyed job turns the queue's lanes on: the jobs after it take the one-row path too.
    expect(await claimAll(b)).toEqual(specs.map((s) => s.id));
    expect(await addedEvents(b)).toEqual(specs.map((s) => s.id));
  });

  it("all or nothing: a duplicate anywhere in a long batch stores none of it", async () => {
    const b = await open();
    await b.enqueue([spec(130)]);
    const results = await b.enqueue(
      Array.from({ length: 140 }, (_, i) => spec(i)),
      { allOrNothing: true },
    );
    expect(results.filter((r) => r.duplicate).map((r) => r.id)).toEqual(["job-130"]);
    expect(await claimAll(b)).toEqual(["job-130"]);
  });

  it("spreads one batch over several queues, each woken once", async () => {
    const b = await open();
    const woken: string[] = [];
    const stop = b.subscribe((queue) => woken.push(queue));
    const specs = Array.from({ length: 100 }, (_, i) => spec(i, {}, i % 2 === 0 ? "even" : "odd"));
    await b.enqueue(specs);
    stop();
    expect(woken.sort()).toEqual(["even", "odd"]);
    expect(await claimAll(b, "even")).toEqual(specs.filter((_, i) => i % 2 === 0).map((s) => s.id));
    expect(await claimAll(b, "odd")).toEqual(specs.filter((_, i) => i % 2 === 1).map((s) => s.id));
  });
});

describe("wake-ups across connections", () => {
  it("a subscriber hears another connection's enqueue without waiting for any timer", async () => {
    const path = await temp.file("jobs.db");
    const producer = await open(path);
    const subscriber = await open(path);
    // Timers frozen: only the look made as soon as the file event arrives can deliver the wake-up
    // (the ladder of timed looks in wakeups.ts never fires). The producer is in this process, so
    // its commit is complete before any file event is handled: nothing here races.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const woken: string[] = [];
      subscriber.subscribe((queue) => woken.push(queue));
      await producer.enqueue([spec(1)]);
      const giveUpAt = performance.now() + 10_000;
      while (woken.length === 0 && performance.now() < giveUpAt) await new Promise((r) => setImmediate(r));
      expect(woken).toEqual(["q"]);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("settling: one statement per finished job on the path its queue takes", () => {
  /** Statements better-sqlite3 runs while `fn` runs, the transaction's BEGIN and COMMIT included. */
  async function statementsDuring(fn: () => Promise<unknown>): Promise<number> {
    return (await statementsRun(fn)).length;
  }

  async function claimLeases(b: Backend, n: number, queue = "q"): Promise<Lease[]> {
    const claimed = await b.claim({ queues: [queue], names: ["job"], limit: n, leaseMs: 60_000, worker: WORKER });
    expect(claimed).toHaveLength(n);
    return claimed.map((c) => c.lease);
  }

  it("completes and buries kept jobs with one statement each (no probe for a job kept for 0 ms first)", async () => {
    const b = await open();
    await b.enqueue(Array.from({ length: 40 }, (_, i) => spec(i)));
    const leases = await claimLeases(b, 40);
    const completing = leases.slice(0, 20).map((lease) => ({ lease, result: null }));
    const failing = leases.slice(20).map((lease) => ({ lease, error: { name: "Error", message: "no", stack: null }, retryDelayMs: null }));
    // 20 UPDATEs plus BEGIN and COMMIT; before, each job also ran log-completed-unretained.sql first.
    expect(await statementsDuring(() => b.complete(completing))).toBe(22);
    expect(await statementsDuring(() => b.fail(failing))).toBe(22);
    const states = await Promise.all(leases.map((lease) => b.get(lease.jobId)));
    expect(states.map((job) => job?.state)).toEqual([...Array<string>(20).fill("completed"), ...Array<string>(20).fill("dead")]);
  });

  it("a queue whose jobs are kept for 0 ms settles them with their two statements each once it has met one", async () => {
    const b = await open();
    await b.enqueue(Array.from({ length: 21 }, (_, i) => spec(i, { removeOnComplete: true })));
    const leases = await claimLeases(b, 21);
    await b.complete([{ lease: leases[0]!, result: null }]);
    // Event INSERT and DELETE per job plus BEGIN and COMMIT: no failed UPDATE first.
    expect(await statementsDuring(() => b.complete(leases.slice(1).map((lease) => ({ lease, result: null }))))).toBe(42);
  });

  it("a batch mixing kept jobs, jobs kept for 0 ms and stale leases answers and stores each exactly", async () => {
    const b = await open();
    const kept = (i: number) => i % 3 !== 1;
    await b.enqueue(Array.from({ length: 12 }, (_, i) => spec(i, kept(i) ? {} : { removeOnComplete: true, removeOnFail: true })));
    const leases = await claimLeases(b, 12);
    const stale = (lease: Lease): Lease => ({ ...lease, token: lease.token + 1 });
    // Every order of paths: kept after kept-for-0, kept-for-0 after kept, and stale leases of both kinds in between.
    const completing = leases.slice(0, 6).flatMap((lease) => [
      { lease: stale(lease), result: null },
      { lease, result: { ok: lease.jobId } },
    ]);
    const results = await b.complete(completing);
    expect(results).toEqual(Array.from({ length: 6 }, () => ["stale", "applied"]).flat());
    const failing = leases.slice(6).flatMap((lease) => [
      { lease: stale(lease), error: { name: "Error", message: "no", stack: null }, retryDelayMs: null },
      { lease, error: { name: "Error", message: "no", stack: null }, retryDelayMs: null },
    ]);
    expect(await b.fail(failing)).toEqual(Array.from({ length: 6 }, () => ["stale", "applied"]).flat());
    // Settled twice: the second answer is stale on either path.
    expect(
      await b.complete([
        { lease: leases[0]!, result: null },
        { lease: leases[1]!, result: null },
      ]),
    ).toEqual(["stale", "stale"]);
    for (const [i, lease] of leases.entries()) {
      const job = await b.get(lease.jobId);
      if (!kept(i)) expect(job).toBeNull();
      else expect(job?.state).toBe(i < 6 ? "completed" : "dead");
      if (kept(i) && i < 6) expect(job?.result).toEqual({ ok: lease.jobId });
    }
    const page = await b.readEvents!("0", 10_000);
    const finished = page.events.filter((e) => e.type === "completed" || e.type === "dead");
    expect(finished.map((e) => `${e.jobId} ${e.type}`)).toEqual(leases.map((lease, i) => `${lease.jobId} ${i < 6 ? "completed" : "dead"}`));
  });
});

describe("claim naming one job name", () => {
  it("matches the name as is, without a JSON array of names, and takes only that name's jobs", async () => {
    const b = await open();
    const named = (i: number, name: string) => buildJobSpec({ queue: "q", name, data: { i }, options: { jobId: `${name}-${i}` } });
    await b.enqueue(Array.from({ length: 12 }, (_, i) => named(i, i % 2 === 0 ? "job" : "other")));
    let claimed: Awaited<ReturnType<Backend["claim"]>> = [];
    const texts = await statementsRun(async () => {
      claimed = await b.claim({ queues: ["q"], names: ["job"], limit: 4, leaseMs: 60_000, worker: WORKER });
    });
    expect(claimed.map((c) => c.job.id)).toEqual(["job-0", "job-2", "job-4", "job-6"]);
    const candidates = texts.filter((text) => text.includes("ORDER BY priority, run_at, seq"));
    expect(candidates).toHaveLength(1);
    expect(candidates[0]).toContain("AND name = +?");
    expect(candidates[0]).not.toContain("name IN (SELECT value FROM json_each(+?))");
    // Two names still go through the array, and still take both names' jobs in claim order.
    const both = await b.claim({ queues: ["q"], names: ["other", "job"], limit: 6, leaseMs: 60_000, worker: WORKER });
    expect(both.map((c) => c.job.id)).toEqual(["other-1", "other-3", "other-5", "other-7", "job-8", "other-9"]);
  });
});
