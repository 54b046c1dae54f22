/**
 * Interactive API docs at /v1/docs: Swagger UI from the package's own files, rendered in
 * Debian's Chromium (playwright-core) with every request going to this server (no CDN), showing
 * the routes of the OpenAPI document, and trying one out against the live API.
 */
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createServer } from "../../src/http/index.js";
import { createTestBackend } from "../../src/testing/index.js";
import { launchChromium } from "../dashboard/browser.js";

let browser: Browser;
const backend = createTestBackend();
let app: Awaited<ReturnType<typeof createServer>>;
let base: string;

beforeAll(async () => {
  app = await createServer({ backend, apiKeys: false, logger: false });
  await app.listen({ port: 0, host: "127.0.0.1" });
  base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
  browser = await launchChromium();
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await app?.close();
  await backend.close();
});

describe("GET /v1/docs", () => {
  it("serves the page and its files itself, with a CSP that allows nothing from elsewhere", async () => {
    const page = await fetch(`${base}/v1/docs`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toMatch(/^text\/html/);
    expect(page.headers.get("content-security-policy")).toMatch(/default-src 'self'/);
    const html = await page.text();
    expect(html).not.toMatch(/https?:\/\//);
    const bundle = await fetch(`${base}/v1/docs/swagger-ui-bundle.js`);
    expect(bundle.status).toBe(200);
    expect(bundle.headers.get("content-type")).toMatch(/javascript/);
    expect((await bundle.arrayBuffer()).byteLength).toBeGreaterThan(100_000);
    const missing = await fetch(`${base}/v1/docs/nope.js`);
    expect(missing.status).toBe(404);
  });

  it("renders every route in Chromium from this server alone, and tries one out", { timeout: 60_000 }, async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    const elsewhere: string[] = [];
    page.on("request", (request) => {
      if (!request.url().startsWith(base) && !request.url().startsWith("data:")) elsewhere.push(request.url());
    });
    const errors: string[] = [];
    page.on("pageerror", (error) => errors.push(error.message));
    await page.goto(`${base}/v1/docs`);
    await page.locator(".opblock-summary-path", { hasText: "/events" }).first().waitFor({ timeout: 30_000 });
    const doc = (await (await fetch(`${base}/v1/openapi.json`)).json()) as { paths: Record<string, Record<string, unknown>> };
    const shown = await page.locator(".opblock").count();
    expect(shown).toBe(Object.values(doc.paths).reduce((n, methods) => n + Object.keys(methods).length, 0));

    // Try out GET /health against the live server.
    const health = page.locator(".opblock-get", { has: page.locator(".opblock-summary-path", { hasText: /^\/health$/ }) });
    await health.locator(".opblock-summary").click();
    await health.locator("button.try-out__btn").click();
    await health.locator("button.execute").click();
    await expect
      .poll(async () => health.locator(".live-responses-table tbody .response-col_status").first().textContent(), { timeout: 20_000 })
      .toContain("200");
    expect(elsewhere).toEqual([]);
    expect(errors).toEqual([]);
    await context.close();
  });
});
