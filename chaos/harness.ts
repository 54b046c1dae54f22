/**
 * One chaos scenario from start to verdict: start the fleet (three CLI workers and a producer)
 * on a store, inject the scheduled faults, stop the faults and the producer, let the workers
 * drain, stop them, read the store's final contents and every ledger and log, and check.
 */
import { mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { openBackend } from "../src/backend/open.js";
import { Queue, type Backend } from "../src/index.js";
import { check, type Bound, type CheckInput, type CheckResult } from "./checker.js";
import { Fleet, leftovers, TERM_TOLERANCE_MS } from "./fleet.js";
import { StallWatch } from "./stall-watch.js";
import { CHAOS_QUEUE } from "./jobs.js";
import { brokerFinal } from "./broker-final.js";
import { AppendLog, readLogs } from "./ledger.js";
import { addFacts, emptyFacts, readWorkerLog } from "./logs.js";
import { firstCompletionAfter, stalledAfter, throughputDip, type ThroughputDip } from "./failover-metrics.js";
import { finalJobs, jobsOf, Monitor, unfinished } from "./monitor.js";
import { Prng } from "./prng.js";
import type { EnqueueRecord, RunRecord } from "./records.js";
import {
  DEFAULT_MAX_HEALTHY_DEAD,
  notApplicable,
  planFaults,
  QUIET_TAIL_MS,
  queuesOf,
  ROLLOUT_BASELINE_MS,
  scenarioFor,
  WORKER,
  type PlannedFault,
  type ScenarioName,
} from "./scenarios.js";
import { holdsRescueAfterStoreTrouble, type BackendKind, type Store } from "./stores.js";

/**
 * Allowance on top of lease + rescue interval in the recovery bound: the rescuer's timer jitter
 * (+20 % of its interval) and scheduling on a loaded two-core machine. Process start-up is not in
 * it: recovery time counts only while some worker had started (see CheckInput.available).
 */
export const RECOVERY_TOLERANCE_MS = 3_000;
/**
 * How long after a handler's `end` record its acknowledgement may still be on its way to the
 * store: the handler returns, the settler batches on the next turn, one round trip; in a sandbox
 * an IPC hop first. A second covers that on a loaded two-core machine; a fault later than this
 * after a run's end does not excuse running it again.
 */
export const ACK_SLACK_MS = 1_000;
/**
 * Failover scenarios: the longest a failover, slot move or rollout may be followed by no completed
 * job claimed after it. Promotion takes 1-12 s here (Sentinel's down-after plus an election, a
 * cluster's node timeout, a standby's promote), then workers come out of their retry backoff and
 * need the new primary for a claim and its acknowledgement: 30 s was seen at a load average of 37
 * on two cores. 60 s leaves room for that and is still far below a fleet that never came back (a
 * 5-minute Sentinel run once stalled 4.5 minutes after its second failover and passed).
 */
export const FAULT_PROGRESS_BOUND_MS = 60_000;
/**
 * How long the drain after the fault phase may take before unfinished jobs count as stranded:
 * 90 s, or twice the fault phase when that is longer (a saturating scenario builds a backlog).
 */
const drainTimeoutMs = (seconds: number) => Math.max(90_000, 2 * seconds * 1000);

export interface ScenarioOptions {
  backend: BackendKind;
  scenario: ScenarioName;
  /** Length of the fault phase, s. */
  seconds: number;
  seed: number;
  store: Store;
  /** Each scenario gets a directory below this one (ledgers, logs, report.json). */
  rootDir: string;
  /** Progress lines. */
  log?: (line: string) => void;
  /** Healthy jobs that may end dead-lettered, each explained by faults. Default DEFAULT_MAX_HEALTHY_DEAD. */
  maxHealthyDead?: number;
  /** Worker processes instead of the scenario's own number (a short rolling-restart, say). */
  workers?: number;
  /**
   * A bug planted in the workers (CHAOS_PLANT, see chaos/handlers.ts), for the tests that prove
   * the checker reports it. Never set in a real run.
   */
  plant?: string;
}

export interface ScenarioResult {
  backend: BackendKind;
  scenario: ScenarioName;
  seed: number;
  seconds: number;
  dir: string;
  /** Why the scenario did not run, or null. */
  notRun: string | null;
  plan: PlannedFault[];
  skippedFaults: number;
  check: CheckResult | null;
  restarts: number;
  drainMs: number | null;
  leftoverProcesses: number;
  monitorTicks: number;
  monitorFailedTicks: number;
  workerErrors: number;
  /** Failovers, reshards and rollouts as they happened, with what they cost (failover scenarios). */
  timings: FaultTiming[];
  ok: boolean;
}

/** One failover, slot move or rollout and its measurements (chaos/failover-metrics.ts). */
export interface FaultTiming {
  kind: "failover" | "reshard" | "rolling";
  /** When it began, from the start of the run (workers and producer spawned), ms. */
  offsetMs: number;
  /** When it began (the kill, the reshard command, the first SIGTERM). */
  at: number;
  /** When it was over: the replica promoted, the slots moved, the last replacement started. */
  doneAt: number;
  /** The topology whole again (node rejoined, standby rebuilt); failovers only. */
  restoredAt: number | null;
  detail: string;
  /** The fault to the first job claimed after it that completed, ms; null when none did. */
  firstCompletionMs: number | null;
  /** Rollouts: completions per second before, during, lowest, and the recovery time. */
  dip: ThroughputDip | null;
}

/** When a handler last wrote to a runs ledger of `dir` (ms since the epoch; 0 when none). */
function lastLedgerWrite(dir: string): number {
  let last = 0;
  for (const name of readdirSync(dir)) if (/^runs-\d+\.jsonl$/.test(name)) last = Math.max(last, statSync(join(dir, name)).mtimeMs);
  return last;
}

export async function runScenario(options: ScenarioOptions): Promise<ScenarioResult> {
  const { backend, scenario, seconds, seed, store } = options;
  const log = options.log ?? (() => {});
  const dir = join(options.rootDir, scenario);
  const base: ScenarioResult = {
    backend,
    scenario,
    seed,
    seconds,
    dir,
    notRun: null,
    plan: [],
    skippedFaults: 0,
    check: null,
    restarts: 0,
    drainMs: null,
    leftoverProcesses: 0,
    monitorTicks: 0,
    monitorFailedTicks: 0,
    workerErrors: 0,
    timings: [],
    ok: false,
  };
  const na = notApplicable(scenario, backend);
  if (na) return { ...base, notRun: `n/a: ${na}`, ok: true };

  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const def = { ...scenarioFor(scenario, backend), ...(options.workers ? { workers: options.workers } : {}) };
  // The schedule depends on the scenario and the seed only, so every backend gets the same one.
  const prng = new Prng(seed).fork(scenario);
  const durationMs = Math.round(seconds * 1000);
  const plan = planFaults(def, durationMs, prng.fork("faults"));
  writeFileSync(join(dir, "plan.json"), JSON.stringify({ backend, scenario, seed, seconds, worker: WORKER, plan }, null, 2));
  const url = store.urlFor(`${scenario}_${seed}`, dir);
  const events = new AppendLog(join(dir, "events.jsonl"));

  // The runner's own connection: creates the schema before any worker starts, then samples.
  const monitorBackend: Backend = await openBackend(url);
  const queue = new Queue(CHAOS_QUEUE, { backend: monitorBackend });
  const fleet = new Fleet({
    dir,
    url,
    def,
    prng: prng.fork("failpoints"),
    events,
    ...(options.plant ? { plant: options.plant } : {}),
    ...(store.holdsWriteLock ? { holdsWriteLock: (pid: number) => store.holdsWriteLock?.(pid, url) ?? false } : {}),
    producer: {
      seed: prng.fork("producer").seed,
      ratePerSec: def.ratePerSec,
      mix: def.mix,
      ...(def.bursts ? { bursts: def.bursts } : {}),
      ...(def.pills ? { pills: def.pills } : {}),
      ...((def.queues ?? 1) > 1 ? { queues: queuesOf(def) } : {}),
      maxInFlight: 64,
    },
  });
  const source = (def.queues ?? 1) > 1 ? jobsOf(monitorBackend, queuesOf(def)) : queue;
  // A store without job records (RabbitMQ) cannot be listed: its final state is built from the
  // ledgers, its dead queue and what is left in its queues (chaos/broker-final.ts).
  const broker = store.broker;
  const monitor = new Monitor(source, 500);
  // The runner's own timer, late by seconds: the whole machine stalled (chaos/stall-watch.ts).
  const stallWatch = new StallWatch((stall) => {
    if (!events.closed) events.append({ t: "stall", ...stall, at: stall.to });
  });
  const timings: FaultTiming[] = [];
  const left: number[] = [];
  log(`${backend}/${scenario}: seed ${seed}, ${seconds} s, ${plan.length} timed fault(s), dir ${dir}`);
  /** The fault phase, the drain, the final stop and read: resolves with what the store ended with. */
  const phases = async () => {
    const t0 = Date.now();

    // ---- the fault phase
    let skipped = 0;
    const skip = (f: PlannedFault, why: string) => {
      skipped++;
      events.append({ t: "skipped", fault: f, why, at: Date.now() });
    };
    const execute = async (f: PlannedFault): Promise<void> => {
      switch (f.kind) {
        case "kill": {
          const slot = fleet.target(f.slot);
          if (slot) fleet.kill(slot);
          else skip(f, "no worker up");
          return;
        }
        case "stop": {
          // A stop whose target dies before it is seen stopped did not happen: aim it again at
          // a worker that is up (a few tries), so the scenario still exercises it.
          for (let attempt = 0; attempt < 3; attempt++) {
            const slot = fleet.target(f.slot + attempt);
            if (!slot) return skip(f, "no worker up");
            if (await fleet.stop(slot, f.forMs)) return;
            await sleep(250);
          }
          return skip(f, "every target died before it was seen stopped");
        }
        case "term": {
          const slot = fleet.target(f.slot, true, true);
          if (slot) fleet.term(slot);
          else skip(f, "no worker up");
          return;
        }
        case "conn-cut": {
          if (!store.cut) return skip(f, "the store has no connections to cut");
          try {
            const from = Date.now();
            const killed = await store.cut();
            // A cut that found no connection to kill did nothing: it is no fault.
            if (killed > 0) fleet.record({ t: "cut", from, at: Date.now(), killed });
            else skip(f, "the cut killed no connection");
          } catch (error) {
            skip(f, `cut failed: ${String(error)}`);
          }
          return;
        }
        case "failover": {
          if (!store.failover) return skip(f, "the store has no replica to fail over to");
          const o = await store.failover();
          // The outage is the kill until the replica served: it excuses what it overlapped.
          fleet.record({
            t: "outage",
            from: o.from,
            to: o.promotedAt,
            how: o.how,
            probeFailedAt: o.probeFailedAt,
            ...(o.replication ? { replication: o.replication } : {}),
          });
          events.append({ t: "failover", ...o });
          timings.push({
            kind: "failover",
            at: o.from,
            doneAt: o.promotedAt,
            restoredAt: o.restoredAt,
            offsetMs: 0,
            detail: o.detail,
            firstCompletionMs: null,
            dip: null,
          });
          return;
        }
        case "reshard": {
          if (!store.reshard) return skip(f, "the store has no slots to move");
          const o = await store.reshard();
          events.append({ t: "reshard", ...o, at: o.from });
          timings.push({ kind: "reshard", at: o.from, doneAt: o.to, restoredAt: null, offsetMs: 0, detail: o.detail, firstCompletionMs: null, dip: null });
          return;
        }
        case "rolling": {
          const w = await fleet.rollingRestart();
          events.append({ t: "rolling", ...w, at: w.from });
          // Steady work after it: its recovery, and the baseline of the next rollout.
          await sleep(Math.max(0, Math.min(ROLLOUT_BASELINE_MS, t0 + durationMs - Date.now())));
          timings.push({
            kind: "rolling",
            at: w.from,
            doneAt: w.to,
            restoredAt: null,
            offsetMs: 0,
            detail: `${w.restarted} workers restarted one at a time`,
            firstCompletionMs: null,
            dip: null,
          });
          return;
        }
        case "store-crash": {
          if (store.crashMode === "processes") {
            const w = fleet.crashAll(f.downMs);
            if (w.killed > 0) fleet.record({ t: "outage", from: w.from, to: w.to, how: store.crashHow, processesKilled: w.killed });
            else skip(f, "no process had the database open");
            await sleep(f.downMs);
            return;
          }
          const from = Date.now();
          events.append({ t: "store-crash", at: from });
          let crashed = true;
          try {
            await store.crash();
          } catch (error) {
            crashed = false;
            events.append({ t: "store-crash-failed", error: String(error), at: Date.now() });
          }
          // The outage is recorded only once seen: the crash command succeeded and a fresh
          // connection then failed. A crash that failed while the store still answers is no fault,
          // and restarting that store would be a clean restart, not a crash recovery.
          const probeFailedAt = (await store.probe()) ? null : Date.now();
          if (probeFailedAt === null) {
            skip(f, crashed ? "the crash command returned, but the store still answered" : "the crash failed and the store still answers");
            return;
          }
          await sleep(f.downMs);
          for (let attempt = 1; ; attempt++) {
            try {
              await store.restart();
              break;
            } catch (error) {
              events.append({ t: "store-restart-failed", attempt, error: String(error), at: Date.now() });
              if (attempt >= 5) throw error;
              await sleep(1_000);
            }
          }
          if (crashed) fleet.record({ t: "outage", from, to: Date.now(), how: store.crashHow, probeFailedAt });
          else events.append({ t: "store-down-after-failed-crash", from, to: Date.now(), note: "not recorded as an outage: the crash command failed" });
          return;
        }
      }
    };
    for (const f of plan) {
      // A failover, reshard or rollout takes seconds: ones still planned once the fault phase is
      // over (earlier ones ran long) are dropped, not piled up after it.
      if (Date.now() - t0 >= durationMs - QUIET_TAIL_MS) {
        skip(f, "the fault phase ended while earlier faults ran");
        continue;
      }
      const wait = t0 + f.atMs - Date.now();
      if (wait > 0) await sleep(wait);
      events.append({ t: "fault", fault: f, at: Date.now() });
      // A fault's steps are each bounded (a failover's resync may take minutes on a loaded
      // machine), but a step that waits long should be visible while it does, not only after.
      const began = Date.now();
      const watch = setInterval(
        () => log(`${backend}/${scenario}: the ${f.kind} planned at +${f.atMs} ms still runs after ${Math.round((Date.now() - began) / 1000)} s`),
        60_000,
      );
      try {
        await execute(f);
      } finally {
        clearInterval(watch);
      }
    }
    const rest = t0 + durationMs - Date.now();
    if (rest > 0) await sleep(rest);

    // ---- calm: no more faults, no more jobs; every worker back; drain
    log(`${backend}/${scenario}: fault phase over, draining`);
    fleet.calm();
    await fleet.stopProducer();
    const drainStart = Date.now();
    let drainMs: number | null = null;
    let zeroes = 0;
    while (Date.now() - drainStart < drainTimeoutMs(seconds)) {
      const n = broker ? await broker.unfinished(url) : await unfinished(source);
      // A broker's counts can read 0 while a quorum queue recovers after a restart and the
      // workers still run its messages: drained also needs the handlers' ledgers quiet for 3 s.
      const quiet = !broker || Date.now() - lastLedgerWrite(dir) > 3_000;
      zeroes = n === 0 && quiet ? zeroes + 1 : 0;
      if (zeroes >= 2) {
        drainMs = Date.now() - drainStart;
        break;
      }
      await sleep(500);
    }
    if (!broker) await monitor.stop();
    const exits = await fleet.shutdown();
    events.append({ t: "shutdown", exits, at: Date.now() });
    const final = broker
      ? brokerFinal({
          dead: await finalJobs(source, { state: "dead" }),
          queued: await broker.queuedIds(url),
          runs: readLogs<RunRecord>(dir, /^runs-\d+\.jsonl$/).records,
        })
      : await finalJobs(source);
    return { final, drainMs, skipped };
  };

  const runStart = Date.now();
  fleet.start();
  stallWatch.start();
  if (!broker) monitor.start();
  let outcome: Awaited<ReturnType<typeof phases>>;
  try {
    outcome = await phases();
  } catch (error) {
    // A run that broke (a store that would not restart): leave nothing running behind it.
    if (!broker) await monitor.stop().catch(() => undefined);
    await fleet.shutdown().catch(() => undefined);
    throw error;
  } finally {
    stallWatch.stop();
    await monitorBackend.close().catch(() => undefined);
    events.close();
    // Anything of this run still alive now was orphaned (all workers have exited).
    left.push(...leftovers(dir));
    for (const pid of left) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
  }
  const { final, drainMs, skipped } = outcome;

  // ---- the evidence
  const enqueues = readLogs<EnqueueRecord>(dir, /^enqueues-\d+\.jsonl$/);
  const runs = readLogs<RunRecord>(dir, /^runs-\d+\.jsonl$/);
  const facts = emptyFacts();
  for (const path of fleet.workerLogs) addFacts(facts, readWorkerLog(path));
  const input: CheckInput = {
    model: broker ? "broker" : "records",
    enqueues: enqueues.records,
    runs: runs.records,
    faults: fleet.faults,
    observations: monitor.observations,
    final,
    terms: fleet.terms,
    available: fleet.available,
    stalls: stallWatch.stalls,
    logs: facts,
    torn: enqueues.torn + runs.torn,
    config: {
      leaseMs: WORKER.leaseMs,
      rescueIntervalMs: WORKER.rescueIntervalMs,
      pollIntervalMs: WORKER.pollIntervalMs,
      shutdownGraceMs: WORKER.shutdownGraceMs,
      recoveryToleranceMs: RECOVERY_TOLERANCE_MS,
      termToleranceMs: TERM_TOLERANCE_MS,
      sandboxedPids: fleet.sandboxedPids,
      ackSlackMs: ACK_SLACK_MS,
      rescueHoldMs: holdsRescueAfterStoreTrouble(store.kind) ? WORKER.leaseMs : 0,
    },
    checks: {
      sigterm: def.sigtermChecks,
      poison: def.poisonChecks,
      healthyDelayLimitMs: scenario === "poison" ? WORKER.leaseMs : null,
      mustExercise: def.mustExercise,
      maxHealthyDead: options.maxHealthyDead ?? DEFAULT_MAX_HEALTHY_DEAD,
      lossMeasured: def.lossMeasured ?? false,
    },
  };
  // Everything the verdict rests on, so it can be checked again offline (chaos/recheck.ts).
  writeFileSync(join(dir, "check-input.json"), JSON.stringify(input));
  const result = check(input);
  const extra: Bound = {
    name: "processes left behind after the workers exited",
    limit: "= 0",
    value: left.length,
    ok: left.length === 0,
    examples: left.map((pid) => `pid ${pid}`),
  };
  result.bounds.push(extra);
  result.ok = result.ok && extra.ok;

  for (const t of timings) {
    t.offsetMs = t.at - runStart;
    t.firstCompletionMs = firstCompletionAfter(t.at, final);
    if (t.kind === "rolling") t.dip = throughputDip(runs.records, { from: t.at, to: t.doneAt });
  }
  if (timings.length > 0) {
    // Progress, not only safety: a fleet that stops completing jobs after a failover loses nothing
    // and breaks no other bound, yet it is down.
    const stalled = stalledAfter(timings, FAULT_PROGRESS_BOUND_MS);
    const progress: Bound = {
      name: "failovers, slot moves or rollouts not followed by a completed job in time",
      limit: `= 0 (within ${FAULT_PROGRESS_BOUND_MS} ms)`,
      value: stalled.length,
      ok: stalled.length === 0,
      examples: stalled.map(
        (t) => `${t.kind} at +${t.offsetMs} ms: first job completed again ${t.firstCompletionMs === null ? "never" : `+${t.firstCompletionMs} ms`}`,
      ),
    };
    result.bounds.push(progress);
    result.ok = result.ok && progress.ok;
  }
  const out: ScenarioResult = {
    ...base,
    timings,
    plan,
    skippedFaults: skipped,
    check: result,
    restarts: fleet.restarts,
    drainMs,
    leftoverProcesses: left.length,
    monitorTicks: monitor.ticks,
    monitorFailedTicks: monitor.failedTicks,
    workerErrors: facts.workerErrors,
    ok: result.ok,
  };
  writeFileSync(join(dir, "report.json"), JSON.stringify(out, null, 2));
  log(`${backend}/${scenario}: ${result.ok ? "all bounds hold" : "BOUNDS BROKEN"}`);
  return out;
}
