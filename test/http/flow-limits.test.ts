/** Flow limits over real HTTP: set them, read them in the one-queue view, bad input answers 4xx. */
import { expect, it } from "vitest";
import { serverPerTest, type Harness } from "./harness.js";

const { startTestServer } = serverPerTest();
let h: Harness | null = null;

it("POST /queues/{queue}/limits sets the limits the one-queue view shows; {} removes them", async () => {
  h = await startTestServer();
  const limits = { rate: { max: 20, durationMs: 1_000 }, maxRunning: 4, maxRunningPerName: { export: 1 } };
  const set = await h.request<{ flow: unknown }>("POST", "/v1/queues/email/limits", { body: limits });
  expect(set.status).toBe(200);
  expect(set.json.flow).toEqual({ limits, heldUntil: null });
  const view = await h.request<{ name: string; flow: unknown }>("GET", "/v1/queues/email");
  expect(view.json).toMatchObject({ name: "email", flow: { limits } });
  await h.backend.holdQueue("email", 60_000);
  const held = await h.request<{ flow: { heldUntil: string } }>("GET", "/v1/queues/email");
  expect(Date.parse(held.json.flow.heldUntil)).toBeGreaterThan(Date.now());
  const cleared = await h.request<{ flow: unknown }>("POST", "/v1/queues/other/limits", { body: {} });
  expect(cleared.json.flow).toBeNull();
});

it("bad limits answer 400 or 422 with what to fix, never 5xx", async () => {
  h = await startTestServer();
  for (const body of [
    { rate: { max: 0, durationMs: 10 } },
    { maxRunning: -1 },
    { speed: 3 },
    { rate: { max: 2 } },
    { maxRunningPerName: { "bad name!": 1 } },
    { maxRunning: 2.5 },
  ]) {
    const r = await h.request<{ detail: string }>("POST", "/v1/queues/email/limits", { body });
    expect([400, 422]).toContain(r.status);
    expect(r.json.detail.length).toBeGreaterThan(10);
  }
  expect(await h.backend.getQueueFlow("email")).toBeNull();
});
