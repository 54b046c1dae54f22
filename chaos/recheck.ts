/**
 * `npx tsx chaos/recheck.ts DIR…`: runs the checker again on the evidence a scenario saved
 * (DIR/check-input.json), e.g. after changing the checker, and prints the table.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { check, type CheckInput } from "./checker.js";
import type { ScenarioResult } from "./harness.js";
import { formatTable } from "./report.js";

const results: ScenarioResult[] = [];
for (const dir of process.argv.slice(2)) {
  const input = JSON.parse(readFileSync(join(dir, "check-input.json"), "utf8")) as CheckInput;
  const saved = JSON.parse(readFileSync(join(dir, "report.json"), "utf8")) as ScenarioResult;
  const result = check(input);
  // The harness adds this bound itself (it is not in the checker's input).
  const leftover = saved.check?.bounds.find((b) => b.name === "processes left behind after the workers exited");
  if (leftover) result.bounds.push(leftover);
  result.ok = result.bounds.every((b) => b.ok);
  results.push({ ...saved, check: result, ok: result.ok });
}
if (results.length === 0) {
  console.error("usage: npx tsx chaos/recheck.ts DIR… (scenario directories with check-input.json)");
  process.exit(2);
}
console.log(formatTable(results));
process.exit(results.every((r) => r.ok) ? 0 : 1);
