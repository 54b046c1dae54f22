/**
 * ctx.log(line) end to end: a Worker stores the lines before the job's outcome (awaited or not),
 * in order, from a sandboxed handler too; `conveyor jobs show` and `GET /v1/jobs/{id}/logs` show
 * them. The store-level rules (fencing, bounds, deletion) are in test/conformance/logs.ts.
 */
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { createServer } from "../../src/http/index.js";
import { Queue, silentLogger, Worker, type WorkerOptions } from "../../src/index.js";
import { runCli } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";

const temp = new TempDirs();
let backend: SqliteBackend;
let dbPath: string;
let queue: Queue;
const workers: Worker[] = [];

function worker(options: Partial<WorkerOptions>): Worker {
  const w = new Worker({ backend, queues: "q", logger: silentLogger, pollIntervalMs: 20, handlers: {}, ...options });
  workers.push(w);
  return w;
}

beforeEach(async () => {
  dbPath = await temp.file("logs.db");
  backend = new SqliteBackend({ path: dbPath });
  queue = new Queue("q", { backend });
});

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.close({ force: true })));
  await backend.close();
});

afterAll(() => temp.removeAll());

const lines = async (id: string) => (await backend.logs(id)).map((l) => `${l.attempt}:${l.line}`);

describe("ctx.log", () => {
  it("stores every line before the outcome, in order, whether awaited or not, across attempts", async () => {
    let appends = 0;
    const append = backend.appendLogs.bind(backend);
    // A slow store: the outcome must still wait for the lines (else the fence refuses them).
    backend.appendLogs = async (lease, batch) => {
      appends++;
      await new Promise((resolve) => setTimeout(resolve, 100));
      return append(lease, batch);
    };
    worker({
      handlers: {
        chatty: async (job, ctx) => {
          void ctx.log(`start of attempt ${job.attempt}`);
          for (let i = 0; i < 50; i++) void ctx.log(`step ${i}`);
          await ctx.log("awaited");
          void ctx.log("last words");
          if (job.attempt === 1) throw new Error("first attempt fails");
          return "done";
        },
      },
    });
    const { id } = await queue.add("chatty", {}, { attempts: 2, backoff: { type: "fixed", delayMs: 0 } });
    await waitFor(async () => (await backend.get(id))?.state === "completed", { timeoutMs: 15_000 });
    const attempt = (n: number) => [`${n}:start of attempt ${n}`, ...Array.from({ length: 50 }, (_, i) => `${n}:step ${i}`), `${n}:awaited`, `${n}:last words`];
    expect(await lines(id)).toEqual([...attempt(1), ...attempt(2)]);
    // Lines of one tick go to the store together: 2 appends per attempt, not 53.
    expect(appends).toBe(4);
  });

  it("a line of a job whose lease was lost is refused and reported, not stored", async () => {
    const refused: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const w = worker({
      handlers: {
        slow: async (_job, ctx) => {
          await ctx.log("before the cancel");
          await gate;
          await ctx.log("after the cancel");
        },
      },
    });
    w.on("job:settle-refused", ({ operation }) => refused.push(operation));
    const { id } = await queue.add("slow", {});
    await waitFor(async () => (await lines(id)).length === 1, { timeoutMs: 15_000 });
    // Cancel the job under the worker: its lease token no longer writes.
    expect(await backend.cancel(id)).toBe("cancelled");
    release();
    await waitFor(() => refused.includes("log"), { timeoutMs: 15_000 });
    expect(await lines(id)).toEqual(["1:before the cancel"]);
  });

  it("works from a sandboxed handler", async () => {
    worker({ sandbox: { module: "test/fixtures/pills.ts" } });
    const { id } = await queue.add("logger", {});
    await waitFor(async () => (await backend.get(id))?.state === "completed", { timeoutMs: 20_000 });
    const stored = await lines(id);
    expect(stored).toHaveLength(2);
    expect(stored[0]).toMatch(/^1:sandbox pid \d+$/);
    expect(stored[0]).not.toBe(`1:sandbox pid ${process.pid}`);
    expect(stored[1]).toBe("1:second line");
  });

  it("shows in `conveyor jobs show` and GET /v1/jobs/{id}/logs", { timeout: 60_000 }, async () => {
    worker({
      handlers: {
        report: async (_job, ctx) => {
          await ctx.log("fetched 3 invoices");
          await ctx.log("multi\nline");
        },
      },
    });
    const { id } = await queue.add("report", {});
    await waitFor(async () => (await backend.get(id))?.state === "completed", { timeoutMs: 15_000 });

    const shown = await runCli(["jobs", "show", id, "--db", `sqlite:${dbPath}`]);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toMatch(/\nlog\n {2}\S+Z {2}#1 {2}fetched 3 invoices\n {2}\S+Z {2}#1 {2}multi\n {6}line/);
    const json = JSON.parse((await runCli(["jobs", "show", id, "--db", `sqlite:${dbPath}`, "--json"])).stdout) as { logs: Array<{ line: string }> };
    expect(json.logs.map((l) => l.line)).toEqual(["fetched 3 invoices", "multi\nline"]);

    const app = await createServer({ backend, apiKeys: false, logger: false });
    try {
      const reply = await app.inject({ method: "GET", url: `/v1/jobs/${id}/logs` });
      expect(reply.statusCode).toBe(200);
      const body = reply.json<{ jobId: string; queue: string; lines: Array<{ at: string; attempt: number; line: string }> }>();
      expect(body).toMatchObject({ jobId: id, queue: "q" });
      expect(body.lines.map((l) => [l.attempt, l.line])).toEqual([
        [1, "fetched 3 invoices"],
        [1, "multi\nline"],
      ]);
      expect(Date.parse(body.lines[0]!.at)).toBeGreaterThan(0);
      expect((await app.inject({ method: "GET", url: `/v1/jobs/${id}/logs?queue=other` })).statusCode).toBe(404);
      expect((await app.inject({ method: "GET", url: `/v1/jobs/nope/logs` })).statusCode).toBe(404);
    } finally {
      await app.close();
    }
  });
});
