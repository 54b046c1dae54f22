/**
 * SQLite rate windows (src/backend/sqlite/flow.ts, windowsOf): a window the claim could fill is
 * counted exactly, its starts that left it forgotten first; a window it cannot fill keeps its
 * stored count (an upper bound, windowNeedsExactCount) and its expired starts until the oldest
 * left a whole window ago, then forgets them all at once. Checked from the store's own rows, with
 * a fixed clock, for a queue's own rate and for a limiter key of a laned queue.
 */
import Database from "better-sqlite3";
import { afterAll, afterEach, describe, expect, it } from "vitest";
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
  const rows = (bucket: string) =>
    (db.prepare("SELECT at, n FROM conveyor_flow_starts WHERE queue = ? ORDER BY at").all(bucket) as Array<{ at: number; n: number }>).map((r) => [
      r.at - clock.now(),
      r.n,
    ]);
  const counted = (bucket: string) => db.prepare("SELECT n FROM conveyor_flow_counts WHERE bucket = ?").pluck().get(bucket) as number | undefined;
  /** The bucket's window as `[ms ago, starts]` rows, its count their sum. */
  const seed = (bucket: string, starts: Array<[number, number]>) => {
    db.prepare("DELETE FROM conveyor_flow_starts WHERE queue = ?").run(bucket);
    const insert = db.prepare("INSERT INTO conveyor_flow_starts (queue, at, n) VALUES (?, ?, ?)");
    for (const [ago, n] of starts) insert.run(bucket, clock.now() - ago, n);
    db.prepare("INSERT INTO conveyor_flow_counts (bucket, n) VALUES (?, ?) ON CONFLICT (bucket) DO UPDATE SET n = excluded.n").run(
      bucket,
      starts.reduce((sum, [, n]) => sum + n, 0),
    );
  };
  const claim = async (limit: number) => (await b.claim({ queues: ["q"], names: ["job"], limit, leaseMs: 60_000, worker: WORKER })).length;
  return { b, db, clock, rows, counted, seed, claim };
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
  }
});
