/**
 * `npm run chaos -- --scenario schedule --backend sqlite|postgres|redis [--seconds N] [--seed S]`
 *
 * Cron schedules under faults. Four processes share one store (chaos/schedule-node.ts): three
 * workers, each running the scheduler loop a worker runs by default, and one scheduler-only
 * process (as `conveyor serve` runs it). Two of them have clocks skewed by ±SKEW_MS. Three
 * schedules tick every 1, 2 and 3 seconds with the three misfire policies. The runner SIGKILLs a
 * random process around tick times (a few ms before or after a second boundary) and, now and
 * then, all of them at once for a few seconds (a blackout: downtime the misfire policies must
 * handle). Then the faults stop, the schedules are removed, the jobs drain, and the checker
 * proves from the store and the ledgers:
 * - no tick was fired twice: every firing a process won got `duplicate: false` from the store
 *   for each job (the compare-and-set, not the job id, kept the second one out), and no tick
 *   appears in two firings;
 * - no tick was skipped outside the misfire policy: "all" has a job for every tick; "once" has
 *   jobs whose (since, tick] intervals cover every tick without gap or overlap; "skip" misses a
 *   tick only when no process was up to fire it on time by its own (skewed) clock;
 * - every tick's job completed, and ran more than once only when a kill of its worker explains it.
 * Evidence stays in .tmp/chaos/schedule-<backend>-<seed>/.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createWriteStream, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { openBackend } from "../src/backend/open.js";
import { nextTickAfter, tickMetaOf, type ScheduleDefinition, type ScheduleOptions, type TickMeta } from "../src/core/schedule.js";
import { Queue } from "../src/producer/queue.js";
import { ROOT } from "./fleet.js";
import { readLogs } from "./ledger.js";
import { Prng } from "./prng.js";
import { openStore, type BackendKind } from "./stores.js";

export const SCHEDULE_QUEUE = "chaos-cron";
/** Lease of the scenario's workers: short, so a killed worker's job runs again soon. */
export const SCHEDULE_LEASE_MS = 3_000;

export interface FiredRecord {
  t: number;
  pid: number;
  id: string;
  tickAt: number;
  jobs: Array<{ id: string; duplicate: boolean }>;
}

export interface RunRecord {
  type: "start" | "end";
  t: number;
  pid: number;
  id: string;
  schedule: string;
  tick: string;
  attempt: number;
}

/** How far the two skewed processes' clocks are off, ms (one ahead, one behind). */
export const SKEW_MS = 2_500;
const SKIP_GRACE_MS = 3_000;

export const CHAOS_SCHEDULES: Record<string, ScheduleOptions> = {
  "every-second-all": { cron: "* * * * * *", name: "tick", misfire: { policy: "all", limit: 1000 } },
  "two-seconds-once": { cron: "*/2 * * * * *", name: "tick", misfire: "once" },
  "three-seconds-skip": { cron: "*/3 * * * * *", name: "tick", misfire: { policy: "skip", graceMs: SKIP_GRACE_MS } },
};

interface NodeSpec {
  name: string;
  role: "worker" | "scheduler";
  skewMs: number;
}

const NODES: readonly NodeSpec[] = [
  { name: "w0", role: "worker", skewMs: 0 },
  { name: "w1", role: "worker", skewMs: SKEW_MS },
  { name: "w2", role: "worker", skewMs: 0 },
  { name: "s0", role: "scheduler", skewMs: -SKEW_MS },
];

/** What happened to the processes, by the runner's clock. */
export interface NodeEvent {
  t: number;
  type: "spawn" | "ready" | "death";
  node: string;
  pid: number;
  /** death: whether the runner killed it. */
  killed?: boolean;
  /** spawn: how far the process's scheduler clock is off, ms. */
  skewMs?: number;
}

/** A scheduler's pass after its wake-up may take this long on a loaded machine (list + fire), ms. */
const PASS_SLACK_MS = 2_000;

/**
 * Real-time intervals during which each process was up (from "ready" to its death), with its
 * clock skew. A process up through [T - skew, T - skew + PASS_SLACK_MS] fires tick T on time.
 */
export function upIntervals(events: readonly NodeEvent[]): Array<{ pid: number; from: number; to: number; skewMs: number }> {
  const skew = new Map<number, number>();
  const ready = new Map<number, number>();
  const out: Array<{ pid: number; from: number; to: number; skewMs: number }> = [];
  for (const e of [...events].sort((a, b) => a.t - b.t)) {
    if (e.type === "spawn") skew.set(e.pid, e.skewMs ?? 0);
    else if (e.type === "ready") ready.set(e.pid, e.t);
    else if (ready.has(e.pid)) {
      out.push({ pid: e.pid, from: ready.get(e.pid)!, to: e.t, skewMs: skew.get(e.pid) ?? 0 });
      ready.delete(e.pid);
    }
  }
  for (const [pid, from] of ready) out.push({ pid, from, to: Infinity, skewMs: skew.get(pid) ?? 0 });
  return out;
}

/** One stored job of the scenario's queue at the end. */
export interface StoredTickJob {
  id: string;
  state: string;
  meta: TickMeta;
}

export interface ScheduleEvidence {
  definitions: Record<string, ScheduleDefinition & { anchorAt: number; lastTickAt: number | null }>;
  jobs: StoredTickJob[];
  fired: FiredRecord[];
  runs: RunRecord[];
  events: NodeEvent[];
  torn: number;
}

export interface ScheduleVerdict {
  ok: boolean;
  rows: Array<[string, string | number, string]>;
  problems: string[];
}

/**
 * Instants when no process was up (from the death that left none up to the next "ready"), as
 * [from, to] ranges. Counted from the first "ready" on, and only outages that ended: the start-up
 * and the final shutdown are not blackouts.
 */
export function outages(events: readonly NodeEvent[]): Array<[number, number]> {
  const up = new Set<number>();
  const out: Array<[number, number]> = [];
  let downSince: number | null = null;
  let started = false;
  for (const e of [...events].sort((a, b) => a.t - b.t)) {
    if (e.type === "ready") {
      started = true;
      up.add(e.pid);
      if (downSince !== null) out.push([downSince, e.t]);
      downSince = null;
    } else if (e.type === "death") {
      up.delete(e.pid);
      if (started && up.size === 0 && downSince === null) downSince = e.t;
    }
  }
  return out;
}

/** The checker: a pure function of the evidence (unit-tested with planted faults). */
export function checkScheduleEvidence(evidence: ScheduleEvidence): ScheduleVerdict {
  const problems: string[] = [];
  const rows: ScheduleVerdict["rows"] = [];
  const byTick = new Map<string, StoredTickJob>();
  for (const job of evidence.jobs) byTick.set(`${job.meta.id} ${job.meta.tick}`, job);
  const blackouts = outages(evidence.events);
  const up = upIntervals(evidence.events);

  // 1. No tick fired twice.
  let duplicateAnswers = 0;
  const firedTicks = new Map<string, number>();
  for (const f of evidence.fired) {
    for (const j of f.jobs) {
      if (j.duplicate) {
        duplicateAnswers++;
        problems.push(
          `firing of ${f.id} at ${new Date(f.tickAt).toISOString()} by pid ${f.pid} met an existing job ${j.id}: a second firing passed the compare-and-set`,
        );
      }
      firedTicks.set(j.id, (firedTicks.get(j.id) ?? 0) + 1);
    }
  }
  const firedTwice = [...firedTicks.values()].filter((n) => n > 1).length;
  if (firedTwice > 0) problems.push(`${firedTwice} tick jobs appear in two winning firings`);
  rows.push(["firings won (all processes)", evidence.fired.length, ""]);
  rows.push(["firings that met an existing job (CAS passed twice)", duplicateAnswers, "= 0"]);
  rows.push(["ticks in two winning firings", firedTwice, "= 0"]);

  // 2. No tick skipped outside the misfire policy.
  for (const [id, def] of Object.entries(evidence.definitions)) {
    const jobs = evidence.jobs.filter((j) => j.meta.id === id).sort((a, b) => Date.parse(a.meta.tick) - Date.parse(b.meta.tick));
    const last = Math.max(def.lastTickAt ?? def.anchorAt, ...jobs.map((j) => Date.parse(j.meta.tick)));
    const expected: number[] = [];
    for (let t = nextTickAfter(def, def.anchorAt); t !== null && t <= last; t = nextTickAfter(def, t)) expected.push(t);
    const have = new Set(jobs.map((j) => Date.parse(j.meta.tick)));
    const missing = expected.filter((t) => !have.has(t));
    let violations = 0;
    let allowedMissing = 0;
    if (def.misfire.policy === "all") {
      violations = missing.length;
      for (const t of missing.slice(0, 5)) problems.push(`${id} (misfire all): tick ${new Date(t).toISOString()} has no job`);
    } else if (def.misfire.policy === "once") {
      // The jobs' (since, tick] intervals must chain from the anchor to the last tick.
      let cursor = def.anchorAt;
      for (const job of jobs) {
        if (Date.parse(job.meta.since) !== cursor) {
          violations++;
          if (violations <= 5)
            problems.push(
              `${id} (misfire once): job of ${job.meta.tick} stands for ticks since ${job.meta.since}, but the previous one ended at ${new Date(cursor).toISOString()}`,
            );
        }
        cursor = Date.parse(job.meta.tick);
      }
      allowedMissing = missing.length;
    } else {
      const firings = evidence.fired.filter((f) => f.id === id);
      for (const t of missing) {
        // Dropped by the first firing past it, at `droppedAt`; fine when no process was up to fire
        // it on time by its own clock before then (a process whose clock runs ahead may find a
        // tick past its grace that a process running behind does not yet find due).
        const droppedAt = Math.min(...firings.filter((f) => f.tickAt > t).map((f) => f.t));
        const explained = !up.some((u) => u.from <= t - u.skewMs && u.to >= t - u.skewMs + PASS_SLACK_MS && t - u.skewMs + PASS_SLACK_MS <= droppedAt);
        if (explained) allowedMissing++;
        else {
          violations++;
          if (violations <= 5)
            problems.push(`${id} (misfire skip): tick ${new Date(t).toISOString()} was dropped although a scheduler was up to fire it on time`);
        }
      }
    }
    rows.push([`${id}: ticks / jobs / covered by policy`, `${expected.length} / ${jobs.length} / ${allowedMissing}`, ""]);
    rows.push([`${id}: ticks skipped outside the policy`, violations, "= 0"]);
    if (expected.length === 0) problems.push(`${id}: no tick came due at all`);
  }

  // 3. Every job completed; a second run only after a kill of the first run's worker.
  const notCompleted = evidence.jobs.filter((j) => j.state !== "completed");
  for (const j of notCompleted.slice(0, 5)) problems.push(`job ${j.id} ended ${j.state}`);
  rows.push(["tick jobs not completed after the drain", notCompleted.length, "= 0"]);
  const ends = new Map<string, RunRecord[]>();
  for (const r of evidence.runs) if (r.type === "end") ends.set(r.id, [...(ends.get(r.id) ?? []), r]);
  const deaths = evidence.events.filter((e) => e.type === "death");
  let rerunsExplained = 0;
  let rerunsUnexplained = 0;
  for (const [id, list] of ends) {
    const sorted = [...list].sort((a, b) => a.t - b.t);
    for (let i = 1; i < sorted.length; i++) {
      const previous = sorted[i - 1]!;
      const died = deaths.some((d) => d.pid === previous.pid && d.t >= previous.t && d.t <= previous.t + SCHEDULE_LEASE_MS + 2_000);
      if (died) rerunsExplained++;
      else {
        rerunsUnexplained++;
        problems.push(`tick job ${id} ran again after a completed run by pid ${previous.pid}, which did not die`);
      }
    }
  }
  const neverRan = evidence.jobs.filter((j) => j.state === "completed" && !ends.has(j.id)).length;
  if (neverRan > 0) problems.push(`${neverRan} jobs completed without a run in the ledger`);
  rows.push(["ticks run twice, explained by a kill of the worker", rerunsExplained, ""]);
  rows.push(["ticks run twice without a kill to explain it", rerunsUnexplained, "= 0"]);
  rows.push(["completed without a recorded run", neverRan, "= 0"]);
  rows.push(["torn ledger lines", evidence.torn, ""]);

  const kills = deaths.filter((d) => d.killed).length;
  rows.push(["processes SIGKILLed (around tick times)", kills, "> 0"]);
  rows.push(["blackouts (no process up)", blackouts.length, "> 0"]);
  if (kills === 0) problems.push("no process was killed: the scenario did not exercise its faults");
  if (blackouts.length === 0) problems.push("no blackout happened: the misfire policies were not exercised");
  return { ok: problems.length === 0, rows, problems };
}

export interface ScheduleChaosResult {
  ok: boolean;
  rows: ScheduleVerdict["rows"];
  problems: string[];
  dir: string;
}

export async function runScheduleScenario(options: {
  backend: BackendKind;
  seconds: number;
  seed: number;
  log: (line: string) => void;
}): Promise<ScheduleChaosResult> {
  const rng = new Prng(options.seed);
  const dir = join(ROOT, ".tmp", "chaos", `schedule-${options.backend}-${options.seed}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(dir, "logs"), { recursive: true });
  const store = await openStore(options.backend);
  const url = store.urlFor("schedule", dir);
  const events: NodeEvent[] = [];
  const procs = new Map<string, ChildProcess>();
  const killedByRunner = new WeakSet<ChildProcess>();
  const wantUp = new Set<string>(NODES.map((n) => n.name));
  let stopping = false;
  const record = (e: NodeEvent) => events.push(e);

  const start = (spec: NodeSpec) => {
    const child = spawn(process.execPath, ["--import", "tsx", "chaos/schedule-node.ts", url, spec.role, String(spec.skewMs), dir], {
      cwd: ROOT,
      stdio: ["ignore", "pipe", "pipe"],
    });
    const pid = child.pid ?? -1;
    record({ t: Date.now(), type: "spawn", node: spec.name, pid, skewMs: spec.skewMs });
    child.stderr?.pipe(createWriteStream(join(dir, "logs", `${spec.name}.log`), { flags: "a" }));
    child.stdout?.on("data", (chunk: Buffer) => {
      if (chunk.toString().includes("ready")) record({ t: Date.now(), type: "ready", node: spec.name, pid });
    });
    child.on("exit", () => {
      record({ t: Date.now(), type: "death", node: spec.name, pid, killed: killedByRunner.has(child) });
      if (procs.get(spec.name) === child) procs.delete(spec.name);
      if (!stopping && wantUp.has(spec.name)) setTimeout(() => !stopping && wantUp.has(spec.name) && !procs.has(spec.name) && start(spec), rng.int(300, 800));
    });
    procs.set(spec.name, child);
  };
  const kill = (name: string) => {
    const child = procs.get(name);
    if (!child) return false;
    killedByRunner.add(child);
    child.kill("SIGKILL");
    return true;
  };
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  const waitAllReady = async (timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const ready = NODES.every((n) => {
        const child = procs.get(n.name);
        return child !== undefined && events.some((e) => e.type === "ready" && e.pid === child.pid);
      });
      if (ready) return;
      await sleep(100);
    }
    throw new Error(`the scenario's processes did not all start within ${timeoutMs} ms; see ${join(dir, "logs")}`);
  };

  const backend = await openBackend(url);
  const queue = new Queue(SCHEDULE_QUEUE, { backend });
  const counts = { kills: 0, blackouts: 0 };
  try {
    for (const spec of NODES) start(spec);
    await waitAllReady(60_000);
    for (const [id, schedule] of Object.entries(CHAOS_SCHEDULES)) await queue.schedule(id, { ...schedule, options: { removeOnComplete: false, attempts: 20 } });
    const deadline = Date.now() + options.seconds * 1000;
    // The first blackout within the first 40 % of the run, so a short run has one too.
    let nextBlackout = Date.now() + Math.min(rng.int(8_000, 15_000), options.seconds * 400);
    while (Date.now() < deadline) {
      if (Date.now() >= nextBlackout) {
        // Everyone down at once for 2-5 s, then everyone back.
        for (const n of NODES) wantUp.delete(n.name);
        for (const n of NODES) kill(n.name);
        counts.blackouts++;
        await sleep(rng.int(4_000, 8_000));
        for (const n of NODES) {
          wantUp.add(n.name);
          if (!procs.has(n.name)) start(n);
        }
        await waitAllReady(60_000);
        nextBlackout = Date.now() + rng.int(12_000, 25_000);
        continue;
      }
      // Around a tick: a few ms before or after the next second boundary.
      const toBoundary = 1_000 - (Date.now() % 1_000);
      await sleep(Math.max(0, toBoundary + rng.int(-150, 150)) + rng.int(0, 2) * 1_000);
      if (kill(NODES[rng.int(0, NODES.length - 1)]!.name)) counts.kills++;
    }
    options.log(`faults stopped: ${counts.kills} kills around ticks, ${counts.blackouts} blackouts; settling`);
    await waitAllReady(60_000);
    await sleep(4_000);

    // The end: read each schedule, then remove it (a firing computed before is then refused).
    const definitions: ScheduleEvidence["definitions"] = {};
    for (const s of await queue.schedules()) definitions[s.id] = { ...s.definition, anchorAt: s.anchorAt, lastTickAt: s.lastTickAt };
    for (const id of Object.keys(CHAOS_SCHEDULES)) await queue.unschedule(id);
    const drainDeadline = Date.now() + 120_000;
    for (;;) {
      const stats = await queue.stats();
      if (stats.counts.waiting + stats.counts.active + stats.counts.scheduled === 0) break;
      if (Date.now() > drainDeadline) throw new Error(`the tick jobs did not drain within 120 s: ${JSON.stringify(stats.counts)}`);
      await sleep(250);
    }
    stopping = true;
    for (const child of procs.values()) child.kill("SIGTERM");
    await sleep(500);
    const jobs: StoredTickJob[] = [];
    for (let after: string | undefined; ;) {
      const page = await queue.list({}, { limit: 1000, ...(after ? { after } : {}) });
      for (const j of page) jobs.push({ id: j.id, state: j.state, meta: tickMetaOf(j)! });
      if (page.length < 1000) break;
      after = page.at(-1)!.id;
    }
    const fired = readLogs<FiredRecord>(dir, /^fired-\d+\.jsonl$/);
    const runs = readLogs<RunRecord>(dir, /^runs-\d+\.jsonl$/);
    const evidence: ScheduleEvidence = { definitions, jobs, fired: fired.records, runs: runs.records, events, torn: fired.torn + runs.torn };
    writeFileSync(join(dir, "evidence.json"), JSON.stringify(evidence));
    const verdict = checkScheduleEvidence(evidence);
    writeFileSync(
      join(dir, "report.json"),
      JSON.stringify({ seed: options.seed, backend: options.backend, seconds: options.seconds, counts, ...verdict }, null, 2),
    );
    return { ...verdict, dir };
  } finally {
    stopping = true;
    for (const child of procs.values()) {
      killedByRunner.add(child);
      child.kill("SIGKILL");
    }
    await queue.close();
    await backend.close();
    await store.close();
  }
}

export function formatScheduleTable(result: { ok: boolean; rows: ScheduleVerdict["rows"] }): string {
  const width = Math.max(...result.rows.map(([label]) => label.length));
  return [
    "| check | value | bound |",
    "| --- | ---: | --- |",
    ...result.rows.map(([label, value, bound]) => `| ${label.padEnd(width)} | ${value} | ${bound} |`),
    `| verdict | ${result.ok ? "ok" : "FAILED"} | |`,
  ].join("\n");
}
