/**
 * `conveyor-jobs/metrics` for a user who installed prom-client but not `@opentelemetry/api`
 * (prom-client depends on the API itself, but under a strict layout such as pnpm's it is not
 * resolvable from conveyor-jobs). A copy of the sources in a temp folder, whose node_modules holds
 * prom-client only, imports the module's index, serves one scrape, and gets a clear error from
 * ConveyorTracing, the one part that needs the API; the CLI's loadTracing then runs without tracing.
 */
import { execFile } from "node:child_process";
import { cpSync, mkdirSync, realpathSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { ROOT } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs();
afterAll(() => temp.removeAll());

describe("conveyor-jobs/metrics without @opentelemetry/api", () => {
  it("imports, serves a scrape with ConveyorMetrics, and says what to install for ConveyorTracing", { timeout: 60_000 }, async () => {
    const app = await temp.make();
    cpSync(join(ROOT, "src"), join(app, "src"), { recursive: true });
    mkdirSync(join(app, "node_modules"));
    // prom-client's own dependencies (the API among them) stay in its real folder, as pnpm lays
    // them out: resolvable from prom-client, not from conveyor-jobs.
    symlinkSync(realpathSync(join(ROOT, "node_modules", "prom-client")), join(app, "node_modules", "prom-client"), "dir");
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "metrics-only-app", private: true, type: "module" }));
    writeFileSync(
      join(app, "main.ts"),
      `import { createRequire } from "node:module";
import { loadTracing } from "./src/cli/metrics.js";
import { ConveyorMetrics, ConveyorTracing, startMetricsServer } from "./src/observability/index.js";

let apiResolvable = true;
try { createRequire(import.meta.url).resolve("@opentelemetry/api"); } catch { apiResolvable = false; }
const metrics = new ConveyorMetrics();
const server = await startMetricsServer(metrics, { port: 0 });
const scrape = await fetch(\`http://127.0.0.1:\${server.address.port}/metrics\`);
const body = await scrape.text();
await server.close();
let tracingError = "";
try { new ConveyorTracing(); } catch (error) { tracingError = (error as Error).message; }
// The CLI (conveyor worker / serve) runs without tracing then, rather than failing.
const cliTracing = await loadTracing();
console.log(JSON.stringify({ apiResolvable, status: scrape.status, slots: body.includes("# TYPE conveyor_worker_slots gauge"), tracingError, cliTracing: cliTracing === null ? null : "on" }));
`,
    );
    const tsx = pathToFileURL(join(ROOT, "node_modules", "tsx", "dist", "loader.mjs")).href;
    const { stdout } = await promisify(execFile)(process.execPath, ["--import", tsx, "main.ts"], { cwd: app });
    const result = JSON.parse(stdout.trim()) as { apiResolvable: boolean; status: number; slots: boolean; tracingError: string; cliTracing: string | null };
    expect(result.apiResolvable).toBe(false);
    expect(result.status).toBe(200);
    expect(result.slots).toBe(true);
    expect(result.cliTracing).toBeNull();
    expect(result.tracingError).toMatch(/ConveyorTracing needs @opentelemetry\/api@1.*npm install @opentelemetry\/api/);
  });
});
