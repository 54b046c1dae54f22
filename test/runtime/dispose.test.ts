/**
 * Explicit resource management (Node 22+/24): `await using` on a backend, a queue and a worker
 * closes them, in reverse order, when the block ends — the worker drains its running job first.
 */
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { expect, it } from "vitest";
import { Queue, silentLogger, Worker } from "../../src/index.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const temp = new TempDirs("conveyor-dispose-");

it("await using closes the worker (draining its running job), the queue and the backend when the block ends", async () => {
  const file = await temp.file("jobs.db");
  let finished = 0;
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let outside: SqliteBackend;
  let worker: Worker;
  let jobId: string;
  {
    await using backend = new SqliteBackend({ path: file });
    outside = backend;
    await using queue = new Queue("q", { backend });
    await using w = new Worker({
      backend,
      queues: "q",
      logger: silentLogger,
      pollIntervalMs: 20,
      handlers: {
        slow: async () => {
          await gate;
          finished += 1;
        },
      },
    });
    worker = w;
    const { id } = await queue.add("slow", {});
    jobId = id;
    await waitFor(async () => (await backend.get(id))?.state === "active");
    // The block ends while the handler still waits: the worker's dispose must drain it.
    setTimeout(release, 50);
  }
  expect(finished).toBe(1);
  // The worker's shutdown already ran, and drained: a later close() returns the same result.
  expect(await worker.close()).toEqual({ drained: true, releasedJobIds: [] });
  // The backend was disposed after the worker: it refuses calls…
  await expect(outside.stats()).rejects.toThrow();
  // …and the completion reached the store before it closed.
  const reopened = new SqliteBackend({ path: file });
  try {
    expect((await reopened.get(jobId))?.state).toBe("completed");
  } finally {
    await reopened.close();
    await temp.removeAll();
  }
});
