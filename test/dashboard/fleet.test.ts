/**
 * The dashboard of a `conveyor serve` that runs no worker, in Chromium: its charts come from the
 * store (jobs finished by a worker in another process), its Schedules view lists and runs and
 * deletes cron schedules, and its Relay view (serve --outbox) shows the outbox's backlog and lag
 * and replays or deletes set-aside events. Read-only keys see no buttons and are refused anyway;
 * nothing from data is rendered as HTML.
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Json } from "../../src/core/json.js";
import { hashApiKey } from "../../src/http/index.js";
import { SqliteOutbox } from "../../src/outbox/index.js";
import { spawnCli, type Spawned } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";
import { apiClient, axe, inertness, launchChromium, login } from "./browser.js";
import { buildDashboardBundle } from "../helpers/dashboard-bundle.js";

const ADMIN_KEY = `cvk_admin_${"f".repeat(24)}`;
const READ_KEY = `cvk_read_${"q".repeat(24)}`;
const HOSTILE = '<img src=x onerror="window.__pwned = 1"><script>window.__pwned = 2</script>';
const temp = new TempDirs("conveyor-dashboard-fleet-");
let server: Spawned;
let worker: Spawned;
let base: string;
let browser: Browser;
let shots: string;
let dbPath: string;

const { api, enqueue, untilState } = apiClient(() => base, ADMIN_KEY);

/** Writes to the outbox tables of the served database, as an application (and a refusing relay) would. */
function withDb<T>(fn: (db: Database.Database) => T): T {
  const db = new Database(dbPath, { timeout: 5_000 });
  try {
    return fn(db);
  } finally {
    db.close();
  }
}

function publish(topic: string, payload: Json): string {
  return withDb((db) => db.transaction(() => new SqliteOutbox().publish(db, { topic, key: "order-1", payload }))());
}

/** An event a target refused for good, as a relay sets it aside (the relay's own INSERT). */
function setAside(id: string, payload: unknown): void {
  withDb((db) =>
    db
      .prepare(
        `INSERT INTO conveyor_outbox_dead (id, topic, key, payload, headers, created_at, failed_at, target, error) VALUES (?, 'order.created', 'order-1', ?, '{}', ?, ?, 'amqp://broker:5672/#orders', ?)`,
      )
      .run(id, JSON.stringify(payload), Date.now() - 5_000, Date.now(), `the broker refused it: ${HOSTILE}`),
  );
}

beforeAll(async () => {
  const dir = await temp.make();
  dbPath = join(dir, "jobs.db");
  shots = process.env.CONVEYOR_DASHBOARD_SHOTS ?? join(dir, "screenshots");
  mkdirSync(shots, { recursive: true });
  buildDashboardBundle();
  const keys = `admin:admin:${hashApiKey(ADMIN_KEY)};ro:read:${hashApiKey(READ_KEY)}`;
  // No --handlers: this server runs no worker; every job is run by the worker process below.
  server = spawnCli(["serve", "--db", `sqlite:${dbPath}`, "--port", "0", "--log-level", "warn", "--outbox"], { CONVEYOR_API_KEYS: keys });
  base = await waitFor(() => /dashboard on (http:\/\/\S+?)\/ui\//.exec(server.stderr())?.[1], {
    timeoutMs: 30_000,
    description: `conveyor serve to start (stderr: ${server.stderr()})`,
  });
  expect(server.stderr()).not.toContain("worker on");
  worker = spawnCli([
    "worker",
    "--db",
    `sqlite:${dbPath}`,
    "--handlers",
    "test/fixtures/dashboard-handlers.ts",
    "--queue",
    "fleet",
    "--concurrency",
    "4",
    "--poll-interval-ms",
    "100",
  ]);
  browser = await launchChromium();
}, 90_000);

afterAll(async () => {
  await browser?.close();
  for (const p of [worker, server]) {
    if (p && p.child.exitCode === null) {
      p.child.kill("SIGTERM");
      await p.exited;
    }
  }
  console.log(`dashboard screenshots: ${shots}`);
  await temp.removeAll();
});

describe("dashboard of a serve without workers, in Chromium", () => {
  it("charts throughput, failures and percentiles from the store, for jobs another process ran", async () => {
    const done = await Promise.all(Array.from({ length: 7 }, (_, i) => enqueue("fleet", "steps", { steps: 1, ms: 20 + i * 10 })));
    const dead = await enqueue("fleet", "gated", { message: HOSTILE }, { attempts: 1 });
    for (const id of done) await untilState(id, "completed");
    await untilState(dead, "dead");
    const s = await login(browser, base, ADMIN_KEY);
    const { page } = s;
    // The overview's sparkline counts them (its label is what a screen reader hears).
    await page.getByRole("img", { name: "fleet: 7 completed in the last hour" }).waitFor();
    await page.getByRole("link", { name: "fleet" }).click();
    await page.getByRole("heading", { name: "Queue fleet" }).waitFor();
    const summary = page.locator(".chart-summary");
    await summary
      .getByText(/Last hour: 7 completed, 1 failed \(12\.5% failure rate\); latest minute with jobs: wait p50 \d+ ms, run p50 \d+ ms, p95 \d+ ms/)
      .waitFor();
    // The run time percentiles are the handlers' (20 to 80 ms of sleep each), not zeros.
    const text = (await summary.textContent()) ?? "";
    const p95 = Number(/run p50 \d+ ms, p95 (\d+) ms/.exec(text)?.[1]);
    expect(p95).toBeGreaterThanOrEqual(20);
    await page.locator("figure.chart canvas").first().waitFor();
    expect(await axe(page)).toEqual([]);
    await page.screenshot({ path: join(shots, "queue-store-charts.png"), fullPage: true });
    expect(s.errors).toEqual([]);
    await s.context.close();
  });

  it("the API pages a queue both ways: next and prev cursors, and a clear refusal of both at once", async () => {
    // No worker takes "pager": its jobs stay waiting.
    expect((await api("POST", "/v1/queues/pager/jobs/bulk", { jobs: Array.from({ length: 7 }, (_, i) => ({ name: "quick", data: { i } })) })).status).toBe(202);
    type Listing = { jobs: Array<{ id: string }>; next: string | null; prev: string | null };
    const page = async (query: string) => (await api<Listing>("GET", `/v1/queues/pager/jobs?limit=3${query}`)).json;
    const ids = (l: Listing) => l.jobs.map((j) => j.id);
    const first = await page("");
    expect(first.prev).toBeNull();
    const second = await page(`&after=${first.next}`);
    const third = await page(`&after=${second.next}`);
    expect(ids(third)).toHaveLength(1);
    expect(third.next).toBeNull();
    expect(new Set([...ids(first), ...ids(second), ...ids(third)]).size).toBe(7);
    const backToSecond = await page(`&before=${third.prev}`);
    expect(ids(backToSecond)).toEqual(ids(second));
    const backToFirst = await page(`&before=${backToSecond.prev}`);
    expect(ids(backToFirst)).toEqual(ids(first));
    expect(backToFirst.prev).toBeNull();
    expect(backToFirst.next).toBe(first.next);
    const both = await api<{ detail: string }>("GET", `/v1/queues/pager/jobs?after=${first.next}&before=${first.next}`);
    expect(both.status).toBeGreaterThanOrEqual(400);
    expect(both.status).toBeLessThan(500);
    expect(both.json.detail).toMatch(/exclude each other/);
  });

  it("lists schedules with their next runs; admin runs one now and deletes one; a read key sees no buttons and is refused", async () => {
    const put = (id: string, cron: string) =>
      api("PUT", `/v1/queues/fleet/schedules/${id}`, { cron, name: "quick", data: { note: HOSTILE, link: "javascript:window.__pwned = 3" } });
    expect((await put("nightly", "0 3 * * *")).status).toBe(201);
    expect((await put("hourly", "15 * * * *")).status).toBe(201);
    const admin = await login(browser, base, ADMIN_KEY);
    let dialogs = 0;
    admin.page.on("dialog", (d) => {
      dialogs++;
      void d.accept();
    });
    await admin.page.getByRole("link", { name: "Schedules" }).click();
    await admin.page.getByRole("heading", { name: "Schedules", level: 1 }).waitFor();
    const row = (id: string) => admin.page.getByRole("row").filter({ has: admin.page.getByRole("rowheader", { name: new RegExp(`^${id}`) }) });
    // The next run's own cell: a run crossing hh:15 has the last tick in the row too (a second match).
    const nextRun = (id: string) => row(id).locator(".next-run");
    await nextRun("nightly")
      .getByText(/\d{4}-\d\d-\d\d 03:00:00 UTC/)
      .waitFor();
    await nextRun("hourly")
      .getByText(/\d{4}-\d\d-\d\d \d\d:15:00 UTC/)
      .waitFor();
    await row("nightly").getByText("Payload and options").click();
    expect(await inertness(admin.page)).toEqual({ pwned: null, imgs: 0, scripts: 0, jsLinks: 0 });
    expect(await axe(admin.page)).toEqual([]);
    await admin.page.screenshot({ path: join(shots, "schedules.png"), fullPage: true });

    // Run now: the worker in the other process runs the job the click enqueued.
    await admin.page.getByRole("button", { name: "Run now: schedule nightly of fleet" }).click();
    const notice = await admin.page.getByText(/Enqueued job \S+ from schedule nightly\./).textContent();
    const jobId = /Enqueued job (\S+) from/.exec(notice ?? "")![1]!;
    await untilState(jobId, "completed");
    const job = (await api<{ name: string; meta: Record<string, unknown> }>("GET", `/v1/jobs/${jobId}`)).json;
    expect(job.name).toBe("quick");

    // Delete asks first, then the schedule is gone from the store and the table.
    await admin.page.getByRole("button", { name: "Delete schedule hourly of fleet" }).click();
    await admin.page.getByText("Deleted schedule hourly.").waitFor();
    expect(dialogs).toBe(1);
    expect((await api("GET", "/v1/queues/fleet/schedules/hourly")).status).toBe(404);
    await waitFor(async () => (await row("hourly").count()) === 0, { description: "the deleted schedule to leave the table" });

    const ro = await login(browser, base, READ_KEY);
    await ro.page.getByRole("link", { name: "Schedules" }).click();
    await ro.page.getByRole("rowheader", { name: /^nightly/ }).waitFor();
    expect(await ro.page.getByRole("button", { name: /Run now|Delete/ }).count()).toBe(0);
    const token = await ro.page.evaluate(async () => ((await (await fetch("api/session")).json()) as { csrfToken: string }).csrfToken);
    const forged = await ro.page.evaluate(async (t) => {
      const h = { "x-csrf-token": t, "content-type": "application/json" };
      return [
        (await fetch("/v1/queues/fleet/schedules/nightly", { method: "DELETE", headers: h })).status,
        (await fetch("/v1/queues/fleet/jobs", { method: "POST", headers: h, body: JSON.stringify({ name: "quick", data: {} }) })).status,
      ];
    }, token);
    expect(forged).toEqual([403, 403]);
    expect((await api("GET", "/v1/queues/fleet/schedules/nightly")).status).toBe(200);
    expect(admin.errors).toEqual([]);
    expect(ro.errors.filter((e) => !e.includes("403"))).toEqual([]);
    await admin.context.close();
    await ro.context.close();
  });

  it("shows the outbox's backlog, lag and set-aside events live; admin replays and deletes; a read key sees counts only and is refused", async () => {
    publish("order.created", { n: 1 });
    publish("order.created", { n: 2 });
    setAside("ev-replay", { html: HOSTILE, big: "z".repeat(100_000) });
    setAside("ev-delete", { n: 3 });
    const admin = await login(browser, base, ADMIN_KEY);
    admin.page.on("dialog", (d) => void d.accept());
    await admin.page.getByRole("link", { name: "Relay" }).click();
    await admin.page.getByRole("heading", { name: "Relay", level: 1 }).waitFor();
    const card = (label: RegExp) => admin.page.locator(".cards li").filter({ hasText: label }).locator(".card-value");
    await waitFor(async () => (await card(/Backlog/).textContent()) === "2", { description: "a backlog of 2" });
    await waitFor(async () => /^\d+(\.\d)? s$|^\d+ ms$/.test((await card(/Lag/).textContent()) ?? ""), { description: "the lag of the oldest event" });
    await waitFor(async () => (await card(/Set aside/).textContent()) === "2", { description: "2 set-aside events" });
    await admin.page
      .getByText(/the broker refused it: <img src=x onerror/)
      .first()
      .waitFor();
    await admin.page.getByText("Payload and headers").first().click();
    expect(await inertness(admin.page)).toEqual({ pwned: null, imgs: 0, scripts: 0, jsLinks: 0 });
    expect(await axe(admin.page)).toEqual([]);
    await admin.page.screenshot({ path: join(shots, "relay.png"), fullPage: true });

    // Replay puts the event back into the outbox: the backlog grows and the set-aside count falls, live.
    await admin.page.getByRole("button", { name: "Replay event ev-replay" }).click();
    await waitFor(async () => (await card(/Backlog/).textContent()) === "3" && (await card(/Set aside/).textContent()) === "1", {
      description: "backlog 3, set aside 1",
    });
    expect(withDb((db) => db.prepare("SELECT count(*) AS n FROM conveyor_outbox WHERE id = 'ev-replay'").get())).toEqual({ n: 1 });
    await admin.page.getByRole("button", { name: "Delete event ev-delete" }).click();
    await waitFor(async () => (await card(/Set aside/).textContent()) === "0", { description: "nothing set aside" });
    await admin.page.getByText(/No set-aside events/).waitFor();

    setAside("ev-kept", { n: 4 });
    const ro = await login(browser, base, READ_KEY);
    await ro.page.getByRole("link", { name: "Relay" }).click();
    const roCard = (label: RegExp) => ro.page.locator(".cards li").filter({ hasText: label }).locator(".card-value");
    await waitFor(async () => (await roCard(/Set aside/).textContent()) === "1", { description: "the read key sees the count" });
    await ro.page.getByText("Set-aside events carry business payloads: they are shown to admin keys only.").waitFor();
    expect(await ro.page.getByRole("button", { name: /Replay|Delete/ }).count()).toBe(0);
    const token = await ro.page.evaluate(async () => ((await (await fetch("api/session")).json()) as { csrfToken: string }).csrfToken);
    const forged = await ro.page.evaluate(async (t) => {
      const h = { "x-csrf-token": t, "content-type": "application/json" };
      return [
        (await fetch("/v1/outbox/dead/replay", { method: "POST", headers: h, body: JSON.stringify({ ids: ["ev-kept"] }) })).status,
        (await fetch("/v1/outbox/dead/ev-kept", { method: "DELETE", headers: h })).status,
        (await fetch("/v1/outbox/dead")).status,
      ];
    }, token);
    expect(forged).toEqual([403, 403, 403]);
    expect(withDb((db) => db.prepare("SELECT count(*) AS n FROM conveyor_outbox_dead WHERE id = 'ev-kept'").get())).toEqual({ n: 1 });
    expect(admin.errors).toEqual([]);
    expect(ro.errors.filter((e) => !e.includes("403"))).toEqual([]);
    await admin.context.close();
    await ro.context.close();
  });
});
