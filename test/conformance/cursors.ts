/**
 * Keyset pages in both directions (`page.after` and the reverse cursor `page.before`): the same
 * pages as offsets, filters kept, and no job shown twice or skipped while jobs are added and
 * taken between pages.
 */
import { describe, expect } from "vitest";
import type { Backend, ListFilter } from "../../src/backend/contract.js";
import { claim, enqueueMany, enqueueOne, itNeeds, type SuiteContext } from "./fixtures.js";

const Q = "paged";

/** Walks `filter` page by page (bounded), forwards from the newest or backwards from `from`. */
async function walk(b: Backend, filter: ListFilter, limit: number, direction: "older" | "newer", from?: string): Promise<string[][]> {
  const pages: string[][] = [];
  let cursor = from;
  for (let i = 0; i < 200; i++) {
    const cursorPage = cursor === undefined ? {} : direction === "older" ? { after: cursor } : { before: cursor };
    const page = (await b.list(filter, { limit, ...cursorPage })).map((j) => j.id);
    if (page.length === 0) break;
    pages.push(page);
    cursor = direction === "older" ? page.at(-1) : page[0];
  }
  return pages;
}

export function cursorTests(t: SuiteContext): void {
  const test = itNeeds(t, ["jobRecords"]);
  describe("list: keyset pages both ways", () => {
    test("the reverse cursor gives back the previous pages, newest first, with offsets and filters kept", async () => {
      // Fast-lane jobs, prioritised ones and delayed-then-due ones: every place a store keeps waiting jobs.
      await enqueueMany(t.b, 12, (i) => ({
        queue: Q,
        name: i % 3 === 0 ? "odd" : "n",
        ...(i % 4 === 1 ? { priority: 5 } : {}),
        ...(i % 5 === 2 ? { delayMs: 1_000 } : {}),
      }));
      t.clock.advance(2_000);
      const all = (await t.b.list({ queue: Q }, { limit: 100 })).map((j) => j.id);
      expect(all).toHaveLength(12);
      const forward = await walk(t.b, { queue: Q }, 5, "older");
      expect(forward.flat()).toEqual(all);
      // Back from the last page's first job: the pages before it, each newest first.
      const back = await walk(t.b, { queue: Q }, 5, "newer", forward.at(-1)![0]);
      expect(back.flat().length).toBe(10);
      expect(back.reverse().flat()).toEqual(all.slice(0, 10));
      expect((await t.b.list({ queue: Q }, { before: all[6]!, limit: 2 })).map((j) => j.id)).toEqual(all.slice(4, 6));
      expect((await t.b.list({ queue: Q }, { before: all[6]!, limit: 2, offset: 1 })).map((j) => j.id)).toEqual(all.slice(3, 5));
      expect(await t.b.list({ queue: Q }, { before: all[0]! })).toEqual([]);
      // Filters apply before the cursor too: state and name.
      const [taken] = await claim(t.b, { queues: [Q], names: ["n"] });
      const waiting = all.filter((id) => id !== taken!.job.id);
      expect((await t.b.list({ queue: Q, state: "waiting" }, { before: all[11]!, limit: 100 })).map((j) => j.id)).toEqual(
        waiting.slice(0, waiting.indexOf(all[11]!)),
      );
      const odd = (await t.b.list({ queue: Q, name: "odd" }, { limit: 100 })).map((j) => j.id);
      expect((await t.b.list({ queue: Q, name: "odd" }, { before: odd.at(-1)!, limit: 100 })).map((j) => j.id)).toEqual(odd.slice(0, -1));
      expect((await walk(t.b, { queue: Q, state: "waiting" }, 3, "older")).flat()).toEqual(waiting);
    });

    test("no job is shown twice or skipped while jobs are enqueued and claimed between pages", async () => {
      const initial = await enqueueMany(t.b, 120, () => ({ queue: Q }));
      const filter: ListFilter = { queue: Q, state: "waiting" };
      const newest = (await t.b.list(filter, { limit: 1000 })).map((j) => j.id);
      expect(newest).toHaveLength(120);
      const seen: string[] = [];
      const added: string[] = [];
      const taken = new Set<string>();
      let cursor: string | undefined;
      for (let i = 0; i < 100; i++) {
        const page = (await t.b.list(filter, { limit: 7, ...(cursor ? { after: cursor } : {}) })).map((j) => j.id);
        if (page.length === 0) break;
        seen.push(...page);
        cursor = page.at(-1);
        // Between pages: new jobs arrive (newer than every cursor) and workers take the oldest.
        added.push(...(await enqueueMany(t.b, 3, () => ({ queue: Q }))));
        for (const c of await claim(t.b, { queues: [Q], limit: 2 })) taken.add(c.job.id);
      }
      expect(new Set(seen).size).toBe(seen.length);
      // Every initial job still waiting when its page came is shown, in order; none of the new ones.
      const expected = newest.filter((id) => seen.includes(id) || !taken.has(id));
      expect(seen).toEqual(expected);
      expect(seen.some((id) => added.includes(id))).toBe(false);
      expect(initial.every((id) => seen.includes(id) || taken.has(id))).toBe(true);

      // Back up from the oldest shown job to the top: everything still waiting above it, the new jobs too, once.
      const back = (await walk(t.b, filter, 7, "newer", seen.at(-1))).reverse().flat();
      expect(new Set(back).size).toBe(back.length);
      // (The cursor job itself may have been taken since: it still orders the queue.)
      const order = (await t.b.list({ queue: Q }, { limit: 1000 })).map((j) => j.id);
      const now = (await t.b.list(filter, { limit: 1000 })).map((j) => j.id);
      expect(back).toEqual(now.filter((id) => order.indexOf(id) < order.indexOf(seen.at(-1)!)));
      expect(added.filter((id) => !taken.has(id)).every((id) => back.includes(id))).toBe(true);
    });

    test("refuses a reverse cursor without a queue, with page.after, or whose job is gone", async () => {
      const id = await enqueueOne(t.b, { queue: Q });
      const other = await enqueueOne(t.b, { queue: "elsewhere" });
      await expect(t.b.list({}, { before: id })).rejects.toThrow(/needs filter.queue/);
      await expect(t.b.list({ queue: Q }, { before: id, after: id })).rejects.toThrow(/exclude each other/);
      await expect(t.b.list({ queue: Q }, { before: other })).rejects.toThrow(/start again from the first page/);
      await expect(t.b.list({ queue: Q }, { before: "never-there" })).rejects.toThrow(/page.before/);
    });
  });
}
