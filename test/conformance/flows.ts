/**
 * Flows (`Backend.enqueueFlow` / `flow`, rules in src/backend/flows.ts): a parent waits in
 * `waiting-children` until every child has settled; a child's final settle records its outcome
 * with the parent and releases the parent in the same atomic step, by whichever path it settles
 * (complete, fail, lease expiry, cancel); policy "fail" kills the parent when a child fails,
 * "continue" runs it with the failures listed; flows nest; cancelling a parent cancels the
 * children that have not started; children may live in other queues.
 */
import { describe, expect, it } from "vitest";
import type { Backend, EnqueueResult } from "../../src/backend/contract.js";
import { InvalidInputError, UnsupportedByStoreError } from "../../src/core/errors.js";
import type { ChildFailurePolicy, FlowNodeSpec } from "../../src/core/job.js";
import { A, B, LEASE_MS, QUEUE, claim, claimOne, counts, countsOf, errorInfo, mustGet, spec, type SpecInput, type SuiteContext } from "./fixtures.js";

/** A flow as a tree; `children` nest. */
interface Node extends SpecInput {
  onChildFailure?: ChildFailurePolicy;
  children?: Node[];
}

function flatten(root: Node): FlowNodeSpec[] {
  const nodes: FlowNodeSpec[] = [];
  const visit = (node: Node, parent: number | null) => {
    const { children = [], onChildFailure = "fail", ...input } = node;
    const index = nodes.length;
    nodes.push({ spec: spec(input), parent, onChildFailure });
    for (const child of children) visit(child, index);
  };
  visit(root, null);
  return nodes;
}

async function addFlow(b: Backend, root: Node): Promise<EnqueueResult[]> {
  return b.enqueueFlow(flatten(root));
}

/** Claims the job with this id (and only it), failing the test when it is not claimable. */
async function claimId(b: Backend, id: string, queue = QUEUE) {
  const claimed = await claim(b, { queues: [queue], names: [nameOf(id)], limit: 10 });
  const mine = claimed.find((c) => c.job.id === id);
  expect(mine, `job ${id} should be claimable`).toBeDefined();
  // Anything else claimed by this helper goes straight back.
  const others = claimed.filter((c) => c !== mine);
  if (others.length > 0) await b.release(others.map((c) => c.lease));
  return mine!;
}

/** Tests name each job after its id, so claims can target one job. */
function nameOf(id: string): string {
  return `n-${id}`;
}

function node(id: string, extra: Node = {}): Node {
  return { jobId: id, name: nameOf(id), ...extra };
}

async function complete(b: Backend, id: string, result: unknown, queue = QUEUE) {
  const c = await claimId(b, id, queue);
  expect(await b.complete([{ lease: c.lease, result: result as never }])).toEqual(["applied"]);
}

async function kill(b: Backend, id: string, queue = QUEUE) {
  const c = await claimId(b, id, queue);
  expect(await b.fail([{ lease: c.lease, error: errorInfo(`${id} broke`), retryDelayMs: null }])).toEqual(["applied"]);
}

export function flowTests(t: SuiteContext): void {
  it.skipIf(t.factory.capabilities.flows !== "none")(
    'a store without flows (capabilities.flows "none") refuses enqueueFlow and flow with UnsupportedByStoreError, storing nothing',
    async () => {
      await expect(addFlow(t.b, node("p", { children: [node("c1")] }))).rejects.toThrow(UnsupportedByStoreError);
      await expect(t.b.flow("p")).rejects.toThrow(UnsupportedByStoreError);
      expect((await countsOf(t.b)).waiting).toBe(0);
    },
  );

  describe.skipIf(t.factory.capabilities.flows === "none")(t.factory.capabilities.flows === "none" ? "flows [needs flows]" : "flows", () => {
    it("stores the whole flow at once: the parent waits in waiting-children and is not claimable, children wait", async () => {
      const results = await addFlow(t.b, node("p", { children: [node("c1", { data: { n: 1 } }), node("c2", { data: { n: 2 } })] }));
      expect(results).toEqual([
        { id: "p", duplicate: false },
        { id: "c1", duplicate: false },
        { id: "c2", duplicate: false },
      ]);
      expect((await mustGet(t.b, "p")).state).toBe("waiting-children");
      expect(await countsOf(t.b)).toEqual(counts({ waiting: 2, "waiting-children": 1 }));
      expect(await claim(t.b, { names: [nameOf("p")] })).toEqual([]);
      expect((await mustGet(t.b, "c1")).parent).toEqual({ id: "p", queue: QUEUE });
      expect(await t.b.list({ queue: QUEUE, state: "waiting-children" })).toMatchObject([{ id: "p" }]);
      expect(await t.b.flow("p")).toEqual({
        parent: null,
        onChildFailure: "fail",
        pendingChildren: 2,
        children: [
          { id: "c1", queue: QUEUE, name: nameOf("c1"), state: "waiting", settled: false, result: null, error: null },
          { id: "c2", queue: QUEUE, name: nameOf("c2"), state: "waiting", settled: false, result: null, error: null },
        ],
      });
      expect(await t.b.flow("c1")).toEqual({ parent: { id: "p", queue: QUEUE }, onChildFailure: null, pendingChildren: 0, children: [] });
      expect(await t.b.flow("nope")).toBeNull();
      expect(await t.b.flow("p", "another-queue")).toBeNull();
    });

    it("the parent becomes claimable only when its last child completes, and reads every child's result", async () => {
      await addFlow(t.b, node("p", { children: [node("c1"), node("c2")] }));
      await complete(t.b, "c1", { part: 1 });
      expect((await mustGet(t.b, "p")).state).toBe("waiting-children");
      expect((await t.b.flow("p"))!.pendingChildren).toBe(1);
      expect(await claim(t.b, { names: [nameOf("p")] })).toEqual([]);
      await complete(t.b, "c2", { part: 2 });
      const parent = await claimId(t.b, "p");
      expect(parent.job.state).toBe("active");
      const flow = (await t.b.flow("p"))!;
      expect(flow.pendingChildren).toBe(0);
      expect(flow.children.map((c) => [c.id, c.state, c.settled, c.result, c.error])).toEqual([
        ["c1", "completed", true, { part: 1 }, null],
        ["c2", "completed", true, { part: 2 }, null],
      ]);
    });

    it("a child that is retried does not release the parent; only its final settle does", async () => {
      await addFlow(t.b, node("p", { children: [node("c1", { attempts: 2 })] }));
      const first = await claimId(t.b, "c1");
      await t.b.fail([{ lease: first.lease, error: errorInfo("flaky"), retryDelayMs: 0 }]);
      expect((await mustGet(t.b, "p")).state).toBe("waiting-children");
      await complete(t.b, "c1", "ok");
      await claimId(t.b, "p");
    });

    it('policy "fail" (the default): a dead child makes the parent dead at once; the other children carry on', async () => {
      await addFlow(t.b, node("p", { children: [node("c1"), node("c2")] }));
      await kill(t.b, "c1");
      const parent = await mustGet(t.b, "p");
      expect(parent.state).toBe("dead");
      expect(parent.error).toMatchObject({ name: "ChildFailedError", message: expect.stringContaining("c1") as string });
      expect(parent.finishedAt).toBe(await t.b.now());
      expect(await claim(t.b, { names: [nameOf("p")] })).toEqual([]);
      await complete(t.b, "c2", "late");
      expect((await mustGet(t.b, "p")).state).toBe("dead");
      const flow = (await t.b.flow("p"))!;
      expect(flow.children.map((c) => [c.id, c.state])).toEqual([
        ["c1", "dead"],
        ["c2", "completed"],
      ]);
      expect(flow.children[0]!.error).toMatchObject({ message: "c1 broke" });
    });

    it('policy "continue": the parent runs once every child has settled, with the failures listed', async () => {
      await addFlow(t.b, node("p", { onChildFailure: "continue", children: [node("c1"), node("c2")] }));
      await kill(t.b, "c1");
      expect((await mustGet(t.b, "p")).state).toBe("waiting-children");
      await complete(t.b, "c2", { ok: true });
      await claimId(t.b, "p");
      const children = (await t.b.flow("p"))!.children;
      expect(children.map((c) => [c.id, c.state, c.result])).toEqual([
        ["c1", "dead", null],
        ["c2", "completed", { ok: true }],
      ]);
      expect(children[0]!.error).toMatchObject({ name: "Error", message: "c1 broke" });
    });

    it("a child whose worker crashed settles through the rescuer: its lease expiry (dead at last attempt) releases the parent in the same step", async () => {
      await addFlow(t.b, node("p", { onChildFailure: "continue", children: [node("c1", { attempts: 1 }), node("c2", { attempts: 2 })] }));
      await claimId(t.b, "c1");
      await claimId(t.b, "c2");
      // Both workers die; nothing settles until the leases run out.
      t.clock.advance(LEASE_MS + 1);
      const rescued = await t.b.rescueExpired();
      expect(rescued.map((r) => [r.id, r.state]).sort()).toEqual([
        ["c1", "dead"],
        ["c2", "waiting"],
      ]);
      expect((await mustGet(t.b, "p")).state).toBe("waiting-children");
      await complete(t.b, "c2", "second try");
      await claimId(t.b, "p");
      expect((await t.b.flow("p"))!.children.map((c) => c.state)).toEqual(["dead", "completed"]);
    });

    it("nested flows: a child with children waits for them, then runs, then releases its own parent", async () => {
      await addFlow(t.b, node("root", { children: [node("mid", { children: [node("leaf1"), node("leaf2")] }), node("side")] }));
      expect((await mustGet(t.b, "mid")).state).toBe("waiting-children");
      expect((await mustGet(t.b, "mid")).parent).toEqual({ id: "root", queue: QUEUE });
      await complete(t.b, "side", "s");
      await complete(t.b, "leaf1", 1);
      expect(await claim(t.b, { names: [nameOf("mid"), nameOf("root")] })).toEqual([]);
      await complete(t.b, "leaf2", 2);
      expect((await mustGet(t.b, "root")).state).toBe("waiting-children");
      expect((await t.b.flow("mid"))!.children.map((c) => c.result)).toEqual([1, 2]);
      await complete(t.b, "mid", "m");
      await claimId(t.b, "root");
      expect((await t.b.flow("root"))!.children.map((c) => [c.id, c.result])).toEqual([
        ["mid", "m"],
        ["side", "s"],
      ]);
    });

    it('nested flows, policy "fail": a dead grandchild kills its parent, which kills the root', async () => {
      await addFlow(t.b, node("root", { children: [node("mid", { children: [node("leaf")] })] }));
      await kill(t.b, "leaf");
      expect((await mustGet(t.b, "mid")).state).toBe("dead");
      expect((await mustGet(t.b, "root")).state).toBe("dead");
      expect((await mustGet(t.b, "root")).error?.message).toContain("mid");
    });

    it("a parent waits for its own delay too: released early it stays scheduled until its run time", async () => {
      await addFlow(t.b, node("p", { delayMs: 60_000, children: [node("c1")] }));
      await complete(t.b, "c1", null);
      expect((await mustGet(t.b, "p")).state).toBe("scheduled");
      expect(await claim(t.b, { names: [nameOf("p")] })).toEqual([]);
      t.clock.advance(60_000);
      await claimId(t.b, "p");
    });

    it("cancelling a parent cancels its children that have not started (nested too); a running child carries on", async () => {
      await addFlow(t.b, node("p", { children: [node("running"), node("waiting"), node("mid", { children: [node("leaf")] })] }));
      const running = await claimId(t.b, "running");
      expect(await t.b.cancel("p")).toBe("cancelled");
      expect((await mustGet(t.b, "p")).state).toBe("cancelled");
      expect((await mustGet(t.b, "waiting")).state).toBe("cancelled");
      expect((await mustGet(t.b, "mid")).state).toBe("cancelled");
      expect((await mustGet(t.b, "leaf")).state).toBe("cancelled");
      expect((await mustGet(t.b, "running")).state).toBe("active");
      expect(await t.b.complete([{ lease: running.lease, result: "done anyway" }])).toEqual(["applied"]);
      expect((await mustGet(t.b, "p")).state).toBe("cancelled");
      expect(await claim(t.b, { names: ["n-p", "n-waiting", "n-mid", "n-leaf"], limit: 10 })).toEqual([]);
      expect((await t.b.flow("p"))!.children.map((c) => [c.id, c.state])).toEqual([
        ["running", "completed"],
        ["waiting", "cancelled"],
        ["mid", "cancelled"],
      ]);
    });

    it('cancelling a child counts as its failure: policy "fail" kills the parent', async () => {
      await addFlow(t.b, node("p", { children: [node("c1"), node("c2")] }));
      expect(await t.b.cancel("c1")).toBe("cancelled");
      expect((await mustGet(t.b, "p")).state).toBe("dead");
    });

    it("replaying a dead child does not release its parent a second time", async () => {
      await addFlow(t.b, node("p", { onChildFailure: "continue", children: [node("c1"), node("c2"), node("c3")] }));
      await kill(t.b, "c1");
      expect(await t.b.replay("c1")).toBe("replayed");
      await complete(t.b, "c1", "second life");
      expect((await t.b.flow("p"))!.pendingChildren).toBe(2);
      await complete(t.b, "c2", 2);
      expect((await mustGet(t.b, "p")).state).toBe("waiting-children");
      await complete(t.b, "c3", 3);
      await claimId(t.b, "p");
      expect((await t.b.flow("p"))!.children.map((c) => [c.state, c.result])).toEqual([
        ["completed", "second life"],
        ["completed", 2],
        ["completed", 3],
      ]);
    });

    it("a flow whose ids exist already is refused whole: nothing stored, the duplicates flagged", async () => {
      await t.b.enqueue([spec({ jobId: "c2" })]);
      const results = await addFlow(t.b, node("p", { children: [node("c1"), node("c2")] }));
      expect(results).toEqual([
        { id: "p", duplicate: false },
        { id: "c1", duplicate: false },
        { id: "c2", duplicate: true },
      ]);
      expect(await t.b.get("p")).toBeNull();
      expect(await t.b.get("c1")).toBeNull();
      expect(await countsOf(t.b)).toEqual(counts({ waiting: 1 }));
    });

    it("bad flows are refused with InvalidInputError and store nothing", async () => {
      const retained = flatten(node("p", { children: [node("c1", { removeOnComplete: true })] }));
      await expect(t.b.enqueueFlow(retained)).rejects.toThrow(InvalidInputError);
      const twice = flatten(node("p", { children: [node("c1"), node("c1")] }));
      await expect(t.b.enqueueFlow(twice)).rejects.toThrow(/appears twice/);
      const windowed = flatten(node("p", { children: [node("c1", { dedup: { key: "k", ttlMs: 1000 } })] }));
      await expect(t.b.enqueueFlow(windowed)).rejects.toThrow(/dedup/);
      await expect(t.b.enqueueFlow([])).rejects.toThrow(InvalidInputError);
      expect(await t.b.list()).toEqual([]);
    });

    it("a flow of one job (no children) is an ordinary job", async () => {
      await addFlow(t.b, node("solo"));
      await claimId(t.b, "solo");
      expect(await t.b.flow("solo")).toEqual({ parent: null, onChildFailure: null, pendingChildren: 0, children: [] });
    });

    it.skipIf(t.factory.capabilities.flows !== "across-queues")("children may live in other queues (needs capabilities.flows across-queues)", async () => {
      await addFlow(t.b, node("p", { children: [node("c1", { queue: "images" }), node("c2", { queue: "mail" })] }));
      expect((await mustGet(t.b, "c1")).parent).toEqual({ id: "p", queue: QUEUE });
      await complete(t.b, "c1", "thumb", "images");
      await complete(t.b, "c2", "sent", "mail");
      await claimId(t.b, "p");
      expect((await t.b.flow("p"))!.children.map((c) => [c.queue, c.result])).toEqual([
        ["images", "thumb"],
        ["mail", "sent"],
      ]);
    });

    it.skipIf(t.factory.capabilities.flows !== "within-queue")('a child in another queue is refused where capabilities.flows is "within-queue"', async () => {
      await expect(addFlow(t.b, node("p", { children: [node("c1", { queue: "images" })] }))).rejects.toThrow(/within-queue/);
    });

    it("children settling at once on two connections release the parent exactly once", async () => {
      const other = t.factory.openSecond ? await t.second() : t.b;
      const ids = Array.from({ length: 12 }, (_, i) => `c${i}`);
      await addFlow(t.b, node("p", { children: ids.map((id) => node(id)) }));
      const claimed = await claim(t.b, { names: ids.map(nameOf), limit: 12, worker: A });
      expect(claimed).toHaveLength(12);
      await Promise.all(claimed.map((c, i) => (i % 2 === 0 ? t.b : other).complete([{ lease: c.lease, result: i }])));
      expect((await t.b.flow("p"))!.pendingChildren).toBe(0);
      const parent = await claimOne(t.b, { names: [nameOf("p")], worker: B });
      expect(parent.job.id).toBe("p");
    });
  });
}
