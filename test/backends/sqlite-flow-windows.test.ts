/**
 * SQLite rate windows (src/backend/sqlite/flow.ts, windowsOf): a window the claim could fill is
 * counted exactly, its starts that left it forgotten first; a window it cannot fill keeps its
 * stored count (an upper bound, windowNeedsExactCount) and its expired starts until the oldest
 * left a whole window ago, then forgets them all at once. Checked from the store's own rows, with
 * a fixed clock, for a queue's own rate and for a limiter key of a laned queue.
 */
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import type { ClaimThrottle } from "../../src/backend/contract.js";
import { SqliteBackend } from "../../src/backend/sqlite/backend.js";
import { FakeClock } from "../../src/core/clock.js";
import { buildJobSpec, type JobOptions } from "../../src/core/spec.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs("conveyor-sqlite-flow-windows-");
const open: SqliteBackend[] = [];
afterEach(async () => {
  for (const b of open.splice(0)) await b.close();
});
afterAll(() => temp.removeAll());

const WORKER = { id: "w", host: "h", pid: 1 };

async function setUp(options: (i: number) => JobOptions, jobs = 40) {
  const path = await temp.file("jobs.db");
  const clock = new FakeClock(10_000_000);
  const b = new SqliteBackend({ path, clock });
  open.push(b);
  await b.enqueue(Array.from({ length: jobs }, (_, i) => buildJobSpec({ queue: "q", name: "job", data: { i }, options: options(i) })));
  const db = new Database(path);
  /** The bucket's stored starts, of both tables (0014), as `[ms from now, starts]`. */
  const rows = (bucket: string) =>
    (
      db
        .prepare("SELECT at, n FROM conveyor_flow_starts WHERE queue = ? UNION ALL SELECT at, n FROM conveyor_flow_starts_recent WHERE queue = ? ORDER BY at")
        .all(bucket, bucket) as Array<{ at: number; n: number }>
    ).map((r) => [r.at - clock.now(), r.n]);
  const recentRows = () => db.prepare("SELECT count(*) FROM conveyor_flow_starts_recent").pluck().get() as number;
  const counted = (bucket: string) => db.prepare("SELECT n FROM conveyor_flow_counts WHERE bucket = ?").pluck().get(bucket) as number | undefined;
  /**
   * The bucket's window as `[ms ago, starts]` rows, its count their sum: in flow_starts, or with
   * `recentFrom` the rows from that index on in the recent table (as a claim leaves them
   * before they move).
   */
  const seed = (bucket: string, starts: Array<[number, number]>, recentFrom = starts.length) => {
    db.prepare("DELETE FROM conveyor_flow_starts WHERE queue = ?").run(bucket);
    db.prepare("DELETE FROM conveyor_flow_starts_recent WHERE queue = ?").run(bucket);
    starts.forEach(([ago, n], i) =>
      db.prepare(`INSERT INTO conveyor_flow_starts${i >= recentFrom ? "_recent" : ""} (queue, at, n) VALUES (?, ?, ?)`).run(bucket, clock.now() - ago, n),
    );
    db.prepare("INSERT INTO conveyor_flow_counts (bucket, n) VALUES (?, ?) ON CONFLICT (bucket) DO UPDATE SET n = excluded.n").run(
      bucket,
      starts.reduce((sum, [, n]) => sum + n, 0),
    );
  };
  /** What the last claim said about when to come back (onThrottle), ms; null when it said nothing. */
  let retryInMs: number | null = null;
  const claim = async (limit: number) => {
    retryInMs = null;
    const onThrottle = (t: ClaimThrottle) => (retryInMs = t.retryInMs);
    return (await b.claim({ queues: ["q"], names: ["job"], limit, leaseMs: 60_000, worker: WORKER, onThrottle })).length;
  };
  return { b, db, clock, rows, recentRows, counted, seed, claim, retryInMs: () => retryInMs };
}

describe("SQLite rate windows", () => {
  for (const kind of ["the queue's own rate", "a limiter key"] as const) {
    const bucket = kind === "a limiter key" ? "q\nk:api" : "q";
    const options = (): JobOptions => (kind === "a limiter key" ? { limiter: { key: "api", max: 100, durationMs: 1_000 } } : {});
    const limit = async (b: SqliteBackend) => {
      if (kind === "the queue's own rate") await b.setQueueLimits("q", { rate: { max: 100, durationMs: 1_000 }, maxRunning: null, maxRunningPerName: {} });
    };

    it(`${kind}: a window the claim cannot fill keeps its expired starts until the oldest left a whole window ago`, async () => {
      const t = await setUp(options);
      await limit(t.b);
      // 10 starts stored, 3 of them 1.5 s ago (left the 1 s window, not yet a whole window ago): 10 + 5 < 100.
      t.seed(bucket, [
        [1_500, 3],
        [500, 7],
      ]);
      expect(await t.claim(5)).toBe(5);
      expect(t.rows(bucket)).toEqual([
        [-1_500, 3],
        [-500, 7],
        [0, 5],
      ]);
      expect(t.counted(bucket)).toBe(15);
      // 0.6 s on the oldest start is 2.1 s old, a whole window past the window's end: every start that left goes, together.
      t.clock.advance(600);
      expect(await t.claim(5)).toBe(5);
      expect(t.rows(bucket)).toEqual([
        [-600, 5],
        [0, 5],
      ]);
      expect(t.counted(bucket)).toBe(10);
    });

    it(`${kind}: a window the claim could fill is counted exactly, its expired starts forgotten first`, async () => {
      const t = await setUp(options);
      await limit(t.b);
      // 98 stored: 60 of them 1.5 s ago, 38 inside the window. 98 + 5 >= 100: counted exactly, room for 62.
      t.seed(bucket, [
        [1_500, 60],
        [500, 38],
      ]);
      expect(await t.claim(5)).toBe(5);
      expect(t.rows(bucket)).toEqual([
        [-500, 38],
        [0, 5],
      ]);
      expect(t.counted(bucket)).toBe(43);
      // 95 in the window: a claim of 10 gets the 5 left, the next none, and once the 90 have left, all 10.
      t.seed(bucket, [
        [500, 90],
        [0, 5],
      ]);
      expect(await t.claim(10)).toBe(5);
      expect(await t.claim(10)).toBe(0);
      t.clock.advance(501);
      expect(await t.claim(10)).toBe(10);
    });

    it(`${kind}: a window's starts in both tables are read and forgotten together`, async () => {
      const t = await setUp(options);
      await limit(t.b);
      // 98 stored: 60 moved to flow_starts 1.5 s ago, 30 of 1.2 s ago still recent, 8 recent inside the window.
      t.seed(
        bucket,
        [
          [1_500, 60],
          [1_200, 30],
          [400, 8],
        ],
        1,
      );
      expect(t.recentRows()).toBe(2);
      // 98 + 5 >= 100: counted exactly, the 90 that left forgotten from both tables, room for 92.
      expect(await t.claim(5)).toBe(5);
      expect(t.rows(bucket)).toEqual([
        [-400, 8],
        [0, 5],
      ]);
      expect(t.counted(bucket)).toBe(13);
      // The oldest start is a recent one, older than the moved one: 92 in the window, 8 slots,
      // and the next opens when the 87 of 300 ms ago leave (700 ms), not the 5 of 100 ms ago (900 ms).
      t.seed(
        bucket,
        [
          [100, 5],
          [300, 87],
        ],
        1,
      );
      expect(await t.claim(10)).toBe(8);
      expect(await t.claim(10)).toBe(0);
      expect(t.retryInMs()).toBe(700);
      t.clock.advance(700);
      expect(await t.claim(10)).toBe(10);
    });
  }

  it("the recent starts move to flow_starts together, in window order, once 256 rows are in the recent table", async () => {
    const t = await setUp(() => ({ limiter: { key: "api", max: 1_000_000, durationMs: 60_000 } }), 600);
    await t.b.setQueueLimits("q", { rate: { max: 1_000_000, durationMs: 60_000 }, maxRunning: null, maxRunningPerName: {} });
    // Each claim stores two rows: the queue's window and the key's. 127 claims leave 254 rows.
    for (let i = 0; i < 127; i++) {
      expect(await t.claim(2)).toBe(2);
      t.clock.advance(1);
    }
    expect(t.recentRows()).toBe(254);
    const moved = () => t.db.prepare("SELECT count(*) FROM conveyor_flow_starts").pluck().get() as number;
    expect(moved()).toBe(0);
    const before = { queue: t.rows("q"), key: t.rows("q\nk:api") };
    expect(await t.claim(2)).toBe(2);
    expect(t.recentRows()).toBe(0);
    expect(moved()).toBe(256);
    // Nothing lost or added in the move: the windows hold what they held, and the claim's starts.
    expect(t.rows("q")).toEqual([...before.queue, [0, 2]]);
    expect(t.rows("q\nk:api")).toEqual([...before.key, [0, 2]]);
    expect(t.counted("q")).toBe(256);
    expect(t.counted("q\nk:api")).toBe(256);
    // In window order: flow_starts' rowids follow (queue, at).
    const order = t.db.prepare("SELECT queue, at FROM conveyor_flow_starts ORDER BY rowid").all() as Array<{ queue: string; at: number }>;
    expect(order).toEqual([...order].sort((a, b) => (a.queue === b.queue ? a.at - b.at : a.queue < b.queue ? -1 : 1)));
    // The next claim starts the recent table again.
    t.clock.advance(1);
    expect(await t.claim(2)).toBe(2);
    expect(t.recentRows()).toBe(2);
    // A queue's rate removed takes its window with it, from both tables (a later rate starts empty).
    await t.b.setQueueLimits("q", { rate: null, maxRunning: null, maxRunningPerName: {} });
    expect(t.rows("q")).toEqual([]);
    expect(t.counted("q")).toBeUndefined();
  });
});
