/**
 * The web dashboard in a real browser: Debian's Chromium, driven by playwright-core, against a
 * real `conveyor serve` (SQLite file, in-process worker, API keys). One browser for the file;
 * every test gets its own browser context (its own cookies). Screenshots go to a temp dir
 * (printed; kept when CONVEYOR_DASHBOARD_SHOTS names a directory).
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { hashApiKey } from "../../src/http/index.js";
import { Queue } from "../../src/index.js";
import { spawnCli, type Spawned } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";
import { apiClient, axe, inPage, launchChromium, login as loginAs, type Session } from "./browser.js";
import { buildDashboardBundle } from "../helpers/dashboard-bundle.js";

const ADMIN_KEY = `cvk_admin_${"a".repeat(24)}`;
const READ_KEY = `cvk_read_${"r".repeat(24)}`;
const temp = new TempDirs("conveyor-dashboard-");
let server: Spawned;
let base: string;
let browser: Browser;
let shots: string;
let dir: string;

type Job = { id: string; state: string; result: unknown; attempts: { made: number } };

const client = apiClient(() => base, ADMIN_KEY);
const { api, enqueue } = client;
const untilState = (id: string, state: string, timeoutMs?: number) => client.untilState<Job>(id, state, timeoutMs);

async function jobState(id: string): Promise<Job> {
  return (await api<Job>("GET", `/v1/jobs/${id}`)).json;
}

const login = (key: string): Promise<Session> => loginAs(browser, base, key);

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

beforeAll(async () => {
  dir = await temp.make();
  shots = process.env.CONVEYOR_DASHBOARD_SHOTS ?? join(dir, "screenshots");
  mkdirSync(shots, { recursive: true });
  // The bundle the server serves: built by the same script as `npm run build`.
  buildDashboardBundle();
  const keys = `admin:admin:${hashApiKey(ADMIN_KEY)};ro:read:${hashApiKey(READ_KEY)}`;
  server = spawnCli(
    [
      "serve",
      "--db",
      `sqlite:${join(dir, "jobs.db")}`,
      "--port",
      "0",
      "--log-level",
      "warn",
      "--handlers",
      "test/fixtures/dashboard-handlers.ts",
      "--queue",
      "emails,reports",
      "--concurrency",
      "4",
      "--max-body-bytes",
      "3000000",
    ],
    { CONVEYOR_API_KEYS: keys },
  );
  base = await waitFor(() => /dashboard on (http:\/\/\S+?)\/ui\//.exec(server.stderr())?.[1], {
    timeoutMs: 30_000,
    description: `conveyor serve to start (stderr: ${server.stderr()})`,
  });
  browser = await launchChromium();
}, 90_000);

afterAll(async () => {
  await browser?.close();
  if (server && server.child.exitCode === null) {
    server.child.kill("SIGTERM");
    await server.exited;
  }
  console.log(`dashboard screenshots: ${shots}`);
  await temp.removeAll();
});

describe("web dashboard in Chromium", () => {
  it("serves the bundle from the package with a strict CSP and refuses anonymous API calls", async () => {
    const page = await fetch(`${base}/ui/`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-security-policy")).toContain("script-src 'self'");
    const html = await page.text();
    const script = /src="(assets\/app\.js\?v=[^"]+)"/.exec(html)![1]!;
    const js = await fetch(`${base}/ui/${script}`, { headers: { "accept-encoding": "gzip" } });
    expect(js.status).toBe(200);
    expect(js.headers.get("content-type")).toMatch(/javascript/);
    expect((await fetch(`${base}/ui`, { redirect: "manual" })).headers.get("location")).toBe("/ui/");
    expect((await fetch(`${base}/ui/api/live?topic=overview`)).status).toBe(401);
  });

  it("every view loads without console errors, passes axe, and is screenshotted", async () => {
    for (let i = 0; i < 12; i++) await enqueue("emails", "quick", { to: `user${i}@example.com` });
    const dead = await enqueue("emails", "gated", { message: "SMTP 550 mailbox unavailable" }, { attempts: 2, backoff: { type: "fixed", delayMs: 50 } });
    const steps = await enqueue("reports", "steps", { steps: 3, ms: 200 });
    // Something running and something scheduled, so the screenshots show every kind of count.
    const running = await enqueue("reports", "steps", { steps: 20, ms: 500 });
    await enqueue("reports", "quick", {}, { delayMs: 3_600_000 });
    await untilState(dead, "dead");
    await untilState(steps, "completed");
    await untilState(running, "active");
    const s = await login(ADMIN_KEY);
    const { page } = s;
    await page.getByRole("link", { name: "emails" }).waitFor();
    await page.getByText("running").first().waitFor();
    expect(await axe(page)).toEqual([]);
    await shot(page, "overview");

    await page.getByRole("link", { name: "emails" }).click();
    await page.getByRole("heading", { name: "Queue emails" }).waitFor();
    await page.locator("table.jobs tbody tr").first().waitFor();
    await page.locator("figure.chart canvas").first().waitFor();
    expect(await axe(page)).toEqual([]);
    await shot(page, "queue");

    await page.getByRole("link", { name: /inspect and replay/ }).click();
    await page.getByRole("heading", { name: /Dead letters/ }).waitFor();
    await page.getByText("SMTP 550 mailbox unavailable").first().waitFor();
    await page.getByText("Forensics: payload, stack, attempts").first().click();
    expect(await axe(page)).toEqual([]);
    await shot(page, "dead-letters");

    await page.goto(`${base}/ui/#/jobs/${dead}`);
    await page.getByRole("heading", { name: "Attempts" }).waitFor();
    await page.getByText("Attempt 2").waitFor();
    expect(await axe(page)).toEqual([]);
    await shot(page, "job");
    expect(s.errors).toEqual([]);
    await s.context.close();
  });

  it("replay from the dead-letter view makes a worker run the job again", async () => {
    const gate = join(dir, "gate-open");
    const id = await enqueue("reports", "gated", { gate, message: "the gate is closed" }, { attempts: 1 });
    await untilState(id, "dead");
    writeFileSync(gate, "open");
    const s = await login(ADMIN_KEY);
    await s.page.goto(`${base}/ui/#/queues/reports/dead`);
    await s.page.getByRole("button", { name: `Replay job ${id}` }).click();
    const job = await untilState(id, "completed");
    expect(job.result).toBe("passed the gate");
    await s.page.getByText(/Replayed 1 job/).waitFor();
    expect(s.errors).toEqual([]);
    await s.context.close();
  });

  it("cancel stops a running job: its handler is aborted", async () => {
    const marker = join(dir, "hold-marker");
    const id = await enqueue("reports", "hold", { marker });
    await untilState(id, "active");
    const s = await login(ADMIN_KEY);
    s.page.on("dialog", (d) => void d.accept());
    await s.page.goto(`${base}/ui/#/jobs/${id}`);
    await s.page.getByText(/token \d+, expires/).waitFor();
    await s.page.getByRole("button", { name: "Cancel job" }).click();
    await untilState(id, "cancelled");
    // The badge follows over the live stream, and the worker aborts the handler at its next heartbeat.
    await s.page.locator(".title-row .badge", { hasText: "cancelled" }).waitFor();
    await waitFor(() => existsSync(marker) && readFileSync(marker, "utf8").includes("aborted"), {
      timeoutMs: 20_000,
      description: "the handler to be aborted",
    });
    expect(s.errors).toEqual([]);
    await s.context.close();
  });

  it("pause stops claims; resume lets the job run", async () => {
    const s = await login(ADMIN_KEY);
    await s.page.getByRole("button", { name: "Pause queue reports" }).click();
    await s.page.getByRole("button", { name: "Resume queue reports" }).waitFor();
    expect((await api<{ paused: boolean }>("GET", "/v1/queues/reports")).json.paused).toBe(true);
    const held = await enqueue("reports", "quick", {});
    // A job enqueued after it on a running queue completes: the worker polled past the paused one.
    const other = await enqueue("emails", "quick", {});
    await untilState(other, "completed");
    expect((await jobState(held)).state).toBe("waiting");
    await s.page.getByRole("button", { name: "Resume queue reports" }).click();
    await untilState(held, "completed");
    expect(s.errors).toEqual([]);
    await s.context.close();
  });

  it("progress updates live, without a reload", async () => {
    const id = await enqueue("reports", "steps", { steps: 4, ms: 700 });
    const s = await login(ADMIN_KEY);
    await s.page.goto(`${base}/ui/#/jobs/${id}`);
    await s.page.getByRole("heading", { name: "Progress" }).waitFor();
    await inPage(s.page, "window.sameDocument = true");
    const seen = new Set<string>();
    await waitFor(
      async () => {
        const text = await s.page
          .locator(".progress-line strong")
          .textContent()
          .catch(() => null);
        if (text) seen.add(text);
        if (text && text !== "100%" && !seen.has("shot")) {
          seen.add("shot");
          await shot(s.page, "job-progress");
        }
        return seen.has("100%");
      },
      { timeoutMs: 20_000, intervalMs: 50, description: "progress to reach 100% on the page" },
    );
    // Intermediate values were shown as they came.
    expect([...seen].filter((t) => t !== "100%" && t !== "shot").length).toBeGreaterThanOrEqual(1);
    await s.page.locator(".title-row .badge", { hasText: "completed" }).waitFor();
    expect(await inPage<boolean>(s.page, "window.sameDocument === true")).toBe(true);
    expect(s.errors).toEqual([]);
    await s.context.close();
  });

  it("hostile payloads, errors and huge strings stay inert text", async () => {
    const hostile = {
      html: "<script>window.__pwned = 1</script>",
      img: '<img src=x onerror="window.__pwned = 2">',
      link: "javascript:window.__pwned = 3",
      big: "y".repeat(1_000_000),
    };
    const id = await enqueue(
      "reports",
      "gated",
      { ...hostile, message: '<img src=x onerror="window.__pwned = 4"><script>window.__pwned = 5</script>' },
      { attempts: 1 },
    );
    await untilState(id, "dead");
    const s = await login(ADMIN_KEY);
    let dialogs = 0;
    s.page.on("dialog", (d) => {
      dialogs++;
      void d.dismiss();
    });
    for (const view of [`#/jobs/${id}`, "#/queues/reports/dead", "#/queues/reports"]) {
      await s.page.goto(`${base}/ui/${view}`);
      await s.page.getByText("<img src=x onerror").first().waitFor();
      if (view.includes("dead")) await s.page.getByText("Forensics: payload, stack, attempts").first().click();
      // Expressions run in the page (this file has Node's types, not the DOM's).
      const inert = await inPage<Record<string, number | null>>(
        s.page,
        `({ pwned: window.__pwned ?? null, imgs: document.querySelectorAll("img").length,
            scripts: [...document.querySelectorAll("script")].filter((x) => !x.src).length,
            jsLinks: document.querySelectorAll('a[href^="javascript:"]').length })`,
      );
      expect(inert).toEqual({ pwned: null, imgs: 0, scripts: 0, jsLinks: 0 });
    }
    await s.page.goto(`${base}/ui/#/jobs/${id}`);
    await s.page.getByText(/Showing the first 20,000 of 1,000,\d+ characters/).waitFor();
    expect(await s.page.locator("pre", { hasText: "javascript:window.__pwned = 3" }).count()).toBe(1);
    expect(dialogs).toBe(0);
    expect(s.errors).toEqual([]);
    await s.context.close();
  });

  it("a read-only key sees no actions, and the server refuses forged or unauthorised actions", async () => {
    const dead = await enqueue("emails", "gated", { message: "for the read-only check" }, { attempts: 1 });
    await untilState(dead, "dead");
    const ro = await login(READ_KEY);
    await ro.page.getByRole("link", { name: "emails" }).waitFor();
    const actions = /Pause|Resume|Replay|Cancel|Delete/;
    expect(await ro.page.getByRole("button", { name: actions }).count()).toBe(0);
    await ro.page.getByRole("link", { name: "emails" }).click();
    await ro.page.getByRole("heading", { name: "Queue emails" }).waitFor();
    await ro.page.locator("table.jobs tbody tr").first().waitFor();
    expect(await ro.page.getByRole("button", { name: actions }).count()).toBe(0);
    // Dead letters carry payloads and stacks: admin only, so no link to them either.
    expect(await ro.page.getByRole("link", { name: /inspect and replay/ }).count()).toBe(0);
    await ro.page.goto(`${base}/ui/#/jobs/${dead}`);
    await ro.page.getByRole("heading", { name: "Timings" }).waitFor();
    expect(await ro.page.getByRole("button", { name: actions }).count()).toBe(0);
    expect(await ro.page.getByText("Payloads are shown to admin keys only.").count()).toBe(1);
    // The read session's own CSRF token does not lend it scopes it lacks.
    const roSession = await ro.page.evaluate(async () => (await (await fetch("api/session")).json()) as { csrfToken: string });
    const roForged = await ro.page.evaluate(
      async (token) => (await fetch("/v1/queues/emails/pause", { method: "POST", headers: { "x-csrf-token": token } })).status,
      roSession.csrfToken,
    );
    expect(roForged).toBe(403);
    expect(ro.errors.filter((e) => !e.includes("403"))).toEqual([]);

    const admin = await login(ADMIN_KEY);
    const token = await admin.page.evaluate(async () => ((await (await fetch("api/session")).json()) as { csrfToken: string }).csrfToken);
    const post = (headers: Record<string, string>) => admin.context.request.post(`${base}/v1/queues/emails/pause`, { headers });
    // No CSRF token, a wrong one, the right one from another origin: refused.
    expect((await post({})).status()).toBe(403);
    expect((await post({ "x-csrf-token": "not-the-token" })).status()).toBe(403);
    expect((await post({ "x-csrf-token": token, origin: "https://evil.example" })).status()).toBe(403);
    expect((await post({ "x-csrf-token": token, "sec-fetch-site": "cross-site" })).status()).toBe(403);
    expect((await api<{ paused: boolean }>("GET", "/v1/queues/emails")).json.paused).toBe(false);
    // A classic forged form post from another site: the browser does not send the SameSite=Strict
    // cookie, so the API sees no credentials at all.
    const evil = base.replace("127.0.0.1", "localhost");
    await admin.page.goto(`${evil}/not-the-dashboard`);
    await Promise.all([
      admin.page.waitForURL(`${base}/v1/queues/emails/pause`),
      inPage(
        admin.page,
        `(() => { const form = document.createElement("form"); form.method = "POST";
           form.action = ${JSON.stringify(`${base}/v1/queues/emails/pause`)}; document.body.append(form); form.submit(); })()`,
      ),
    ]);
    expect(await admin.page.textContent("body")).toContain("unauthorized");
    expect((await api<{ paused: boolean }>("GET", "/v1/queues/emails")).json.paused).toBe(false);
    // The same request, same-origin with the token, works: the refusals above were the checks.
    await admin.page.goto(`${base}/ui/`);
    const ok = await admin.page.evaluate(
      async (t) => (await fetch("/v1/queues/emails/pause", { method: "POST", headers: { "x-csrf-token": t } })).status,
      token,
    );
    expect(ok).toBe(200);
    await api("POST", "/v1/queues/emails/resume");
    // Logging out ends the session on the server: its cookie no longer works.
    await admin.page.getByRole("button", { name: "Log out" }).click();
    await admin.page.getByLabel("API key").waitFor();
    const after = await admin.page.evaluate(async () => (await fetch("/v1/queues")).status);
    expect(after).toBe(401);
    await ro.context.close();
    await admin.context.close();
  });

  it("pages through a queue by cursor, and filters jobs by creation time", async () => {
    // No worker takes "backlog": its jobs stay waiting.
    const r = await api<{ jobs: Array<{ jobId: string }> }>("POST", "/v1/queues/backlog/jobs/bulk", {
      jobs: Array.from({ length: 60 }, (_, i) => ({ name: "quick", data: { i } })),
    });
    expect(r.status).toBe(202);
    const s = await login(ADMIN_KEY);
    await s.page.goto(`${base}/ui/#/queues/backlog`);
    const rows = s.page.locator("table.jobs tbody tr");
    await rows.nth(49).waitFor();
    expect(await rows.count()).toBe(50);
    const firstPage = await s.page.locator("table.jobs tbody th").allTextContents();
    await s.page.getByRole("link", { name: "Older →" }).click();
    await s.page.waitForURL(/after=/);
    await s.page.getByRole("link", { name: "⇤ Newest" }).waitFor();
    await waitFor(async () => (await rows.count()) === 10, { description: "the second page of 10 jobs" });
    const secondPage = await s.page.locator("table.jobs tbody th").allTextContents();
    expect(new Set([...firstPage, ...secondPage]).size).toBe(60);
    expect(await s.page.getByRole("link", { name: "Older →" }).count()).toBe(0);
    // Back by the reverse cursor: the same first page, and nothing newer above it.
    await s.page.getByRole("link", { name: "← Newer" }).click();
    await s.page.waitForURL(/before=/);
    await waitFor(async () => (await rows.count()) === 50, { description: "the first page again" });
    expect(await s.page.locator("table.jobs tbody th").allTextContents()).toEqual(firstPage);
    await s.page.getByRole("link", { name: "Older →" }).waitFor();
    expect(await s.page.getByRole("link", { name: "← Newer" }).count()).toBe(0);

    const inAnHour = new Date(Date.now() + 3_600_000).toISOString().slice(0, 19);
    await s.page.getByLabel("Created from").fill(inAnHour);
    await s.page.getByRole("button", { name: "Apply" }).click();
    await s.page.getByText(/No jobs.*created in that time range/).waitFor();
    await s.page.getByLabel("until").fill(inAnHour);
    await s.page.getByLabel("Created from").fill("2000-01-01T00:00:00");
    await s.page.getByRole("button", { name: "Apply" }).click();
    await rows.nth(49).waitFor();
    expect(s.errors).toEqual([]);
    await s.context.close();
  });

  it("keyboard only: tab to a queue, open it, filter jobs by name", async () => {
    const s = await login(ADMIN_KEY);
    await s.page.getByRole("link", { name: "emails" }).waitFor();
    let focused = "";
    for (let i = 0; i < 30 && focused !== "emails"; i++) {
      await s.page.keyboard.press("Tab");
      focused = await inPage<string>(s.page, `document.activeElement?.textContent?.trim() ?? ""`);
    }
    expect(focused).toBe("emails");
    await s.page.keyboard.press("Enter");
    await s.page.getByRole("heading", { name: "Queue emails" }).waitFor();
    await s.page.getByRole("textbox", { name: "Job name" }).focus();
    await s.page.keyboard.type("gated");
    await s.page.keyboard.press("Enter");
    await s.page.waitForURL(/name=gated/);
    // The unfiltered rows stay until the filtered page arrives: wait for it.
    const names = await waitFor(
      async () => {
        const shown = await s.page.locator("table.jobs tbody td.mono").allTextContents();
        return shown.length > 0 && shown.every((n) => n === "gated") ? shown : null;
      },
      { timeoutMs: 10_000, description: "only gated jobs listed" },
    );
    expect(new Set(names)).toEqual(new Set(["gated"]));
    expect(s.errors).toEqual([]);
    await s.context.close();
  });

  it("a parent job's page shows its flow: children with states, a link to each child and back to the parent", async () => {
    // The flow is added by a producer in this process, into the file the server works from.
    const gate = join(dir, "flow-gate");
    const backend = new SqliteBackend({ path: join(dir, "jobs.db") });
    let parentId: string;
    let childIds: string[];
    try {
      const added = await new Queue("reports", { backend }).addFlow({
        name: "quick",
        data: { merge: true },
        children: [
          { name: "quick", queue: "emails", data: { part: 1 } },
          {
            name: "gated",
            queue: "emails",
            data: { gate, message: "waiting for the gate" },
            options: { attempts: 1000, backoff: { type: "fixed", delayMs: 100 } },
          },
        ],
      });
      parentId = added.id;
      childIds = added.children.map((c) => c.id);
    } finally {
      await backend.close();
    }
    const [quickChild, gatedChild] = childIds as [string, string];
    await untilState(quickChild, "completed");
    const s = await login(ADMIN_KEY);
    const { page } = s;
    // The queue view has a tab for the new state, and the parent is listed under it.
    await page.goto(`${base}/ui/#/queues/reports`);
    await page
      .getByRole("link", { name: /waiting-children/ })
      .first()
      .click();
    await page.getByRole("link", { name: parentId }).waitFor();
    await page.getByRole("link", { name: parentId }).click();

    await page.getByRole("heading", { name: "Flow" }).waitFor();
    const children = page.getByRole("table", { name: "Children" });
    await children.getByRole("row").nth(2).waitFor();
    const rowOf = (id: string) => children.getByRole("row").filter({ has: page.getByRole("link", { name: id }) });
    await rowOf(quickChild).getByText("completed").waitFor();
    expect(
      await rowOf(gatedChild)
        .getByText(/^(waiting|scheduled|active)$/)
        .count(),
    ).toBe(1);
    await page.getByText("2 children, 1 settled").waitFor();
    expect(await axe(page)).toEqual([]);
    await shot(page, "flow-parent");

    // Through to a child, and back to the parent by its link.
    await rowOf(gatedChild).getByRole("link", { name: gatedChild }).click();
    await page.getByRole("heading", { name: new RegExp(gatedChild) }).waitFor();
    await page.getByText("Parent:").waitFor();
    await page.getByRole("link", { name: parentId }).click();
    await page.getByRole("heading", { name: new RegExp(parentId) }).waitFor();

    // Opening the gate settles the last child: the table follows, and the parent runs.
    writeFileSync(gate, "open");
    await rowOf(gatedChild).getByText("completed").waitFor({ timeout: 20_000 });
    await untilState(parentId, "completed", 20_000);
    expect(s.errors).toEqual([]);
    await s.context.close();
  });
});
