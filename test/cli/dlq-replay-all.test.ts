/**
 * `conveyor dlq replay --all` (replayAllDead) against a real SQLite store while the dead set
 * changes under it: replayed jobs dying again, and someone else replaying some at the same time.
 * Paging by offset skipped jobs then; every job dead at the start must be replayed or reported.
 */
import { afterAll, describe, expect, it } from "vitest";
import type { Backend, ReplayResult } from "../../src/backend/contract.js";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { replayAllDead } from "../../src/cli/dlq.js";
import { Queue } from "../../src/index.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs();
afterAll(() => temp.removeAll());

const worker = { id: "w", host: "h", pid: 1 };
const boom = { name: "Error", message: "boom", stack: "Error: boom" };

describe("dlq replay --all", () => {
  it("replays every job dead at the start while replayed jobs die again and someone else replays some meanwhile", { timeout: 60_000 }, async () => {
    const backend = new SqliteBackend({ path: await temp.file("dlq.db") });
    try {
      // 600 dead jobs, each with a name of its own so one job can be claimed back by name.
      const count = 600;
      const names = Array.from({ length: count }, (_, i) => `j${i}`);
      await new Queue("mail", { backend }).addBulk(names.map((name) => ({ name, data: {} })));
      const claimed = await backend.claim({ queues: ["mail"], names, worker, limit: count, leaseMs: 60_000 });
      expect(claimed).toHaveLength(count);
      await backend.fail(claimed.map((c) => ({ lease: c.lease, error: boom, retryDelayMs: null })));
      const nameOf = new Map((await backend.list({ queue: "mail", state: "dead" }, { limit: 1000 })).map((j) => [j.id, j.name]));
      expect(nameOf.size).toBe(count);

      // The first page's jobs die again right after their replay (a worker took them and failed
      // them for good); after the second listing, another operator replays ten of those.
      const diedAgain: string[] = [];
      const byOthers: string[] = [];
      let listings = 0;
      const store: Backend = Object.create(backend) as Backend;
      store.replay = async (id: string, queue?: string): Promise<ReplayResult> => {
        const outcome = await backend.replay(id, queue);
        if (outcome === "replayed" && diedAgain.length < 500) {
          const [again] = await backend.claim({ queues: ["mail"], names: [nameOf.get(id)!], worker, limit: 1, leaseMs: 60_000 });
          await backend.fail([{ lease: again!.lease, error: boom, retryDelayMs: null }]);
          diedAgain.push(id);
        }
        return outcome;
      };
      store.list = async (...args: Parameters<Backend["list"]>) => {
        const page = await backend.list(...args);
        if (++listings === 2) {
          for (const id of diedAgain.slice(0, 10)) {
            expect(await backend.replay(id, "mail")).toBe("replayed");
            byOthers.push(id);
          }
        }
        return page;
      };

      const result = await replayAllDead(store, "mail", null);
      expect(byOthers).toHaveLength(10);
      expect(result.skipped).toEqual([]);
      expect(result.replayed).toBe(count);
      // Dead now: only the jobs that died again and nobody else replayed (each replayed once).
      const stillDead = new Set((await backend.list({ queue: "mail", state: "dead" }, { limit: 1000 })).map((j) => j.id));
      expect(stillDead).toEqual(new Set(diedAgain.filter((id) => !byOthers.includes(id))));
    } finally {
      await backend.close();
    }
  });

  it("without a queue replays every queue's dead jobs, and steps back when the cursor's job is deleted meanwhile", { timeout: 60_000 }, async () => {
    const backend = new SqliteBackend({ path: await temp.file("dlq.db") });
    try {
      for (const [queue, count] of [
        ["mail", 700],
        ["other", 3],
      ] as const) {
        await new Queue(queue, { backend }).addBulk(Array.from({ length: count }, () => ({ name: "welcome", data: {} })));
        const claimed = await backend.claim({ queues: [queue], names: ["welcome"], worker, limit: count, leaseMs: 60_000 });
        await backend.fail(claimed.map((c) => ({ lease: c.lease, error: boom, retryDelayMs: null })));
      }
      // After the first page of "mail", an operator deletes its last job: the next page's cursor.
      let removed: string | null = null;
      const store: Backend = Object.create(backend) as Backend;
      store.list = async (...args: Parameters<Backend["list"]>) => {
        const page = await backend.list(...args);
        if (removed === null && args[0]?.queue === "mail" && page.length > 0) {
          removed = page.at(-1)!.id;
          expect(await backend.remove(removed, "mail")).toBe("removed");
        }
        return page;
      };
      const result = await replayAllDead(store, undefined, null);
      expect(result.replayed).toBe(702);
      expect(result.skipped).toEqual([{ id: removed, outcome: "not-found" }]);
      const stats = Object.fromEntries((await backend.stats()).map((s) => [s.queue, s.counts]));
      expect(stats.mail).toMatchObject({ dead: 0, waiting: 699 });
      expect(stats.other).toMatchObject({ dead: 0, waiting: 3 });
    } finally {
      await backend.close();
    }
  });
});
