import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Queue, type Backend } from "../../src/index.js";
import { Maintenance } from "../../src/maintenance/maintenance.js";
import { createTestBackend } from "../../src/testing/index.js";

let backend: Backend;

beforeEach(() => {
  backend = createTestBackend();
});

afterEach(async () => {
  await backend.close();
});

/** Enqueues `n` jobs on queue "q" and completes them all. */
async function completed(n: number): Promise<void> {
  await new Queue("q", { backend }).addBulk(Array.from({ length: n }, (_, i) => ({ name: "job", data: { i } })));
  const claimed = await backend.claim({ queues: ["q"], names: ["job"], worker: { id: "w", host: "h", pid: 1 }, limit: n, leaseMs: 60_000 });
  expect(claimed).toHaveLength(n);
  await backend.complete(claimed.map((c) => ({ lease: c.lease, result: null })));
}

describe("maintenance", () => {
  it("prunes a backlog bigger than one call's limit in one pass, down to the retention", async () => {
    await completed(120);
    const maintenance = new Maintenance(backend, { retention: { maxCompletedPerQueue: 10, limit: 25 } });
    await maintenance.pruneOnce();
    const [stats] = await backend.stats("q");
    expect(stats!.counts.completed).toBe(10);
  });

  it("prunes the event log to its retention in the same pass, in batches", async () => {
    await completed(30); // 90 events: added, active, completed
    const maintenance = new Maintenance(backend, { eventRetention: { maxEvents: 12, limit: 7 } });
    await maintenance.pruneOnce();
    const page = await backend.readEvents!("0", 1_000);
    expect(page.events).toHaveLength(12);
    expect(page.events.at(-1)?.type).toBe("completed");
  });
});
