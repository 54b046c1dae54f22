/**
 * One job over real HTTP: status, Server-Sent Events (a real streaming client), resume with
 * Last-Event-ID, cancel (including a running job held by a worker in another process), replay.
 */
import { readFileSync, existsSync } from "node:fs";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import type { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { silentLogger, Worker, type Handler, type Lease } from "../../src/index.js";
import { spawnCli, type Spawned } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";
import { openStream, startServer, type Harness, type Obj, type SseClient } from "./harness.js";

const temp = new TempDirs();
let h: Harness | null = null;
const workers: Worker[] = [];
const streams: SseClient[] = [];
const children: Spawned[] = [];
afterEach(async () => {
  for (const s of streams.splice(0)) s.close();
  for (const c of children.splice(0)) if (c.child.exitCode === null) c.child.kill("SIGKILL");
  await Promise.all(workers.splice(0).map((w) => w.close({ force: true })));
  await h?.close();
  h = null;
});
afterAll(() => temp.removeAll());

const WORKER = { id: "test-worker", host: "test", pid: 1 };

async function enqueue(body: Obj, queue = "q"): Promise<string> {
  const r = await h!.request<{ jobId: string }>("POST", `/v1/queues/${queue}/jobs`, { body });
  expect(r.status).toBe(202);
  return r.json.jobId;
}

async function claim(name: string): Promise<Lease> {
  const [c] = await h!.backend.claim({ queues: ["q"], names: [name], worker: WORKER, limit: 1, leaseMs: 60_000 });
  expect(c).toBeDefined();
  return c!.lease;
}

function startWorker(handlers: Record<string, Handler>): Worker {
  const w = new Worker({ backend: h!.backend, queues: "q", handlers, pollIntervalMs: 20, logger: silentLogger });
  workers.push(w);
  return w;
}

async function stream(id: string, headers: Record<string, string> = {}): Promise<SseClient> {
  const s = await openStream(`${h!.url}/v1/jobs/${encodeURIComponent(id)}/events`, headers);
  streams.push(s);
  return s;
}

const states = (s: SseClient) => s.events.filter((e) => e.event === "state").map((e) => e.data.state);

describe("GET /v1/jobs/:id", () => {
  it("shows state, progress, result, error summary, attempts and timings; no payload", async () => {
    h = await startServer(temp);
    const id = await enqueue({ name: "work", data: { secret: "payload" }, options: { attempts: 2 } });
    const lease = await claim("work");
    await h.backend.progress(lease, { pct: 50 });
    const running = await h.request("GET", `/v1/jobs/${id}`);
    expect(running.json).toMatchObject({
      id,
      queue: "q",
      name: "work",
      state: "active",
      finished: false,
      progress: { pct: 50 },
      attempts: { made: 1, max: 2 },
    });
    expect(running.json).not.toHaveProperty("data");
    expect(running.headers.get("cache-control")).toBe("no-store");

    await h.backend.fail([{ lease, error: { name: "GatewayError", message: "503 from the bank", stack: "at bank.ts:1" }, retryDelayMs: 0 }]);
    const failed = await h.request("GET", `/v1/jobs/${id}`);
    expect(failed.json).toMatchObject({ state: "waiting", error: { name: "GatewayError", message: "503 from the bank" } });
    expect(failed.text).not.toContain("bank.ts"); // no stack in the status view
    const lease2 = await claim("work");
    await h.backend.complete([{ lease: lease2, result: { receipt: "r_1" } }]);
    const done = await h.request("GET", `/v1/jobs/${id}`);
    expect(done.json).toMatchObject({
      state: "completed",
      finished: true,
      result: { receipt: "r_1" },
      attempts: { made: 2, max: 2 },
      links: { self: `/v1/jobs/${id}?queue=q`, events: `/v1/jobs/${id}/events?queue=q` },
    });
    const timings = done.json.timings as Obj;
    expect(typeof timings.createdAt).toBe("string");
    expect(typeof timings.finishedAt).toBe("string");
    expect(typeof timings.runMs).toBe("number");
  });

  it("404 with a problem document for an unknown id (ids may hold any character)", async () => {
    h = await startServer(temp);
    const r = await h.request("GET", `/v1/jobs/${encodeURIComponent("no/such job?")}`);
    expect(r.status).toBe(404);
    expect(r.json).toMatchObject({ type: "urn:conveyor:problem:job-not-found" });
    const id = await enqueue({ name: "n", options: { jobId: "odd/id with spaces?&" } });
    expect((await h.request("GET", `/v1/jobs/${encodeURIComponent(id)}`)).json).toMatchObject({ id: "odd/id with spaces?&" });
    const longest = await enqueue({ name: "n", options: { jobId: "é/".repeat(127) + "x" } });
    expect((await h.request("GET", `/v1/jobs/${encodeURIComponent(longest)}`)).json).toMatchObject({ id: longest });
  });
});

describe("GET /v1/jobs/:id/events (Server-Sent Events)", () => {
  it("streams every state change and progress report of a job run by a worker, then ends", async () => {
    h = await startServer(temp, { events: { pollIntervalMs: 20 } });
    const id = await enqueue({ name: "steps", data: { steps: 3, ms: 80 } });
    const s = await stream(id);
    expect(s.status).toBe(200);
    expect(s.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(s.headers.get("cache-control")).toMatch(/no-cache/);
    startWorker({
      steps: async (job, ctx) => {
        for (let i = 1; i <= 3; i++) {
          await new Promise((r) => setTimeout(r, 80));
          await ctx.progress({ step: i });
        }
        return { done: job.id };
      },
    });
    await s.ended;
    expect(states(s)).toEqual(["waiting", "active", "completed"]);
    expect(s.retry).toBeGreaterThan(0);
    const progress = s.events.filter((e) => e.event === "progress");
    expect(progress.length).toBeGreaterThanOrEqual(1);
    expect(progress.at(-1)!.data.progress).toEqual({ step: 3 });
    const completed = s.events.at(-1)!;
    expect(completed.data).toMatchObject({ jobId: id, state: "completed", reason: "completed", attempt: 1, result: { done: id } });
    // Ids grow monotonically: state n, progress n.k.hash.
    const order = s.events.map((e) => e.id!.split(".").slice(0, 2).map(Number));
    for (let i = 1; i < order.length; i++) {
      const [a, b] = [order[i - 1]!, order[i]!];
      expect(a[0]! < b[0]! || (a[0] === b[0] && (a[1] ?? 0) < (b[1] ?? 0))).toBe(true);
    }
  });

  it("does not collapse a fast job: waiting -> active -> completed all arrive even when it finished before the stream opened", async () => {
    h = await startServer(temp);
    const id = await enqueue({ name: "fast" });
    const lease = await claim("fast");
    await h.backend.complete([{ lease, result: 42 }]);
    const s = await stream(id);
    await s.ended;
    expect(s.events.map((e) => [e.id, e.data.state])).toEqual([
      ["1", "waiting"],
      ["2", "active"],
      ["3", "completed"],
    ]);
    expect(s.events[2]!.data.result).toBe(42);
  });

  it("reports retries and dead letters with their errors", async () => {
    h = await startServer(temp, { events: { pollIntervalMs: 20 } });
    const id = await enqueue({ name: "flaky", options: { attempts: 2, backoff: { type: "fixed", delayMs: 0 } } });
    const s = await stream(id);
    startWorker({
      flaky: async () => {
        throw new Error("upstream said no");
      },
    });
    await s.ended;
    expect(s.events.map((e) => `${String(e.data.state)}/${String(e.data.reason)}`)).toEqual([
      "waiting/created",
      "active/started",
      "scheduled/retry-scheduled",
      "active/started",
      "dead/dead",
    ]);
    expect(s.events[2]!.data.error).toEqual({ name: "Error", message: "upstream said no" });
    expect(s.events[4]!.data).toMatchObject({ attempt: 2, error: { message: "upstream said no" } });
  });

  it("resumes with Last-Event-ID without repeating or losing events; 204 once the client has seen the end", async () => {
    h = await startServer(temp, { events: { pollIntervalMs: 20 } });
    const id = await enqueue({ name: "slow" });
    const first = await stream(id);
    const lease = await claim("slow");
    await h.backend.progress(lease, { pct: 10 });
    await first.waitForEvent((e) => e.event === "progress");
    first.close();
    const lastSeen = first.events.at(-1)!.id!;
    expect(lastSeen).toMatch(/^2\.1\./);

    // Meanwhile: unchanged progress, then a new one, then completion.
    await h.backend.progress(lease, { pct: 10 });
    await h.backend.progress(lease, { pct: 90 });
    const second = await stream(id, { "last-event-id": lastSeen });
    await second.waitForEvent((e) => e.event === "progress");
    await h.backend.complete([{ lease, result: "ok" }]);
    await second.ended;
    expect(second.events.map((e) => (e.event === "progress" ? `progress ${JSON.stringify(e.data.progress)}` : e.data.state))).toEqual([
      'progress {"pct":90}',
      "completed",
    ]);
    expect(second.events[0]!.id).toMatch(/^2\.2\./);
    const all = [...first.events, ...second.events].map((e) => e.id);
    expect(new Set(all).size).toBe(all.length);

    // EventSource reconnects after the server closes; 204 makes it stop.
    const third = await stream(id, { "last-event-id": second.events.at(-1)!.id! });
    expect(third.status).toBe(204);
    // A resume from the middle of a finished job still gets the rest.
    const fourth = await stream(id, { "last-event-id": "2" });
    await fourth.ended;
    expect(fourth.events.map((e) => e.event)).toEqual(["progress", "state"]);
  });

  it("sends heartbeat comments while nothing happens, and ends with `gone` if the job is deleted", async () => {
    h = await startServer(temp, { events: { pollIntervalMs: 20, heartbeatMs: 50 } });
    const id = await enqueue({ name: "idle", options: { removeOnComplete: true } });
    const s = await stream(id);
    await waitFor(() => s.comments.some((c) => c.startsWith("keep-alive")), { description: "a heartbeat comment" });
    const lease = await claim("idle");
    await h.backend.complete([{ lease, result: null }]); // deleted as it completes
    await s.ended;
    expect(s.events.at(-1)!.event).toBe("gone");
  });

  it("404 for an unknown job, and HEAD does not open a stream (405: the stream takes GET only)", async () => {
    h = await startServer(temp);
    expect((await stream("nope")).status).toBe(404);
    const id = await enqueue({ name: "n" });
    const head = await fetch(`${h.url}/v1/jobs/${id}/events`, { method: "HEAD" });
    expect(head.status).toBe(405);
    expect(head.headers.get("allow")).toBe("GET");
  });

  it("shares one poller per job however many streams watch it (a store without an event log), and closes open streams on server close", async () => {
    // Counts the store reads of each job. One job is watched by five streams, another by one:
    // both are polled by the same poll, so past the reads that open each stream they are read
    // equally often. A poller per stream would read the first five times as often.
    const gets = new Map<string, number>();
    h = await startServer(
      temp,
      { events: { pollIntervalMs: 20 } },
      {
        wrap: (backend) =>
          Object.assign(Object.create(backend) as SqliteBackend, {
            // As RabbitMQ: no event log, so the watcher polls.
            capabilities: { ...backend.capabilities, eventLog: false },
            get: (id: string) => {
              gets.set(id, (gets.get(id) ?? 0) + 1);
              return backend.get(id);
            },
          }),
      },
    );
    const id = await enqueue({ name: "n" });
    const alone = await enqueue({ name: "n" });
    const many = await Promise.all(Array.from({ length: 5 }, () => stream(id)));
    const single = await stream(alone);
    await Promise.all([...many, single].map((s) => s.waitForEvent((e) => e.data.state === "waiting")));
    const before = { many: gets.get(id) ?? 0, single: gets.get(alone) ?? 0 };
    await waitFor(() => (gets.get(alone) ?? 0) >= before.single + 10, { description: "ten polls of the job with one stream" });
    const polls = { many: gets.get(id)! - before.many, single: gets.get(alone)! - before.single };
    expect(polls.single).toBeGreaterThanOrEqual(10);
    expect(polls.many).toBe(polls.single);
    await h.app.close();
    await Promise.all([...many, single].map((s) => s.ended));
    expect([...many, single].every((s) => s.isEnded())).toBe(true);
    await h.backend.close();
    h = null;
  });

  it("with an event log, reads a watched job when the log reports an event of it, once for all its streams, and not while it is idle", async () => {
    // Counts the store reads of each job and the reads of the event log. The process reads the
    // log in one loop (EventTail); a job is read when an event of it arrives, and every
    // RECHECK_INTERVALS poll periods for changes that log no event (both jobs alike).
    const gets = new Map<string, number>();
    let logReads = 0;
    h = await startServer(
      temp,
      { events: { pollIntervalMs: 20 } },
      {
        wrap: (backend) =>
          Object.assign(Object.create(backend) as SqliteBackend, {
            get: (id: string, queue?: string) => {
              gets.set(id, (gets.get(id) ?? 0) + 1);
              return backend.get(id, queue);
            },
            readEvents: (cursor: string, limit: number) => {
              logReads++;
              return backend.readEvents(cursor, limit);
            },
          }),
      },
    );
    const id = await enqueue({ name: "n" });
    const alone = await enqueue({ name: "n" });
    const many = await Promise.all(Array.from({ length: 5 }, () => stream(id)));
    const single = await stream(alone);
    await Promise.all([...many, single].map((s) => s.waitForEvent((e) => e.data.state === "waiting")));
    // Idle: ten reads of the log later, the jobs were read no more than the recheck reads both.
    const reads = () => ({ many: gets.get(id) ?? 0, single: gets.get(alone) ?? 0 });
    const settled = reads();
    const logReadsBefore = logReads;
    await waitFor(() => logReads >= logReadsBefore + 10, { description: "ten reads of the event log" });
    const idle = reads();
    expect(idle.many - settled.many).toBe(idle.single - settled.single);
    expect(idle.many - settled.many).toBeLessThanOrEqual(2);
    // An event of the job with five streams: it is read once for all five.
    const lease = await claim("n");
    expect(lease.jobId).toBe(id);
    await Promise.all(many.map((s) => s.waitForEvent((e) => e.data.state === "active")));
    const after = reads();
    expect(after.many - idle.many - (after.single - idle.single)).toBe(1);
    expect(states(single)).toEqual(["waiting"]);
  });
});

describe("DELETE /v1/jobs/:id (cancel)", () => {
  it("a waiting job never runs; the stream reports it cancelled", async () => {
    h = await startServer(temp, { events: { pollIntervalMs: 20 } });
    const id = await enqueue({ name: "never" });
    const s = await stream(id);
    const r = await h.request("DELETE", `/v1/jobs/${id}`);
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ jobId: id, state: "cancelled", previousState: "waiting" });
    await s.ended;
    expect(states(s)).toEqual(["waiting", "cancelled"]);
    let ran = false;
    startWorker({ never: async () => void (ran = true) });
    const marker = await enqueue({ name: "never" }); // a later job of the same name does run
    await waitFor(async () => (await h!.backend.get(marker))?.state === "completed", { timeoutMs: 10_000 });
    expect((await h.backend.get(id))?.state).toBe("cancelled");
    expect(ran).toBe(true);
  });

  it("a running job's AbortSignal fires in the worker process that holds it", async () => {
    h = await startServer(temp, { events: { pollIntervalMs: 50 } });
    const marker = await temp.file("marker.txt");
    const id = await enqueue({ name: "hold", data: { marker } });
    const child = spawnCli([
      "worker",
      "--db",
      `sqlite:${h.dbPath}`,
      "--queue",
      "q",
      "--handlers",
      "test/fixtures/http-handlers.ts",
      "--lease-ms",
      "1500",
      "--poll-interval-ms",
      "50",
    ]);
    children.push(child);
    await waitFor(() => existsSync(marker) && readFileSync(marker, "utf8").includes("started"), {
      timeoutMs: 20_000,
      description: "the worker process to start the job",
    });
    const pid = /started (\d+)/.exec(readFileSync(marker, "utf8"))![1];
    expect(Number(pid)).toBe(child.child.pid);
    const s = await stream(id);

    const r = await h.request("DELETE", `/v1/jobs/${id}`);
    expect(r.json).toMatchObject({ state: "cancelled", previousState: "active" });
    await waitFor(() => readFileSync(marker, "utf8").includes("aborted"), { timeoutMs: 20_000, description: "the handler's signal to abort" });
    expect(readFileSync(marker, "utf8")).toContain("aborted LeaseLostError cancelled");
    await s.ended;
    expect(states(s)).toEqual(["waiting", "active", "cancelled"]);
    expect((await h.backend.get(id))?.state).toBe("cancelled");
    child.child.kill("SIGTERM");
    expect(await child.exited).toBe(0);
  });

  it("409 for a finished job, 404 for an unknown one", async () => {
    h = await startServer(temp);
    const id = await enqueue({ name: "n" });
    await h.backend.complete([{ lease: await claim("n"), result: null }]);
    const r = await h.request("DELETE", `/v1/jobs/${id}`);
    expect(r.status).toBe(409);
    expect(r.json).toMatchObject({ type: "urn:conveyor:problem:job-finished", state: "completed" });
    expect((await h.request("DELETE", "/v1/jobs/unknown")).status).toBe(404);
  });
});

describe("POST /v1/jobs/:id/replay", () => {
  it("moves a dead job back to waiting; 409 for a job that is not dead", async () => {
    h = await startServer(temp);
    const id = await enqueue({ name: "n", options: { attempts: 1 } });
    await h.backend.fail([{ lease: await claim("n"), error: { name: "E", message: "boom", stack: null }, retryDelayMs: null }]);
    const r = await h.request("POST", `/v1/jobs/${id}/replay`);
    expect(r.status).toBe(200);
    expect((await h.backend.get(id))?.state).toBe("waiting");
    const again = await h.request("POST", `/v1/jobs/${id}/replay`);
    expect(again.status).toBe(409);
    expect(again.json).toMatchObject({ state: "waiting" });
  });
});
