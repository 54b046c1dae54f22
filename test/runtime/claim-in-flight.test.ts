/**
 * A claim on its way when the worker pauses or shuts down: its jobs are waited for and handed back
 * unstarted (no attempt used), never left active under a lease nothing renews.
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

/** The backend, with its next claim held until `release()` (the store answers later). */
function withHeldClaim(backend: Backend): { backend: Backend; held: () => boolean; release: () => void } {
  let open!: () => void;
  const gate = new Promise<void>((resolve) => (open = resolve));
  let holding = false;
  const wrapped = Object.create(backend) as Backend;
  wrapped.claim = async (request) => {
    holding = true;
    await gate;
    holding = false;
    return backend.claim(request);
  };
  return { backend: wrapped, held: () => holding, release: open };
}

describe.each(RUNTIME_BACKENDS)("on $name", (kind) => {
  for (const how of ["close", "pause"] as const) {
    it(`${how}() waits for a claim already on its way and hands its jobs back unstarted`, async () => {
      store = await kind.open();
      const { id } = await new Queue("q", { backend: store }).add("job", {});
      const held = withHeldClaim(store);
      let ran = 0;
      const worker = new Worker({ backend: held.backend, queues: "q", logger: silentLogger, prefetch: 4, handlers: { job: () => void ran++ } });
      await waitFor(() => held.held());
      const done = how === "close" ? worker.close() : worker.pause();
      let finished = false;
      void done.then(() => (finished = true));
      await new Promise((resolve) => setImmediate(resolve));
      expect(finished).toBe(false); // still waiting for the claim
      held.release();
      await done;
      const job = await store.get(id);
      expect(job?.state).toBe("waiting");
      expect(job?.attempt).toBe(0);
      expect(ran).toBe(0);
      if (how === "pause") await worker.close();
    });
  }
});
