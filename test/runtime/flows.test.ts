/**
 * Flows end to end on SQLite: `queue.addFlow` with children in two queues, real Workers running
 * them, the parent reading its children through `ctx.children()`, the "continue" policy with a
 * failing child, and the flow as `conveyor jobs show` (a real CLI process) and the HTTP API show it.
 */
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { InvalidInputError, Queue, silentLogger, UnrecoverableError, Worker, type ChildOutcome } from "../../src/index.js";
import { runCli } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";
import { startServer, type Harness } from "../http/harness.js";

const temp = new TempDirs();
const open: Array<{ close(): Promise<unknown> }> = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
});
afterAll(() => temp.removeAll());

async function store(): Promise<{ backend: SqliteBackend; path: string }> {
  const path = await temp.file("flows.db");
  const backend = new SqliteBackend({ path });
  open.push(backend);
  return { backend, path };
}

function worker(backend: SqliteBackend, queues: string[], handlers: ConstructorParameters<typeof Worker>[0]["handlers"]): Worker {
  const w = new Worker({ backend, queues, handlers, logger: silentLogger, pollIntervalMs: 50, concurrency: 4 });
  open.push({ close: () => w.close({ force: true }) });
  return w;
}

describe("flows with real workers", () => {
  it("the parent runs after its children (in two queues) and reads their results with ctx.children()", async () => {
    const { backend } = await store();
    const reports = new Queue("reports", { backend });
    const added = await reports.addFlow({
      name: "merge",
      data: { report: 7 },
      children: [
        { name: "render", data: { page: 1 } },
        { name: "render", data: { page: 2 } },
        { name: "thumbnail", queue: "images", data: { page: 1 }, children: [{ name: "fetch", queue: "images", data: { url: "a" } }] },
      ],
    });
    expect(added).toMatchObject({
      queue: "reports",
      duplicate: false,
      children: [{ queue: "reports" }, { queue: "reports" }, { queue: "images", children: [{ queue: "images" }] }],
    });
    expect((await reports.getJob(added.id))!.state).toBe("waiting-children");

    let seen: ChildOutcome[] = [];
    const order: string[] = [];
    worker(backend, ["reports"], {
      render: async (job) => {
        order.push("render");
        return { page: (job.data as { page: number }).page, html: "<p>" };
      },
      merge: async (_job, ctx) => {
        order.push("merge");
        seen = await ctx.children();
        return { pages: seen.length };
      },
    });
    worker(backend, ["images"], {
      fetch: async () => {
        order.push("fetch");
        return "bytes";
      },
      thumbnail: async (_job, ctx) => {
        order.push("thumbnail");
        const [fetched] = await ctx.children();
        return { from: fetched!.result };
      },
    });
    await waitFor(async () => (await reports.getJob(added.id))!.state === "completed", { timeoutMs: 20_000 });
    expect(order.indexOf("merge")).toBe(order.length - 1);
    expect(order.indexOf("fetch")).toBeLessThan(order.indexOf("thumbnail"));
    expect(seen.map((c) => [c.queue, c.name, c.state, c.result])).toEqual([
      ["reports", "render", "completed", { page: 1, html: "<p>" }],
      ["reports", "render", "completed", { page: 2, html: "<p>" }],
      ["images", "thumbnail", "completed", { from: "bytes" }],
    ]);
    expect((await reports.getJob(added.id))!.result).toEqual({ pages: 3 });
  });

  it('"continue": the parent runs with the dead child listed; the default "fail" never runs it', async () => {
    const { backend } = await store();
    const q = new Queue("q", { backend });
    const tolerant = await q.addFlow({
      name: "sum",
      onChildFailure: "continue",
      children: [
        { name: "part", data: { ok: true } },
        { name: "part", data: { ok: false } },
      ],
    });
    const strict = await q.addFlow({ name: "sum", children: [{ name: "part", data: { ok: false } }] });
    let listed: ChildOutcome[] = [];
    const ran: string[] = [];
    worker(backend, ["q"], {
      part: async (job) => {
        if (!(job.data as { ok: boolean }).ok) throw new UnrecoverableError("bad part");
        return 1;
      },
      sum: async (job, ctx) => {
        ran.push(job.id);
        listed = await ctx.children();
        return listed.filter((c) => c.state === "completed").length;
      },
    });
    await waitFor(async () => (await q.getJob(tolerant.id))!.state === "completed" && (await q.getJob(strict.id))!.state === "dead", { timeoutMs: 20_000 });
    expect(ran).toEqual([tolerant.id]);
    expect(listed.map((c) => [c.state, c.error?.message ?? null])).toEqual([
      ["completed", null],
      ["dead", "bad part"],
    ]);
    expect((await q.getJob(strict.id))!.error).toMatchObject({ name: "ChildFailedError" });
  });

  it("addFlow says on every node whether it stored the flow: false when a child's id existed, though the root is no duplicate", async () => {
    const { backend } = await store();
    const reports = new Queue("reports", { backend });
    const first = await reports.addFlow({ name: "merge", options: { jobId: "r1" }, children: [{ name: "render", options: { jobId: "c1" } }] });
    expect(first).toMatchObject({ id: "r1", duplicate: false, stored: true, children: [{ id: "c1", duplicate: false, stored: true }] });
    const again = await reports.addFlow({ name: "merge", options: { jobId: "r2" }, children: [{ name: "render", options: { jobId: "c1" } }] });
    expect(again).toMatchObject({ id: "r2", duplicate: false, stored: false, children: [{ id: "c1", duplicate: true, stored: false }] });
    expect(await reports.getJob("r2")).toBeNull();
  });

  it("addFlow refuses bad flows with InvalidInputError and stores nothing", async () => {
    const { backend } = await store();
    const q = new Queue("q", { backend });
    await expect(q.addFlow({ name: "p", queue: "other" })).rejects.toThrow(/root of a flow/);
    await expect(q.addFlow({ name: "p", onChildFailure: "ignore" as never, children: [{ name: "c" }] })).rejects.toThrow(/onChildFailure/);
    await expect(q.addFlow({ name: "p", children: [{ name: "bad name!" }] })).rejects.toThrow(/flow.children\[0\]: job name/);
    await expect(q.addFlow({ name: "p", children: [{ name: "c", options: { removeOnFail: true } }] })).rejects.toThrow(InvalidInputError);
    expect(await backend.list()).toEqual([]);
  });

  it("jobs show (CLI) and GET /v1/jobs/{id}/flow show the parent and its children with their states", async () => {
    const { backend, path } = await store();
    const q = new Queue("q", { backend });
    const added = await q.addFlow({
      name: "parent",
      options: { jobId: "p-1" },
      children: [
        { name: "child", options: { jobId: "c-1" } },
        { name: "child", options: { jobId: "c-2" } },
      ],
    });
    const [claimed] = await backend.claim({ queues: ["q"], names: ["child"], worker: { id: "w", host: "h", pid: 1 }, limit: 1, leaseMs: 60_000 });
    await backend.complete([{ lease: claimed!.lease, result: { done: 1 } }]);

    const shown = await runCli(["jobs", "show", added.id, "--db", `sqlite:${path}`]);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toContain("state        waiting-children");
    expect(shown.stdout).toMatch(/children\s+2, 1 not settled; on a failed child: fail/);
    expect(shown.stdout).toMatch(/c-1\s+q\s+child\s+completed\s+\{"done":1\}/);
    expect(shown.stdout).toMatch(/c-2\s+q\s+child\s+waiting \(not settled\)/);
    const child = await runCli(["jobs", "show", "c-1", "--db", `sqlite:${path}`, "--json"]);
    expect(JSON.parse(child.stdout)).toMatchObject({ id: "c-1", parent: { id: "p-1", queue: "q" }, flow: { parent: { id: "p-1" } } });

    const h: Harness = await startServer(temp, {}, { dbPath: path });
    open.push(h);
    const flow = await h.request("GET", "/v1/jobs/p-1/flow");
    expect(flow.status).toBe(200);
    expect(flow.json).toMatchObject({
      jobId: "p-1",
      parent: null,
      onChildFailure: "fail",
      pendingChildren: 1,
      children: [
        { id: "c-1", state: "completed", settled: true, result: { done: 1 }, links: { self: "/v1/jobs/c-1?queue=q" } },
        { id: "c-2", state: "waiting", settled: false, result: null },
      ],
    });
    const status = await h.request("GET", "/v1/jobs/c-2");
    expect(status.json).toMatchObject({ state: "waiting", parent: { id: "p-1", queue: "q", links: { self: "/v1/jobs/p-1?queue=q" } } });
    expect((await h.request("GET", "/v1/jobs/p-1")).json).toMatchObject({ state: "waiting-children" });
    const stats = await h.request<{ counts: Record<string, number> }>("GET", "/v1/queues/q");
    expect(stats.json.counts).toMatchObject({ "waiting-children": 1, waiting: 1, completed: 1 });
    expect((await h.request("GET", "/v1/jobs/nope/flow")).status).toBe(404);
  });
});
