/**
 * The settler's batches on a real store: every settle of one turn goes out together, and so do those
 * made while the call before was on its way, except that
 * a batch past SETTLE_CALL_MAX_BYTES of results or error text goes out in several calls, in order
 * (fifty results of 40 MB made one PostgreSQL statement longer than V8's longest string, refused
 * each time it was tried again, and none of those jobs could finish).
 */
import { afterEach, describe, expect, it } from "vitest";
import { openBackend } from "../../src/backend/open.js";
import type { Backend, Completion, Failure } from "../../src/backend/contract.js";
import { SETTLE_CALL_MAX_BYTES, Settler } from "../../src/runtime/settler.js";
import { Queue } from "../../src/index.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs("conveyor-settler-");
const backends: Backend[] = [];
afterEach(async () => {
  for (const b of backends.splice(0)) await b.close();
  await temp.removeAll();
});

const WORKER = { id: "settler-test", host: "h", pid: 1 };

/** A real SQLite store whose complete and fail calls are recorded (the ids of each call). */
async function recordingStore(jobs: number) {
  const backend = await openBackend(`sqlite:${await temp.make()}/s.db`);
  backends.push(backend);
  await backend.migrate();
  await new Queue("q", { backend }).addBulk(Array.from({ length: jobs }, (_, i) => ({ name: "n", data: { i } })));
  const claimed = await backend.claim({ queues: ["q"], names: ["n"], worker: WORKER, limit: jobs, leaseMs: 60_000 });
  expect(claimed).toHaveLength(jobs);
  const calls: Array<{ kind: "complete" | "fail"; ids: string[] }> = [];
  const recording = Object.create(backend) as Backend;
  recording.complete = async (items: readonly Completion[]) => {
    calls.push({ kind: "complete", ids: items.map((i) => i.lease.jobId) });
    return backend.complete(items);
  };
  recording.fail = async (items: readonly Failure[]) => {
    calls.push({ kind: "fail", ids: items.map((i) => i.lease.jobId) });
    return backend.fail(items);
  };
  return { backend, recording, calls, leases: claimed.map((c) => c.lease) };
}

describe("Settler", () => {
  it("sends the completions of one turn in one call while they are small", async () => {
    const { recording, calls, leases } = await recordingStore(5);
    const settler = new Settler(recording);
    const results = await Promise.all(leases.map((lease) => settler.complete({ lease, result: { ok: true } }, 11)));
    expect(results).toEqual(["applied", "applied", "applied", "applied", "applied"]);
    expect(calls).toEqual([{ kind: "complete", ids: leases.map((l) => l.jobId) }]);
  });

  it("sends the completions made while a call is on its way together in the next call, not a call per turn", async () => {
    const { recording, calls, leases } = await recordingStore(5);
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const held = Object.create(recording) as Backend;
    held.complete = async (items: readonly Completion[]) => {
      const answer = recording.complete(items);
      await gate;
      return answer;
    };
    const settler = new Settler(held);
    const results = [settler.complete({ lease: leases[0]!, result: null })];
    await new Promise((resolve) => setImmediate(resolve));
    // The first call is on its way; four more completions come in four turns, as handlers that
    // await their own I/O finish.
    for (const lease of leases.slice(1)) {
      results.push(settler.complete({ lease, result: null }));
      await new Promise((resolve) => setImmediate(resolve));
    }
    open();
    expect(await Promise.all(results)).toEqual(["applied", "applied", "applied", "applied", "applied"]);
    expect(calls.map((c) => c.ids)).toEqual([[leases[0]!.jobId], leases.slice(1).map((l) => l.jobId)]);
  });

  it("splits one turn's completions past SETTLE_CALL_MAX_BYTES of results into calls in order, each applied", async () => {
    const { backend, recording, calls, leases } = await recordingStore(5);
    const settler = new Settler(recording);
    // Results measured at 40% of the bound each: two fit in one call, a third does not.
    const size = Math.floor(SETTLE_CALL_MAX_BYTES * 0.4);
    const results = await Promise.all(leases.map((lease, i) => settler.complete({ lease, result: i }, size)));
    expect(results).toEqual(["applied", "applied", "applied", "applied", "applied"]);
    const ids = leases.map((l) => l.jobId);
    expect(calls).toEqual([
      { kind: "complete", ids: ids.slice(0, 2) },
      { kind: "complete", ids: ids.slice(2, 4) },
      { kind: "complete", ids: ids.slice(4) },
    ]);
    for (const [i, id] of ids.entries()) expect(await backend.get(id)).toMatchObject({ state: "completed", result: i });
  });

  it("splits failures by the length of their error text, and sends one larger than the bound alone", async () => {
    const { backend, recording, calls, leases } = await recordingStore(3);
    const settler = new Settler(recording);
    const huge = "x".repeat(SETTLE_CALL_MAX_BYTES + 1);
    const small = { name: "Error", message: "small", stack: null };
    const results = await Promise.all([
      settler.fail({ lease: leases[0]!, error: small, retryDelayMs: null }),
      settler.fail({ lease: leases[1]!, error: { name: "Error", message: huge, stack: null }, retryDelayMs: null }),
      settler.fail({ lease: leases[2]!, error: small, retryDelayMs: null }),
    ]);
    expect(results).toEqual(["applied", "applied", "applied"]);
    const ids = leases.map((l) => l.jobId);
    expect(calls).toEqual([
      { kind: "fail", ids: [ids[0]] },
      { kind: "fail", ids: [ids[1]] },
      { kind: "fail", ids: [ids[2]] },
    ]);
    for (const id of ids) expect((await backend.get(id))!.state).toBe("dead");
  });
});
