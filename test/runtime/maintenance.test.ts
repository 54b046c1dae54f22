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
});
