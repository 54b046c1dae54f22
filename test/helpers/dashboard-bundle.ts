import { execFileSync } from "node:child_process";
import { ROOT } from "./cli.js";

/**
 * Builds the dashboard's client bundle (dist/src/dashboard/assets) with the same script as
 * `npm run build`, so a test that serves the dashboard works from a fresh clone (`npm ci && npm
 * test`, no build) and does not depend on another test file having built it first.
 */
export function buildDashboardBundle(): void {
  execFileSync(process.execPath, ["scripts/build-dashboard.mjs"], { cwd: ROOT, stdio: "pipe" });
}
