/** `conveyor stats` shows each queue's flow limits and hold, in the table and as JSON. */
import { afterAll, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { Queue } from "../../src/index.js";
import { runCli } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs();
afterAll(() => temp.removeAll());

it("conveyor stats lists the limits of limited queues", async () => {
  const path = await temp.file("jobs.db");
  const backend = new SqliteBackend({ path });
  try {
    const exports = new Queue("exports", { backend });
    await exports.add("export-report", {});
    await exports.setLimits({ rate: { max: 30, durationMs: 60_000 }, maxRunning: 5, maxRunningPerName: { "export-report": 3 } });
    await new Queue("email", { backend }).add("welcome", {});
  } finally {
    await backend.close();
  }
  const text = await runCli(["stats", "--db", `sqlite:${path}`, "--window", "0"]);
  expect(text.code).toBe(0);
  expect(text.stdout).toMatch(/flow control/);
  expect(text.stdout).toMatch(/exports\s+30 \/ 1m 0s\s+5\s+export-report=3\s+-/);
  expect(text.stdout).not.toMatch(/^email\s+\d+ \//m);
  const json = await runCli(["stats", "--db", `sqlite:${path}`, "--json", "--window", "0"]);
  const queues = JSON.parse(json.stdout) as Array<{ queue: string; flow: unknown }>;
  expect(queues.find((q) => q.queue === "exports")!.flow).toEqual({
    limits: { rate: { max: 30, durationMs: 60_000 }, maxRunning: 5, maxRunningPerName: { "export-report": 3 } },
    heldUntil: null,
  });
  expect(queues.find((q) => q.queue === "email")!.flow).toBeNull();
});
