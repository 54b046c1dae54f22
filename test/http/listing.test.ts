/** Job listings over HTTP: keyset cursors and creation-time bounds (GET /queues/{queue}/jobs and /dead). */
import { describe, expect, it } from "vitest";
import { serverPerTest, type Harness } from "./harness.js";

const { startTestServer } = serverPerTest();
let h: Harness | null = null;

type Page = { jobs: Array<{ id: string; timings: { createdAt: string } }>; next: string | null; limit: number; offset: number };

async function add(queue: string, count: number): Promise<string[]> {
  const r = await h!.request<{ jobs: Array<{ jobId: string }> }>("POST", `/v1/queues/${queue}/jobs/bulk`, {
    body: { jobs: Array.from({ length: count }, (_, i) => ({ name: "a", data: { i } })) },
  });
  expect(r.status).toBe(202);
  return r.json.jobs.map((j) => j.jobId);
}

describe("listings by cursor", () => {
  it("walks a queue page by page with next, the same jobs as one big page", async () => {
    h = await startTestServer();
    await add("q", 7);
    await add("other", 2);
    const all = (await h.request<Page>("GET", "/v1/queues/q/jobs?limit=100")).json;
    expect(all.jobs).toHaveLength(7);
    expect(all.next).toBeNull();
    const seen: string[] = [];
    let url = "/v1/queues/q/jobs?limit=3";
    for (let i = 0; i < 5; i++) {
      const page = await h.request<Page>("GET", url);
      expect(page.status).toBe(200);
      seen.push(...page.json.jobs.map((j) => j.id));
      if (page.json.next === null) break;
      url = `/v1/queues/q/jobs?limit=3&after=${encodeURIComponent(page.json.next)}`;
    }
    expect(seen).toEqual(all.jobs.map((j) => j.id));
  });

  it("answers 422 for a cursor that is not in the queue, and 400 for a malformed time", async () => {
    h = await startTestServer();
    const [other] = await add("other", 1);
    const r = await h.request("GET", `/v1/queues/q/jobs?after=${other}`);
    expect(r.status).toBe(422);
    expect(r.json.detail).toMatch(/start again from the first page/);
    expect((await h.request("GET", "/v1/queues/q/jobs?createdFrom=yesterday")).status).toBe(400);
  });

  it("bounds listings and dead letters by creation time", async () => {
    h = await startTestServer();
    const [first] = await add("q", 1);
    await new Promise((r) => setTimeout(r, 5));
    const job = (await h.request<{ timings: { createdAt: string } }>("GET", `/v1/jobs/${first}`)).json;
    const later = new Date(Date.parse(job.timings.createdAt) + 2).toISOString();
    await add("q", 2);
    const before = await h.request<Page>("GET", `/v1/queues/q/jobs?createdUntil=${later}`);
    expect(before.json.jobs.map((j) => j.id)).toEqual([first]);
    const after = await h.request<Page>("GET", `/v1/queues/q/jobs?createdFrom=${later}`);
    expect(after.json.jobs).toHaveLength(2);
    const dead = await h.request<Page>("GET", `/v1/queues/q/dead?createdFrom=${later}`);
    expect(dead.status).toBe(200);
    expect(dead.json).toMatchObject({ jobs: [], next: null });
  });
});
