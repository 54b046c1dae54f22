/** Queue operations over real HTTP: stats, listings, pause/resume, dead letters, replay, delete. */
import { describe, expect, it } from "vitest";
import { serverPerTest, type Harness, type Obj } from "./harness.js";

const { startTestServer } = serverPerTest();
let h: Harness | null = null;

const WORKER = { id: "w", host: "test", pid: 1 };

async function add(queue: string, name: string, options: Obj = {}): Promise<string> {
  const r = await h!.request<{ jobId: string }>("POST", `/v1/queues/${queue}/jobs`, { body: { name, data: { for: name }, options } });
  expect(r.status).toBe(202);
  return r.json.jobId;
}

/** Runs one job of `queue` to the dead-letter state. */
async function kill(queue: string, message = "boom"): Promise<void> {
  const [c] = await h!.backend.claim({ queues: [queue], names: ["a", "b"], worker: WORKER, limit: 1, leaseMs: 60_000 });
  await h!.backend.fail([{ lease: c!.lease, error: { name: "Error", message, stack: "Error: boom\n    at handler.ts:3" }, retryDelayMs: null }]);
}

interface QueueBody {
  name: string;
  paused: boolean;
  counts: Record<string, number>;
  oldestWaitingAgeMs: number | null;
}

describe("queues", () => {
  it("lists every queue with counts per state, paused flag and oldest waiting age", async () => {
    h = await startTestServer();
    await add("email", "a");
    await add("email", "a", { delayMs: 60_000 });
    await add("payments", "b");
    const r = await h.request<{ queues: QueueBody[] }>("GET", "/v1/queues");
    expect(r.status).toBe(200);
    const email = r.json.queues.find((q) => q.name === "email")!;
    expect(email).toMatchObject({ paused: false, counts: { waiting: 1, scheduled: 1, active: 0, completed: 0, dead: 0, cancelled: 0 } });
    expect(typeof email.oldestWaitingAgeMs).toBe("number");
    expect(r.json.queues.map((q) => q.name).sort()).toEqual(["email", "payments"]);
    expect((await h.request<QueueBody>("GET", "/v1/queues/payments")).json.counts.waiting).toBe(1);
  });

  it("pause stops claims (adding still works), resume lets them go on", async () => {
    h = await startTestServer();
    await add("q", "a");
    const paused = await h.request<QueueBody>("POST", "/v1/queues/q/pause");
    expect(paused.json.paused).toBe(true);
    expect(await h.backend.claim({ queues: ["q"], names: ["a"], worker: WORKER, limit: 1, leaseMs: 1_000 })).toHaveLength(0);
    expect((await h.request("POST", "/v1/queues/q/jobs", { body: { name: "a" } })).status).toBe(202);
    const resumed = await h.request<QueueBody>("POST", "/v1/queues/q/resume");
    expect(resumed.json).toMatchObject({ paused: false, counts: { waiting: 2 } });
    expect(await h.backend.claim({ queues: ["q"], names: ["a"], worker: WORKER, limit: 5, leaseMs: 1_000 })).toHaveLength(2);
  });

  it("lists a queue's jobs newest first, filtered by state and name, paged", async () => {
    h = await startTestServer();
    const ids = [await add("q", "a"), await add("q", "b"), await add("q", "a"), await add("q", "a", { delayMs: 60_000 })];
    const all = await h.request<{ jobs: Array<{ id: string; state: string }> }>("GET", "/v1/queues/q/jobs");
    expect(all.json.jobs.map((j) => j.id)).toEqual([...ids].reverse());
    const waitingA = await h.request<{ jobs: Array<{ id: string }> }>("GET", "/v1/queues/q/jobs?state=waiting&name=a");
    expect(waitingA.json.jobs.map((j) => j.id)).toEqual([ids[2], ids[0]]);
    const page = await h.request<{ jobs: Array<{ id: string }>; limit: number; offset: number }>("GET", "/v1/queues/q/jobs?limit=2&offset=1");
    expect(page.json).toMatchObject({ limit: 2, offset: 1 });
    expect(page.json.jobs.map((j) => j.id)).toEqual([ids[2], ids[1]]);
    expect((await h.request("GET", "/v1/queues/q/jobs?state=sleeping")).status).toBe(400);
    expect((await h.request("GET", "/v1/queues/q/jobs?limit=0")).status).toBe(400);
    expect((await h.request("GET", "/v1/queues/q/jobs?colour=red")).status).toBe(400);
  });
});

describe("dead letters", () => {
  it("lists dead jobs with their forensics: payload, error with stack, every attempt", async () => {
    h = await startTestServer();
    const id = await add("q", "a", { attempts: 1 });
    await kill("q", "card declined");
    const r = await h.request<{ jobs: Obj[] }>("GET", "/v1/queues/q/dead");
    expect(r.json.jobs).toHaveLength(1);
    expect(r.json.jobs[0]).toMatchObject({
      id,
      state: "dead",
      data: { for: "a" },
      failure: { name: "Error", message: "card declined", stack: expect.stringContaining("handler.ts") as string },
      history: [expect.objectContaining({ attempt: 1, outcome: "dead", workerId: "w", host: "test", pid: 1 }) as Obj],
      replays: 0,
    });
  });

  it("replays dead jobs by id or all at once, reporting each id's outcome", async () => {
    h = await startTestServer();
    const dead = [await add("q", "a", { attempts: 1 }), await add("q", "a", { attempts: 1 }), await add("q", "b", { attempts: 1 })];
    for (let i = 0; i < 3; i++) await kill("q");
    const alive = await add("q", "a");
    const elsewhere = await add("other", "a");

    const byId = await h.request("POST", "/v1/queues/q/dead/replay", { body: { ids: [dead[0], alive, elsewhere, "nope"] } });
    expect(byId.json).toEqual({ replayed: [dead[0]], notDead: [alive], notFound: [elsewhere, "nope"] });

    const onlyB = await h.request<{ replayed: string[] }>("POST", "/v1/queues/q/dead/replay", { body: { all: true, name: "b" } });
    expect(onlyB.json.replayed).toEqual([dead[2]]);
    const rest = await h.request<{ replayed: string[] }>("POST", "/v1/queues/q/dead/replay", { body: { all: true } });
    expect(rest.json.replayed).toEqual([dead[1]]);
    expect((await h.backend.stats("q"))[0]!.counts.dead).toBe(0);

    expect((await h.request("POST", "/v1/queues/q/dead/replay", { body: {} })).status).toBe(422);
    expect((await h.request("POST", "/v1/queues/q/dead/replay", { body: { ids: ["x"], all: true } })).status).toBe(422);
  });

  it("delete removes a dead job, and only a dead job of that queue", async () => {
    h = await startTestServer();
    const id = await add("q", "a", { attempts: 1 });
    const alive = await add("q", "a");
    await kill("q");
    expect((await h.request("DELETE", `/v1/queues/q/dead/${alive}`)).status).toBe(409);
    expect((await h.request("DELETE", `/v1/queues/other/dead/${id}`)).status).toBe(404);
    expect((await h.request("DELETE", `/v1/queues/q/dead/${id}`)).status).toBe(204);
    expect((await h.request("GET", `/v1/jobs/${id}`)).status).toBe(404);
  });
});
