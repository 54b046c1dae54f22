/**
 * `conveyor schedules ls|add|rm`, run as a real process against an SQLite file.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ScheduleInfo } from "../../src/index.js";
import { runCli } from "../helpers/cli.js";
import { TempDirs } from "../helpers/temp.js";

const temp = new TempDirs();
let db: string;

beforeAll(async () => {
  db = `sqlite:${await temp.file("schedules.db")}`;
});
afterAll(() => temp.removeAll());

describe("conveyor schedules", () => {
  // Nine CLI processes in a row: on a loaded machine each start alone can take seconds.
  it("add creates then replaces a schedule; ls shows it with its next run; rm deletes it", { timeout: 120_000 }, async () => {
    const add = await runCli([
      "schedules",
      "add",
      "digest",
      "--db",
      db,
      "--queue",
      "reports",
      "--cron",
      "0 8 * * MON",
      "--tz",
      "Europe/Berlin",
      "--name",
      "send-digest",
      "--data",
      '{"to":"team"}',
      "--misfire",
      "all",
      "--misfire-limit",
      "5",
      "--attempts",
      "4",
    ]);
    expect(add.stderr).toBe("");
    expect(add.code).toBe(0);
    expect(add.stdout).toMatch(/^created reports\/digest; next run \d{4}-\d\d-\d\dT\d\d:00:00\.000Z/);
    const again = await runCli([
      "schedules",
      "add",
      "digest",
      "--db",
      db,
      "--queue",
      "reports",
      "--cron",
      "0 9 * * MON",
      "--tz",
      "Europe/Berlin",
      "--name",
      "send-digest",
    ]);
    expect(again.stdout).toMatch(/^replaced reports\/digest/);
    await runCli([
      "schedules",
      "add",
      "tick",
      "--db",
      db,
      "--queue",
      "other",
      "--cron",
      "*/10 * * * * *",
      "--name",
      "t",
      "--misfire",
      "skip",
      "--grace-ms",
      "2000",
    ]);

    const ls = await runCli(["schedules", "ls", "--db", db]);
    expect(ls.code).toBe(0);
    expect(ls.stdout).toMatch(/queue\s+id\s+cron\s+tz\s+job\s+misfire\s+last tick\s+next run/);
    expect(ls.stdout).toMatch(/reports\s+digest\s+0 9 \* \* MON\s+Europe\/Berlin\s+send-digest\s+once\s+-\s+\d{4}-/);
    const json = JSON.parse((await runCli(["schedules", "ls", "--db", db, "--queue", "other", "--json"])).stdout) as ScheduleInfo[];
    expect(json).toHaveLength(1);
    expect(json[0]).toMatchObject({
      queue: "other",
      id: "tick",
      definition: { cron: "*/10 * * * * *", misfire: { policy: "skip", graceMs: 2000 } },
      lastTickAt: null,
    });
    expect(json[0]!.nextRunAt! % 10_000).toBe(0);

    const rm = await runCli(["schedules", "rm", "digest", "--db", db, "--queue", "reports"]);
    expect(rm).toMatchObject({ code: 0, stdout: "removed reports/digest\n" });
    expect((await runCli(["schedules", "rm", "digest", "--db", db, "--queue", "reports"])).code).toBe(1);
    expect((await runCli(["schedules", "ls", "--db", db, "--queue", "reports"])).stdout.trim()).toBe("no schedules");
  });

  it("bad input: a clear message and a non-zero exit, nothing stored", async () => {
    const badCron = await runCli(["schedules", "add", "x", "--db", db, "--queue", "q", "--cron", "61 * * * *", "--name", "n"]);
    expect(badCron.code).toBe(1);
    expect(badCron.stderr).toMatch(/cron pattern "61 \* \* \* \*" is not valid/);
    const badTz = await runCli(["schedules", "add", "x", "--db", db, "--queue", "q", "--cron", "* * * * *", "--tz", "Nowhere/City", "--name", "n"]);
    expect(badTz.code).toBe(1);
    expect(badTz.stderr).toMatch(/IANA time zone/);
    const noQueue = await runCli(["schedules", "add", "x", "--db", db, "--cron", "* * * * *", "--name", "n"]);
    expect(noQueue.code).toBe(2);
    expect(noQueue.stderr).toMatch(/--queue is required/);
    const badPolicy = await runCli(["schedules", "add", "x", "--db", db, "--queue", "q", "--cron", "* * * * *", "--name", "n", "--misfire", "later"]);
    expect(badPolicy.code).toBe(2);
    expect((await runCli(["schedules", "ls", "--db", db, "--queue", "q"])).stdout.trim()).toBe("no schedules");
  });
});
