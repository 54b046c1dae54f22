/**
 * deploy/prometheus/alerts.yml checked and unit-tested by Prometheus's own promtool (Debian
 * package `prometheus`), every alert covered; and each alert's tests shown to bite: with that
 * alert's expression replaced by one that never fires, `promtool test rules` fails.
 */
import { execFile } from "node:child_process";
import { copyFile, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { ROOT } from "../helpers/cli.js";
import { PROMTOOL_BIN } from "../helpers/prometheus.js";
import { TempDirs } from "../helpers/temp.js";

const run = promisify(execFile);
const dir = join(ROOT, "deploy/prometheus");
const temp = new TempDirs();
afterAll(() => temp.removeAll());

async function promtool(args: string[], cwd: string): Promise<{ ok: boolean; output: string }> {
  try {
    const { stdout, stderr } = await run(PROMTOOL_BIN, args, { cwd });
    return { ok: true, output: stdout + stderr };
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string; message: string };
    return { ok: false, output: `${e.stdout ?? ""}${e.stderr ?? ""}${e.message}` };
  }
}

async function alertNames(): Promise<string[]> {
  const rules = await readFile(join(dir, "alerts.yml"), "utf8");
  return [...rules.matchAll(/^\s*- alert: (\w+)$/gm)].map((m) => m[1]!);
}

describe("alert rules", () => {
  it("pass promtool check rules and promtool test rules", async () => {
    const check = await promtool(["check", "rules", "alerts.yml"], dir);
    expect(check.output).toMatch(/SUCCESS: 6 rules found/);
    expect(check.ok).toBe(true);
    const test = await promtool(["test", "rules", "alerts.test.yml"], dir);
    expect(test.output).toMatch(/SUCCESS/);
    expect(test.ok).toBe(true);
  });

  it("every alert has a firing and a quiet case, and the relay-lag alert watches the outbox relay's metric", async () => {
    const tests = await readFile(join(dir, "alerts.test.yml"), "utf8");
    const names = await alertNames();
    expect(names).toEqual([
      "ConveyorOldestJobOverSLO",
      "ConveyorDeadLetterIngestion",
      "ConveyorBacklogWithoutWorkers",
      "ConveyorLeaseExpirySpike",
      "ConveyorOutboxRelayLag",
      "ConveyorStoreUnreadable",
    ]);
    for (const name of names) {
      const cases = [...tests.matchAll(new RegExp(`alertname: ${name}\\n\\s+exp_alerts:(.*)`, "g"))].map((m) => m[1]!.trim());
      expect(cases, name).toContain("[]");
      expect(
        cases.filter((c) => c === ""),
        name,
      ).not.toHaveLength(0);
    }
    expect(await readFile(join(dir, "alerts.yml"), "utf8")).toMatch(/expr: max\(conveyor_outbox_relay_lag_seconds\) > 60/);
  });

  it("each alert's tests fail when its expression is broken", async () => {
    const rules = await readFile(join(dir, "alerts.yml"), "utf8");
    for (const name of await alertNames()) {
      const work = await temp.make();
      // Replace this alert's expression (one line, or a block) with one that never fires.
      const broken = rules.replace(new RegExp(`(- alert: ${name}\\n\\s+expr: )(\\|\\n(?:\\s{10}.*\\n)+|.*\\n)`), "$1vector(0) > 1\n");
      expect(broken, name).not.toBe(rules);
      await writeFile(join(work, "alerts.yml"), broken);
      await copyFile(join(dir, "alerts.test.yml"), join(work, "alerts.test.yml"));
      expect((await promtool(["check", "rules", "alerts.yml"], work)).ok, name).toBe(true);
      const result = await promtool(["test", "rules", "alerts.test.yml"], work);
      expect(result.ok, `${name}: the tests still pass with the alert broken`).toBe(false);
      expect(result.output).toContain(name);
    }
  });
});
