/** Shared pieces of the dashboard's browser tests: Debian's Chromium driven by playwright-core. */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { expect } from "vitest";
import { waitFor } from "../helpers/wait-for.js";

export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}

export interface Session {
  context: BrowserContext;
  page: Page;
  /** Console errors and uncaught exceptions seen so far. */
  errors: string[];
}

/** A fresh browser context (its own cookies) logged in to the dashboard at `base` with `key`. */
export async function login(browser: Browser, base: string, key: string): Promise<Session> {
  const context = await browser.newContext({ viewport: { width: 1360, height: 900 }, timezoneId: "UTC" });
  const page = await context.newPage();
  const errors: string[] = [];
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(m.text());
  });
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`${base}/ui/`);
  await page.getByLabel("API key").fill(key);
  await page.getByRole("button", { name: "Log in" }).click();
  await page.getByRole("heading", { name: "Queues", level: 1 }).waitFor();
  return { context, page, errors };
}

/** Evaluates a JavaScript expression in the page. */
export async function inPage<T>(page: Page, expression: string): Promise<T> {
  const value: unknown = await page.evaluate(expression);
  return value as T;
}

/** axe-core's serious and critical violations on the current page. */
export async function axe(page: Page): Promise<string[]> {
  const source = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
  // Evaluated through the DevTools protocol, which the page's CSP (script-src 'self') allows.
  await page.evaluate(source);
  const violations = await inPage<Array<{ id: string; impact: string; help: string; targets: string[] }>>(
    page,
    `axe.run().then((r) => r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, targets: v.nodes.slice(0, 3).map((n) => n.target.join(" ")) })))`,
  );
  return violations.filter((v) => v.impact === "serious" || v.impact === "critical").map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.targets.join(", ")}`);
}

/** What the page shows that could run code: must all be zero/null for hostile data. */
export function inertness(page: Page): Promise<Record<string, number | null>> {
  return inPage<Record<string, number | null>>(
    page,
    `({ pwned: window.__pwned ?? null, imgs: document.querySelectorAll("img").length,
        scripts: [...document.querySelectorAll("script")].filter((x) => !x.src).length,
        jsLinks: document.querySelectorAll('a[href^="javascript:"]').length })`,
  );
}

/** The HTTP API of the server at `base()`, called with a key (`defaultKey` unless given). */
export function apiClient(base: () => string, defaultKey: string) {
  async function api<T = Record<string, unknown>>(method: string, path: string, body?: unknown, key = defaultKey): Promise<{ status: number; json: T }> {
    const res = await fetch(`${base()}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    return { status: res.status, json: (text ? JSON.parse(text) : null) as T };
  }
  async function enqueue(queue: string, name: string, data: unknown, options: Record<string, unknown> = {}): Promise<string> {
    const r = await api<{ jobId: string }>("POST", `/v1/queues/${queue}/jobs`, { name, data, options });
    expect(r.status).toBe(202);
    return r.json.jobId;
  }
  async function untilState<J extends { state: string }>(id: string, state: string, timeoutMs = 15_000): Promise<J> {
    return waitFor(
      async () => {
        const job = (await api<J>("GET", `/v1/jobs/${id}`)).json;
        return job.state === state ? job : null;
      },
      { timeoutMs, intervalMs: 50, description: `job ${id} to be ${state}` },
    );
  }
  return { api, enqueue, untilState };
}
