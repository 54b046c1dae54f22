/**
 * The `schedule` chaos scenario: its checker against planted faults (pure, fast), and a short run
 * on SQLite in the suite (CHAOS_SCHEDULE_SECONDS, default 15 s of faults): three workers and a
 * scheduler-only process, two clocks skewed by 2.5 s, SIGKILLs around tick times and a blackout.
 * `npm run chaos -- --scenario schedule --backend B --seed S` replays a run (PostgreSQL, Redis too).
 */
import { describe, expect, it } from "vitest";
import {
  checkScheduleEvidence,
  formatScheduleTable,
  runScheduleScenario,
  type NodeEvent,
  type ScheduleEvidence,
  type StoredTickJob,
} from "../../chaos/schedule-scenario.js";
import { parseSeed } from "../../chaos/prng.js";
import { normalizeMisfire, type ScheduleDefinition } from "../../src/core/schedule.js";

const SECONDS = Number(process.env.CHAOS_SCHEDULE_SECONDS ?? 15);
const SEED = parseSeed(process.env.CHAOS_SEED ?? "20261201");

const T0 = Date.parse("2030-01-01T00:00:00Z");
const iso = (ms: number) => new Date(ms).toISOString();

function definition(cron: string, misfire: ScheduleDefinition["misfire"]["policy"]): ScheduleDefinition & { anchorAt: number; lastTickAt: number } {
  return {
    cron,
    tz: "UTC",
    name: "tick",
    data: {},
    options: {},
    misfire: { ...normalizeMisfire(misfire), graceMs: 3_000 },
    anchorAt: T0,
    lastTickAt: T0 + 10_000,
  };
}

/** A clean run: ticks 1..10 s of an every-second "all" schedule, each fired once, run once; one kill and one blackout. */
function clean(): ScheduleEvidence {
  const jobs: StoredTickJob[] = [];
  const fired: ScheduleEvidence["fired"] = [];
  const runs: ScheduleEvidence["runs"] = [];
  for (let s = 1; s <= 10; s++) {
    const tick = T0 + s * 1000;
    const id = `cron_q~all~${iso(tick)}`;
    jobs.push({ id, state: "completed", meta: { id: "all", tick: iso(tick), since: iso(tick - 1000) } });
    fired.push({ t: tick, pid: 1, id: "all", tickAt: tick, jobs: [{ id, duplicate: false }] });
    runs.push(
      { type: "start", t: tick + 10, pid: 1, id, schedule: "all", tick: iso(tick), attempt: 1 },
      { type: "end", t: tick + 50, pid: 1, id, schedule: "all", tick: iso(tick), attempt: 1 },
    );
  }
  const events: NodeEvent[] = [
    { t: T0 - 5_000, type: "spawn", node: "w0", pid: 1 },
    { t: T0 - 4_000, type: "ready", node: "w0", pid: 1 },
    { t: T0 + 20_000, type: "death", node: "w0", pid: 1, killed: true },
    { t: T0 + 22_000, type: "ready", node: "w0", pid: 2 },
  ];
  return { definitions: { all: definition("* * * * * *", "all") }, jobs, fired, runs, events, torn: 0 };
}

describe("schedule chaos checker", () => {
  it("passes a clean run", () => {
    const verdict = checkScheduleEvidence(clean());
    expect(verdict.problems).toEqual([]);
    expect(verdict.ok).toBe(true);
  });

  it("catches a second firing that only the job id kept out", () => {
    const e = clean();
    e.fired.push({ ...e.fired[3]!, pid: 9, jobs: [{ id: e.fired[3]!.jobs[0]!.id, duplicate: true }] });
    expect(checkScheduleEvidence(e).problems.join("\n")).toMatch(/a second firing passed the compare-and-set/);
  });

  it("catches a tick skipped under misfire all, and a gap in the chain of misfire once", () => {
    const e = clean();
    e.jobs.splice(4, 1);
    expect(checkScheduleEvidence(e).problems.join("\n")).toMatch(/misfire all\): tick 2030-01-01T00:00:05.000Z has no job/);
    const once = clean();
    once.definitions = { all: { ...definition("* * * * * *", "once") } };
    once.jobs.splice(4, 1);
    expect(checkScheduleEvidence(once).problems.join("\n")).toMatch(
      /misfire once\): job of 2030-01-01T00:00:06.000Z stands for ticks since 2030-01-01T00:00:05.000Z/,
    );
  });

  it("allows a skip-policy drop only when no process was up to fire the tick on time by its own clock", () => {
    const e = clean();
    e.definitions = { all: definition("* * * * * *", "skip") };
    e.jobs.splice(4, 1); // 00:00:05 dropped while the process was up: not explained
    for (const f of e.fired.slice(5)) f.t = Math.max(f.t, T0 + 9_000); // the firings past it came 4 s late
    expect(checkScheduleEvidence(e).problems.join("\n")).toMatch(/misfire skip\): tick 2030-01-01T00:00:05.000Z was dropped although a scheduler was up/);
    // The only process died just before the tick and was back 3.5 s later: the drop is the policy.
    e.events.splice(
      2,
      0,
      { t: T0 + 4_500, type: "death", node: "w0", pid: 1, killed: true },
      { t: T0 + 4_600, type: "spawn", node: "w0", pid: 3 },
      { t: T0 + 8_000, type: "ready", node: "w0", pid: 3 },
    );
    expect(checkScheduleEvidence(e).problems).toEqual([]);
    // A process whose clock runs 2 s behind was up through 00:00:07 by real time: it should have fired 00:00:05.
    e.events.push(
      { t: T0, type: "spawn", node: "s0", pid: 4, skewMs: -2_000 },
      { t: T0 + 1_000, type: "ready", node: "s0", pid: 4 },
      { t: T0 + 9_500, type: "death", node: "s0", pid: 4, killed: true },
    );
    expect(checkScheduleEvidence(e).problems.join("\n")).toMatch(/00:00:05.000Z was dropped although a scheduler was up/);
  });

  it("catches a tick run twice without a kill, and a job left unfinished", () => {
    const e = clean();
    const run = e.runs[1]!;
    e.runs.push({ ...run, t: run.t + 5_000, pid: 2 });
    e.jobs[7] = { ...e.jobs[7]!, state: "waiting" };
    const problems = checkScheduleEvidence(e).problems.join("\n");
    expect(problems).toMatch(/ran again after a completed run by pid 1, which did not die/);
    expect(problems).toMatch(/ended waiting/);
  });
});

describe("schedule chaos, short run", () => {
  it(`sqlite: no tick fired twice or skipped outside its misfire policy (${SECONDS} s of faults)`, { timeout: (SECONDS + 150) * 1000 }, async () => {
    const result = await runScheduleScenario({ backend: "sqlite", seconds: SECONDS, seed: SEED, log: () => undefined });
    console.log(formatScheduleTable(result));
    expect(result.problems, `seed ${SEED}; evidence in ${result.dir}`).toEqual([]);
    expect(result.ok).toBe(true);
  });
});
