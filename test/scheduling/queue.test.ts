/**
 * The producer API of cron schedules (queue.schedule / unschedule / schedules, add with repeat),
 * its input checks, and the scheduler loop a Worker runs by default.
 */
import { afterEach, describe, expect, it } from "vitest";
import { FakeClock } from "../../src/core/clock.js";
import { InvalidInputError } from "../../src/core/errors.js";
import { Queue } from "../../src/producer/queue.js";
import { Worker } from "../../src/runtime/worker.js";
import { fireDueSchedules } from "../../src/maintenance/scheduler.js";
import { createTestBackend, waitFor } from "../../src/testing/index.js";
import { silentLogger } from "../../src/core/logger.js";
import { SqliteBackend } from "../../src/backend/sqlite/backend.js";
import { TempDirs } from "../helpers/temp.js";

const MINUTE = 60_000;
const open: Array<{ close(): Promise<unknown> }> = [];
const temp = new TempDirs("conveyor-schedule-");
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
  await temp.removeAll();
});

function setup(clock = new FakeClock()) {
  const backend = createTestBackend({ clock });
  open.push(backend);
  return { backend, clock, queue: new Queue("reports", { backend }) };
}

async function refused(promise: Promise<unknown>, message: RegExp, field?: string): Promise<void> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(InvalidInputError);
  expect((error as Error).message).toMatch(message);
  if (field !== undefined) expect((error as InvalidInputError).field).toBe(field);
}

describe("queue.schedule: input checks, each with a message that says what to do", () => {
  it("refuses a bad pattern, an unknown time zone, a pattern that never fires, and options a tick decides", async () => {
    const { queue } = setup();
    await refused(queue.schedule("a", { cron: "61 * * * *", name: "x" }), /cron pattern "61 \* \* \* \*" is not valid.*minute/, "cron");
    await refused(queue.schedule("a", { cron: "* * *", name: "x" }), /not valid/, "cron");
    await refused(queue.schedule("a", { cron: "", name: "x" }), /cron must be a pattern of 5 fields/, "cron");
    await refused(queue.schedule("a", { cron: "0 0 31 2 *", name: "x" }), /never fires/, "cron");
    await refused(queue.schedule("a", { cron: "* * * * *", tz: "Mars/Olympus_Mons", name: "x" }), /IANA time zone/, "tz");
    await refused(queue.schedule("a", { cron: "* * * * *", name: "bad name!" }), /job name/, "name");
    await refused(queue.schedule("a", { cron: "* * * * *", name: "x", options: { jobId: "mine" } as never }), /cannot set jobId/, "options.jobId");
    await refused(queue.schedule("a", { cron: "* * * * *", name: "x", options: { delayMs: 5 } as never }), /cannot set delayMs/);
    await refused(queue.schedule("a", { cron: "* * * * *", name: "x", options: { attempts: 0 } }), /attempts/);
    await refused(queue.schedule("a", { cron: "* * * * *", name: "x", misfire: "sometimes" as never }), /misfire must be/, "misfire");
    await refused(queue.schedule("a", { cron: "* * * * *", name: "x", misfire: { policy: "all", limit: 5000 } }), /limit 1-1000/);
    await refused(queue.schedule("a", { cron: "* * * * *", name: "x", every: 5 } as never), /unknown schedule field "every"/);
    await refused(queue.schedule("no spaces", { cron: "* * * * *", name: "x" }), /schedule name must be/, "id");
    expect(await queue.schedules()).toEqual([]);
  });

  it("takes a seconds field, names, nicknames and a time zone", async () => {
    const { queue } = setup();
    for (const cron of ["*/10 * * * * *", "0 8 * * MON", "@daily", "0 0 L * *"]) {
      await queue.schedule(`s${cron.length}`, { cron, tz: "Europe/Berlin", name: "x" });
    }
    expect(await queue.schedules()).toHaveLength(4);
  });
});

describe("queue.schedules / unschedule / add({ repeat })", () => {
  it("lists this queue's schedules with their next run time; unschedule removes one", async () => {
    const { queue, backend, clock } = setup(new FakeClock(Date.parse("2030-01-07T07:00:00Z"))); // a Monday
    const other = new Queue("other", { backend });
    await queue.schedule("weekly", { cron: "0 8 * * MON", tz: "Europe/Berlin", name: "digest", data: { scope: "all" } });
    await other.schedule("weekly", { cron: "* * * * *", name: "digest" });
    const [weekly] = await queue.schedules();
    expect(weekly).toMatchObject({ id: "weekly", queue: "reports" });
    // 08:00 Berlin is 07:00Z in winter, which is now: only ticks after the anchor fire, so next Monday.
    expect(weekly!.nextRunAt).toBe(Date.parse("2030-01-14T07:00:00Z"));
    clock.advance(MINUTE);
    expect((await other.schedules())[0]!.nextRunAt).toBe(Date.parse("2030-01-07T07:01:00Z"));
    expect(await queue.unschedule("weekly")).toBe(true);
    expect(await queue.unschedule("weekly")).toBe(false);
    expect(await queue.schedules()).toEqual([]);
    expect(await other.schedules()).toHaveLength(1);
  });

  it("add(name, data, { repeat: { pattern, tz } }) upserts one schedule per name, pattern and zone", async () => {
    const { queue, backend, clock } = setup();
    const first = await queue.add("digest", { to: "team" }, { repeat: { pattern: "0 8 * * MON", tz: "Europe/Berlin" }, attempts: 5 });
    const again = await queue.add("digest", { to: "team" }, { repeat: { pattern: "0 8 * * MON", tz: "Europe/Berlin" }, attempts: 5 });
    expect(first.duplicate).toBe(false);
    expect(again).toEqual({ id: first.id, duplicate: true });
    expect(first.id).toMatch(/^repeat:digest:[0-9a-f]{12}$/);
    const keyed = await queue.add("digest", {}, { repeat: { pattern: "* * * * *", key: "every-minute", misfire: "skip" } });
    expect(keyed.id).toBe("every-minute");
    const list = await queue.schedules();
    expect(list.map((s) => s.id).sort()).toEqual([first.id, "every-minute"].sort());
    expect(list.find((s) => s.id === first.id)!.definition).toMatchObject({
      cron: "0 8 * * MON",
      tz: "Europe/Berlin",
      name: "digest",
      data: { to: "team" },
      options: { attempts: 5 },
    });
    clock.advance(MINUTE);
    await fireDueSchedules(backend);
    const jobs = await queue.list();
    expect(jobs.map((j) => [j.name, j.meta])).toEqual([
      ["digest", { schedule: { id: "every-minute", tick: new Date(clock.now()).toISOString(), since: new Date(clock.now() - MINUTE).toISOString() } }],
    ]);
    await refused(queue.add("digest", {}, { repeat: { pattern: "* * * * *" }, jobId: "x" }), /cannot take jobId/);
    await refused(queue.add("digest", {}, { repeat: { pattern: "nope" } }), /not valid/);
  });
});

describe("the scheduler loop in a Worker", () => {
  it("fires a seconds schedule on the real clock: ticks run as jobs, one each, until the worker closes", async () => {
    const path = await temp.file("jobs.db");
    const backend = new SqliteBackend({ path });
    open.push(backend);
    const queue = new Queue("ticks", { backend });
    await queue.schedule("each-second", { cron: "* * * * * *", name: "tick", misfire: "all" });
    const ran: string[] = [];
    const worker = new Worker({ backend, queues: "ticks", logger: silentLogger, handlers: { tick: async (job) => void ran.push(job.id) } });
    open.push(worker);
    await waitFor(() => ran.length >= 3, { timeoutMs: 20_000 });
    await worker.close();
    expect(new Set(ran).size).toBe(ran.length);
    for (const id of ran) expect(id).toMatch(/^cron_ticks~each-second~\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z$/);
  });

  it("a worker with scheduler: false fires nothing; one with it on (the default) fires the due tick when it starts", async () => {
    const clock = new FakeClock();
    const { backend, queue } = setup(clock);
    await queue.schedule("m", { cron: "* * * * *", name: "tick" });
    clock.advance(MINUTE + 1);
    const off = new Worker({ backend, queues: "reports", scheduler: false, logger: silentLogger, handlers: { tick: async () => {} } });
    open.push(off);
    await new Promise((r) => setTimeout(r, 200));
    expect(await queue.list()).toEqual([]);
    await off.close();
    const on = new Worker({ backend, queues: "reports", logger: silentLogger, handlers: { tick: async () => {} } });
    open.push(on);
    await waitFor(async () => (await queue.list()).length === 1);
    await on.close();
  });
});
