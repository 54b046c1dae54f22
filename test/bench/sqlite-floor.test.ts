/**
 * SQLite's floors (bench/sqlite-floor.ts) stay honest as the schema changes: the rows the floor
 * over Conveyor's tables writes are jobs Conveyor itself reads as waiting, each with its "added"
 * event, and its claim and completion leave them completed with their events; both floors run
 * every figure of the SQLite bench. No timing is asserted.
 */
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { connect, CONVEYOR_ROWS, fill, processAll, rowsOf, sqliteFloorSubjects } from "../../bench/sqlite-floor.js";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { TempDirs } from "../helpers/temp.js";

const WORKER = { id: "floor-test", host: "localhost", pid: process.pid };
const temp = new TempDirs("conveyor-sqlite-floor-");
afterAll(() => temp.removeAll());

describe("SQLite floors", () => {
  it("writes, over Conveyor's tables, waiting jobs Conveyor reads as its own, and completes them as Conveyor would record it", async () => {
    const path = join(await temp.make(), "floor.db");
    const db = connect(path);
    await CONVEYOR_ROWS.setup(db, path);
    fill(db, CONVEYOR_ROWS, rowsOf(CONVEYOR_ROWS, 0, 150));
    const events = () => db.prepare<[], { type: string; n: number }>("SELECT type, count(*) AS n FROM conveyor_events GROUP BY type ORDER BY type").all();
    expect(events()).toEqual([{ type: "added", n: 150 }]);

    const backend = new SqliteBackend({ path });
    try {
      const counts = async () => (await backend.stats("bench"))[0]?.counts;
      expect(await counts()).toMatchObject({ waiting: 150, active: 0, completed: 0 });
      await processAll(db, CONVEYOR_ROWS, 100, 10);
      expect(await counts()).toMatchObject({ waiting: 50, active: 0, completed: 100 });
      expect(events()).toEqual([
        { type: "active", n: 100 },
        { type: "added", n: 150 },
        { type: "completed", n: 100 },
      ]);
      // The rest is claimable by Conveyor, in the floor's insertion order.
      const claimed = await backend.claim({ queues: ["bench"], names: ["noop"], worker: WORKER, limit: 5, leaseMs: 30_000 });
      expect(claimed.map((c) => c.job.data)).toEqual([{ i: 100 }, { i: 101 }, { i: 102 }, { i: 103 }, { i: 104 }]);
    } finally {
      await backend.close();
      db.close();
    }
  });

  it("runs every figure of the SQLite bench on both floors", async () => {
    for (const subject of sqliteFloorSubjects()) {
      expect(await subject.bulk(200), subject.name).toBeGreaterThan(0);
      expect(await subject.single(20), subject.name).toBeGreaterThan(0);
      expect(await subject.processing(200, 10), subject.name).toBeGreaterThan(0);
      const samples = await subject.latency(5);
      expect(samples, subject.name).toHaveLength(5);
    }
  });
});
