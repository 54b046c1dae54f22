/**
 * StoreHistory over a real SQLite store on a fake clock: per-minute counts and percentiles read
 * from the store, and the cost bound (a finished minute is read once, the current one at most
 * every refreshMs).
 */
import { afterEach, describe, expect, it } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { FakeClock } from "../../src/core/clock.js";
import { buildJobSpec } from "../../src/core/spec.js";
import { StoreHistory } from "../../src/dashboard/store-history.js";

const MINUTE = 60_000;
const worker = { id: "w", host: "h", pid: 1 };
let backend: SqliteBackend | undefined;
afterEach(async () => backend?.close());

/** Runs `count` jobs of `queue`: due now, started after `waitMs`, finished `runMs` later. */
async function run(b: Backend, clock: FakeClock, queue: string, count: number, waitMs: number, runMs: number, outcome: "complete" | "die" = "complete") {
  await b.enqueue(Array.from({ length: count }, () => buildJobSpec({ queue, name: "n", data: null, options: { attempts: 1 } })));
  clock.advance(waitMs);
  const claimed = await b.claim({ queues: [queue], names: ["n"], worker, limit: count, leaseMs: 60_000 });
  clock.advance(runMs);
  if (outcome === "complete") await b.complete(claimed.map((c) => ({ lease: c.lease, result: null })));
  else await b.fail(claimed.map((c) => ({ lease: c.lease, error: { name: "Error", message: "x", stack: "" }, retryDelayMs: null })));
}

describe("StoreHistory", () => {
  it("charts what the store finished per minute, reading a finished minute once and the current one at most every refreshMs", async () => {
    const clock = new FakeClock(Date.UTC(2030, 0, 1, 12, 0, 0));
    backend = new SqliteBackend({ path: ":memory:", clock });
    await backend.migrate();
    const reads: number[] = [];
    const counted: Pick<Backend, "finishedWindow" | "now"> = {
      now: () => backend!.now(),
      finishedWindow: (queue, from, until, limit) => {
        reads.push(from);
        return backend!.finishedWindow(queue, from, until, limit);
      },
    };
    const history = new StoreHistory(counted, { refreshMs: 5_000 });
    const start = clock.now();
    await run(backend, clock, "q", 4, 100, 250);
    await run(backend, clock, "q", 1, 300, 50, "die");
    clock.advance(MINUTE);
    await run(backend, clock, "q", 2, 1_000, 2_000);

    const series = await history.series("q", 5);
    expect(series.map((m) => m.t)).toEqual([-3, -2, -1, 0, 1].map((i) => start + i * MINUTE));
    const [first, second] = [series[3]!, series[4]!];
    expect(first).toMatchObject({ completed: 4, failed: 1, dead: 1, waitMs: { p50: 100, p95: 300 }, runMs: { p50: 250, p95: 250 } });
    expect(second).toMatchObject({ completed: 2, failed: 0, waitMs: { p50: 1_000 }, runMs: { p50: 2_000, p99: 2_000 } });
    expect(reads).toHaveLength(5);

    // Within refreshMs nothing is read again; after it, the minutes that may still change are.
    reads.length = 0;
    await history.series("q", 5);
    expect(reads).toEqual([]);
    clock.advance(6_000);
    await history.series("q", 5);
    // The current minute, and the previous one (it ended less than 5 s before it was read).
    expect(reads.sort()).toEqual([start, start + MINUTE]);
    // Once a minute has been read after it settled, it is never read again.
    reads.length = 0;
    clock.advance(6_000);
    await history.series("q", 5);
    expect(reads).toEqual([start + MINUTE]);

    // A job that finishes now shows in the current minute at the next refresh, not before.
    await run(backend, clock, "q", 3, 10, 10);
    expect((await history.series("q", 5))[4]!.completed).toBe(2);
    clock.advance(5_000);
    expect((await history.series("q", 5))[4]!.completed).toBe(5);
  });
});
