/**
 * A store slower to acknowledge completions than to hand out jobs: the worker stops claiming once
 * `4 × (concurrency + prefetch)` finished jobs wait for their acknowledgement, instead of running and
 * heartbeating ever more jobs whose outcome it has not stored, and claims again as the
 * acknowledgements come in.
 */
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { Queue, silentLogger, Worker, type Backend } from "../../src/index.js";
import { cleanupRuntimeBackends, RUNTIME_BACKENDS } from "../helpers/runtime-backends.js";
import { waitFor } from "../helpers/wait-for.js";

let store: Backend | null = null;
afterEach(async () => {
  await store?.close();
  store = null;
});
afterAll(cleanupRuntimeBackends);

/**
 * The backend with every completion held until `release()`, and claims counted. Completions do not
 * ride with claims here (`completeAndClaim` off), so held completions leave the claims free to go.
 */
function withHeldCompletions(backend: Backend): { backend: Backend; claimed: () => number; release: () => void } {
  let open!: () => void;
  const gate = new Promise<void>((resolve) => (open = resolve));
  let claimed = 0;
  const wrapped = Object.create(backend) as Backend;
  Object.defineProperty(wrapped, "capabilities", { value: { ...backend.capabilities, completeAndClaim: false } });
  wrapped.claim = async (request) => {
    const jobs = await backend.claim(request);
    claimed += jobs.length;
    return jobs;
  };
  wrapped.complete = async (items) => {
    await gate;
    return backend.complete(items);
  };
  return { backend: wrapped, claimed: () => claimed, release: open };
}

describe.each(RUNTIME_BACKENDS)("on $name", (kind) => {
  it("holds at most four rounds of jobs awaiting their acknowledgement beyond its slots and buffer, and claims again as they come in", async () => {
    store = await kind.open();
    await new Queue("q", { backend: store }).addBulk(Array.from({ length: 40 }, (_, i) => ({ name: "job", data: { i } })));
    const held = withHeldCompletions(store);
    let ran = 0;
    const concurrency = 2;
    const prefetch = 3;
    const worker = new Worker({
      backend: held.backend,
      queues: "q",
      logger: silentLogger,
      concurrency,
      prefetch,
      pollIntervalMs: 20,
      maintenance: false,
      handlers: { job: () => void ran++ },
    });
    try {
      // Every handler returns at once, so each finished job waits on the held completion: 25 of
      // them (the slots and the buffer, and four times that waiting) and then no further claim,
      // poll after poll.
      const bound = 5 * (concurrency + prefetch);
      await waitFor(() => ran >= bound, { description: `${bound} jobs run` });
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(ran).toBe(bound);
      expect(held.claimed()).toBe(bound);
      expect(worker.activeCount).toBe(bound);

      held.release();
      await waitFor(async () => (await store!.stats("q"))[0]?.counts.completed === 40, { description: "every job completed" });
      expect(ran).toBe(40);
    } finally {
      held.release(); // close() waits for the held completions
      await worker.close();
    }
  });
});
