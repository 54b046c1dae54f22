/**
 * The chaos checker: a pure function from what was written down (the producer's and handlers'
 * ledgers, the runner's fault log, the monitor's samples, the store's final contents, the worker
 * logs) to the report's numbers and its bounds. No I/O here, so it is unit-tested with planted
 * faults (test/chaos/checker.test.ts): a checker that cannot fail proves nothing.
 *
 * Categories follow Jepsen's queue checker: enqueued ok, lost, unexpected, recovered, duplicated.
 */
import { HEALTHY_KINDS } from "./jobs.js";
import type {
  EnqueueRecord,
  FaultEvent,
  FinalJob,
  JobKind,
  LeaseLapseRecord,
  LogFacts,
  Observation,
  ReplicationAtKill,
  RunRecord,
  TermObservation,
} from "./records.js";

export interface CheckConfig {
  leaseMs: number;
  rescueIntervalMs: number;
  pollIntervalMs: number;
  shutdownGraceMs: number;
  /** Allowance on top of lease + rescue interval for the recovery bound (timer jitter, scheduling). */
  recoveryToleranceMs: number;
  /** Allowance on top of the grace period for a SIGTERMed worker to exit (release, close, exit). */
  termToleranceMs: number;
  /** Worker pids that ran handlers in a sandbox (their ledger start times lag the claim). */
  sandboxedPids: readonly number[];
  /**
   * How long after a handler's `end` record its acknowledgement may still be on its way to a
   * store that is up (settle batching, a round trip, a loaded machine), ms. A store outage or
   * connection cut later than this after a run's end cannot have cost it its acknowledgement.
   */
  ackSlackMs: number;
  /**
   * How long after a store-wide fault (an outage, a connection cut) the backend's rescue still
   * leaves leases alone once the store answers again, ms (src/backend/lease-hold.ts: a lease); 0
   * where the backend holds nothing (SQLite, a broker). Not working time for the recovery bound:
   * the rescue is held by design, and a dead worker's jobs come back up to that much later.
   * Optional for evidence written before it existed (then 0).
   */
  rescueHoldMs?: number;
}

export interface ScenarioChecks {
  /** Assert the SIGTERM bounds (claims after the signal, drain time, exit code). */
  sigterm: boolean;
  /** Assert the poison-pill bounds (dead within limits, no crash loop, healthy jobs not delayed). */
  poison: boolean;
  /** Healthy jobs untouched by faults must start within this many ms of their enqueue (poison). */
  healthyDelayLimitMs: number | null;
  /** Fault kinds that must have happened at least once, or the scenario proved nothing. */
  mustExercise: readonly ExercisedKind[];
  /**
   * Healthy jobs that may end dead-lettered, each explained by faults (an unexplained one is lost
   * whatever this says). 0 once a lease expiry counts toward quarantine only when the job is the
   * likely cause; until then a worker killed three times in a row while it held a job quarantines
   * that job.
   */
  maxHealthyDead: number;
  /**
   * Lost jobs are a measurement here, not a broken bound: an asynchronous replica promoted before
   * it had every acknowledged write (pg-primary-switch-async). Default false.
   */
  lossMeasured?: boolean;
}

export type ExercisedKind = "killed" | "failpoint" | "stop" | "outage" | "cut" | "term" | "pill";

/**
 * How the final state was obtained, which decides the store-specific rules (shared rules apply to both):
 *
 * - "records": the store keeps a record of every job (SQLite, PostgreSQL, Redis). `final` is read
 *   from it, a monitor sampled it, attempts carry lease tokens; jobs are taken back by lease
 *   expiry and the rescuer, and quarantined after `maxStalls`.
 * - "broker": the store keeps none (RabbitMQ). `final` is built by the harness from what it
 *   observes independently (chaos/broker-final.ts): completed = a handler's `end ok` record,
 *   dead = in the dead queue at the end, waiting = still in a work or delay queue. A delivery is
 *   taken back by redelivery when its connection or channel dies (no lease, no rescuer), and a
 *   message dies of `x-delivery-limit` returns instead of `maxStalls`. There are no stored
 *   results, lease tokens or samples, so the rules that need them (stale acknowledgements
 *   applied, completions without a run, terminal-state regressions, recovery by the rescuer) are
 *   replaced by what can be seen: no run starts after the job was dead-lettered, every dead
 *   letter carries its forensics, and the redelivery time is reported.
 */
export type StoreModel = "records" | "broker";

export interface CheckInput {
  /** Default "records". */
  model?: StoreModel;
  enqueues: EnqueueRecord[];
  runs: RunRecord[];
  faults: FaultEvent[];
  observations: Observation[];
  /** Every job in the store at the end (after the drain). */
  final: FinalJob[];
  terms: TermObservation[];
  /**
   * When each worker process was up and able to work (spawned and not yet dead, not stopped,
   * not shutting down). Recovery time counts only time when some worker was, and the store too:
   * jobs cannot run again while the whole fleet is down, which is the orchestrator's business.
   */
  available: Array<{ wpid: number; from: number; to: number }>;
  /**
   * Stretches the runner's own timer fired seconds late (chaos/stall-watch.ts): the machine
   * stalled, so no process ran, renewed a lease or rescued one. Counted as the store being down.
   */
  stalls?: Array<{ from: number; to: number }>;
  logs: LogFacts;
  /** Unparsable ledger lines (torn writes). */
  torn: number;
  config: CheckConfig;
  checks: ScenarioChecks;
}

export interface Bound {
  name: string;
  limit: string;
  value: number;
  ok: boolean;
  /** A measurement, not a limit (always ok): the report lists its examples too. */
  measured?: boolean;
  /** Examples of what broke it, for the report and the investigation. */
  examples: string[];
}

export interface CheckResult {
  /** Which store-specific rules were applied (see StoreModel). */
  model: StoreModel;
  metrics: {
    attempted: number;
    enqueuedOk: number;
    enqueueFailed: number;
    enqueueUnknown: number;
    lost: number;
    /**
     * Kills of a replicated store's primary with the replication evidence (chaos/records.ts,
     * ReplicationAtKill), and the acknowledged jobs missing afterwards that the evidence ties to
     * one of them: acknowledged after the replica was last seen in step and before the kill, with
     * asynchronous replication. Those are what an asynchronous promotion loses, measured and not
     * counted in `lost`; with waitForReplicas every loss stays in `lost`. Null: no such kill.
     */
    replicationWindow: ReplicationWindowMetrics | null;
    stranded: number;
    unexpected: number;
    recovered: number;
    duplicated: number;
    executions: number;
    maxExecutions: number;
    maxExecutionsJob: string | null;
    deadLettered: number;
    healthyDead: number;
    /** Why healthy jobs ended dead (quarantined after stalls in a row, attempts used up): examples. */
    healthyDeadWhy: string[];
    /** Healthy dead letters with an attempt no recorded fault or failed run explains (counted in lost). */
    healthyDeadUnexplained: number;
    /** Broker model: jobs still in a work or delay queue after the drain (they count as stranded, not lost). */
    queuedAtEnd: number;
    /** Broker model: runs that started after their job's dead-lettering (a copy escaped the dead queue). */
    runsAfterDead: number;
    /** Broker model: dead letters without an error or without their attempts recorded. */
    deadWithoutForensics: number;
    /** Broker model: runs a worker's death cut off, then run again (redelivered), and the longest death-to-run-again, ms (working time). */
    redeliveries: number;
    maxRedeliveryMs: number | null;
    /** Faults in the evidence without the observation that proves them (ignored: they excuse nothing). */
    unobservedFaults: number;
    staleRefused: number;
    leaseLost: number;
    /**
     * The workers' reports of leases lapsed before a renewal reached the store (each names its
     * jobs, which may then run once more), the jobs they named, and the latest heartbeat tick and
     * longest renewal wait among them, ms (which of the two let the lease lapse).
     */
    leaseLapses: { reports: number; jobs: number; maxTickLateMs: number | null; maxRenewalPendingMs: number | null };
    staleApplied: number;
    phantomCompletions: number;
    regressions: number;
    execBoundBroken: number;
    maxRecoveryMs: number | null;
    /** The same, in wall-clock time (including stretches when no worker or no store was up). */
    maxRecoveryWallMs: number | null;
    /** Death to running again (working time): adds the wait for a free slot. Reported, not bounded. */
    maxRunAgainMs: number | null;
    recoveryBoundMs: number;
    recoveries: number;
    faults: Record<ExercisedKind | "died-other" | "start-failed", number>;
    /** SIGSTOPs that froze the worker holding the store's one write lock (SQLite): store down meanwhile. */
    stopsHoldingWriteLock: number;
    /** Times the runner's own timer fired seconds late (the machine stalled): counted as store downtime. */
    machineStalls: number;
    claimsAfterSigterm: number;
    /** Exit codes of the judged SIGTERMs: how many 0 (drained) and 1 (released). */
    termExits: { zero: number; one: number };
    /** Jobs running on the worker when it got SIGTERM, fewest and most (full load = concurrency). */
    termInFlight: { min: number; max: number } | null;
    failpointKills: Record<string, number>;
    slowDrains: number;
    wrongExitCodes: number;
    terms: number;
    pills: number;
    pillsNotDead: number;
    pillDeaths: number;
    maxHealthyWaitMs: number | null;
    idCollisions: number;
    tornLines: number;
  };
  bounds: Bound[];
  ok: boolean;
}

export interface ReplicationWindowMetrics {
  /** Kills with replication evidence; of them, with asynchronous replication (no waitForReplicas). */
  kills: number;
  asynchronousKills: number;
  /** The most the replica was behind the primary at the last look before a kill, bytes (null: never read). */
  maxBehindBytes: number | null;
  /** The longest from the replica's last time in step to a kill, ms (null: never seen in step). */
  maxInStepAgoMs: number | null;
  /** Acknowledged jobs lost at a kill within its window (asynchronous replication only): not in `lost`. */
  lost: number;
  /** The longest from such a job's acknowledgement to its kill, ms. */
  maxAckBeforeKillMs: number | null;
}

/**
 * Which kill's replication window an acknowledgement falls into: acknowledged at or after the
 * replica was last seen in step with the primary (everything written before that was on the
 * replica) and no later than the kill plus `ackSlackMs` (a reply the primary sent just before
 * its death can be read late), capped at the promotion (no other server took writes before it).
 * A kill without an in-step moment ties nothing to itself.
 */
export function replicationWindowOf(
  ackAt: number,
  kills: ReadonlyArray<{ to: number; replication: ReplicationAtKill }>,
  ackSlackMs: number,
): { to: number; replication: ReplicationAtKill } | null {
  for (const k of kills) {
    const r = k.replication;
    if (r.inStepAt === null) continue;
    if (ackAt >= r.inStepAt && ackAt <= Math.min(k.to, r.killedAt + ackSlackMs)) return k;
  }
  return null;
}

/** The replication evidence of one kill on one line: how far the replica was behind, when last in step. */
export function describeReplication(r: ReplicationAtKill): string {
  const behind =
    r.primaryOffset === null || r.replicaOffset === null
      ? "offsets unread"
      : r.primaryOffset > r.replicaOffset
        ? `${r.primaryOffset - r.replicaOffset} bytes behind ${r.readAt === null ? "" : `${r.killedAt - r.readAt} ms before the kill`}`.trim()
        : `in step ${r.readAt === null ? "" : `${r.killedAt - r.readAt} ms before the kill`}`.trim();
  const inStep = r.inStepAt === null ? "never seen in step" : `last seen in step ${r.killedAt - r.inStepAt} ms before the kill`;
  return `replica ${behind}, ${inStep}; ${r.waitReplicas > 0 ? `waitForReplicas ${r.waitReplicas}` : "asynchronous replication"}`;
}

interface Run {
  id: string;
  attempt: number;
  token: number | null;
  pid: number;
  wpid: number;
  start: number;
  end: number | null;
  ok: boolean | null;
}

interface Window {
  from: number;
  to: number;
  /** A worker pid, or null when the fault hit every process (the store). */
  wpid: number | null;
  label: string;
  /** Only these jobs' runs (a lease lapse its worker reported names them); every job when absent. */
  jobIds?: ReadonlySet<string>;
}

const TERMINAL = new Set(["completed", "dead", "cancelled"]);
/** The measurement line of acknowledged jobs an asynchronous promotion lost (see ReplicationWindowMetrics). */
export const REPLICATION_WINDOW_LOSS = "lost at a kill, acknowledged but not yet replicated (asynchronous replica)";

function maxOrNull(values: ReadonlyArray<number | null>): number | null {
  const known = values.filter((v): v is number => v !== null);
  return known.length ? Math.max(...known) : null;
}
const EXAMPLES = 5;

function pushExample(list: string[], text: string): void {
  if (list.length < EXAMPLES) list.push(text);
}

/** Pairs `start` and `end` records into runs. */
export function pairRuns(records: readonly RunRecord[]): Run[] {
  const ends = new Map<string, Extract<RunRecord, { t: "end" }>>();
  for (const r of records) if (r.t === "end") ends.set(`${r.id}|${r.pid}|${r.attempt}|${r.token}`, r);
  const runs: Run[] = [];
  for (const r of records) {
    if (r.t !== "start") continue;
    const end = ends.get(`${r.id}|${r.pid}|${r.attempt}|${r.token}`);
    runs.push({ id: r.id, attempt: r.attempt, token: r.token, pid: r.pid, wpid: r.wpid, start: r.at, end: end?.at ?? null, ok: end ? end.ok : null });
  }
  return runs.sort((a, b) => a.start - b.start);
}

/**
 * Why a recorded fault lacks the observation that proves it happened, or null when it has it.
 * A death is always observed (the runner saw the process exit); only its attribution needs proof.
 */
export function unobserved(f: FaultEvent): string | null {
  switch (f.t) {
    case "death":
      if (f.cause === "killed" && f.signal !== "SIGKILL")
        return `death of ${f.slot}/${f.wpid} attributed to a SIGKILL, but it exited with ${f.code ?? f.signal}`;
      if ((f.cause === "failpoint" || f.cause === "watchdog") && !saidBy(f.cause, f.said ?? null)) {
        return `death of ${f.slot}/${f.wpid} attributed to its ${f.cause}, which it never logged`;
      }
      return null;
    case "stop":
      return f.seen === true ? null : `SIGSTOP of ${f.slot}/${f.wpid} at ${f.from}: never seen stopped`;
    case "term":
      return null;
    case "outage": {
      const probed = typeof f.probeFailedAt === "number" && f.probeFailedAt >= f.from && f.probeFailedAt <= f.to;
      return probed || (f.processesKilled ?? 0) > 0 ? null : `store outage ${f.from}..${f.to}: no probe failed and no process was killed`;
    }
    case "cut":
      return f.killed > 0 ? null : `connection cut at ${f.at} killed no connection`;
  }
}

/** The log line a worker prints when it kills itself at a failpoint, or its watchdog kills it. */
function saidBy(cause: "failpoint" | "watchdog", said: string | null): boolean {
  if (said === null) return false;
  return cause === "failpoint" ? /failpoint \S+ reached, killing process/.test(said) : said.includes("watchdog limit");
}

/**
 * The fault windows: when each fault could interrupt a run, and whose runs. A SIGSTOP's window
 * ends at the SIGCONT on every store: a worker resumed holding deliveries of a RabbitMQ session
 * the broker closed meanwhile checks the session before it starts any (AmqpBackend,
 * `silenceCheckMs`), so a run that starts after the SIGCONT is no fault's doing.
 */
function faultWindows(faults: readonly FaultEvent[], leaseMs: number): Window[] {
  return faults.map((f): Window => {
    switch (f.t) {
      case "death":
        // A watchdog kill ends an event loop that was already blocked for longer than its limit
        // (the lease, the CLI default): the worker was as good as dead from then on, and a run
        // that finished just before the block could not send its acknowledgement. Two leases
        // cover the limit plus the watchdog's check interval on a loaded machine. The watchdog
        // counts only time the process ran: a SIGSTOP of it while blocked (a CI run: a pill blocked
        // the loop, the process was stopped 7 s, and the watchdog fired 3 s after the SIGCONT)
        // moves the block's start back by the stop's length.
        return {
          from: f.cause === "watchdog" ? blockStart(f.at - 2 * leaseMs, f.at, stopsOf(faults, f.wpid)) : f.at,
          to: f.at,
          wpid: f.wpid,
          label: `death(${f.cause}) of ${f.slot}/${f.wpid} at ${f.at}`,
        };
      case "stop":
        return { from: f.from, to: f.to, wpid: f.wpid, label: `SIGSTOP of ${f.slot}/${f.wpid} ${f.from}..${f.to}` };
      case "term":
        return { from: f.from, to: f.to, wpid: f.wpid, label: `SIGTERM of ${f.slot}/${f.wpid} ${f.from}..${f.to}` };
      case "outage":
        return { from: f.from, to: f.to, wpid: null, label: `store outage ${f.from}..${f.to}` };
      case "cut":
        return { from: f.from ?? f.at, to: f.at, wpid: null, label: `connections cut at ${f.from ?? f.at}..${f.at}` };
    }
  });
}

/**
 * The leases a worker reported lapsed (its process ran late, or the store answered late: no
 * renewal reached the store within a lease), as windows on that worker for the jobs it named,
 * from the lapse to the report. A job can run again after that without any injected fault: on a
 * machine at a load average of 30 a niced worker's heartbeat timer fired seconds late. The
 * worker's own clock is the evidence; a lapse no worker reported excuses nothing.
 */
function lapseWindows(lapses: readonly LeaseLapseRecord[]): Window[] {
  return lapses.map((l) => ({
    from: l.at - l.lapsedForMs,
    to: l.at,
    wpid: l.wpid,
    jobIds: new Set(l.jobIds),
    label: `lease lapse reported by ${l.wpid} at ${l.at} (lapsed ${l.lapsedForMs} ms before; heartbeat tick ${l.tickLateMs} ms late; renewal out ${l.renewalPendingMs} ms)`,
  }));
}

/**
 * A lapse explains another run only if one started once the lease had run out (the window's
 * start, from the worker's own deadline, which is never after the store's expiry): a run that
 * started earlier ran beside a live lease, which is a fencing failure no lapse excuses.
 */
function lapseExplains(w: Window, list: readonly Run[]): boolean {
  return w.jobIds === undefined || list.some((r) => r.start >= w.from);
}

/** True when the window may concern job `id` (a lapse names its jobs; other faults concern all). */
function concerns(w: Window, id: string): boolean {
  return w.jobIds === undefined || w.jobIds.has(id);
}

/** The SIGSTOPs of one worker process, as [from, to] spans. */
function stopsOf(faults: readonly FaultEvent[], wpid: number): Array<{ from: number; to: number }> {
  return faults.flatMap((f) => (f.t === "stop" && f.wpid === wpid ? [{ from: f.from, to: f.to }] : []));
}

/**
 * When a watchdog's block began at the latest: `death - from` of running time before the death
 * (the limit and its check interval), not counting the time the process spent stopped.
 */
function blockStart(from: number, death: number, stops: ReadonlyArray<{ from: number; to: number }>): number {
  let at = death;
  let running = death - from;
  for (const stop of [...stops].filter((s) => s.from < death).sort((a, b) => b.to - a.to)) {
    const stopEnd = Math.min(stop.to, death);
    if (stopEnd < at - running) break;
    running -= at - stopEnd;
    at = stop.from;
  }
  return at - running;
}

/**
 * A fault hits a run when it overlaps the run: from the run's start until its acknowledgement
 * could still be pending. A run with no end record ended when its process did (`endOf`). A fault
 * of another worker never hits it.
 *
 * How long the acknowledgement may be pending depends on the fault. Its own worker's death, stop
 * or SIGTERM: up to a lease after the end (a busy store, SQLite's write lock above all, may keep
 * the worker's settle waiting, and heartbeats keep the lease alive meanwhile). A store-wide fault
 * (outage, cut): `ackSlackMs`. A live worker that reaches the store settles within that, and a
 * store that goes down or cuts the connection later finds the run already acknowledged; so an
 * outage or cut excuses the runs it overlapped, not every run of every worker within a lease.
 */
function hits(run: Run, w: Window, config: Pick<CheckConfig, "ackSlackMs" | "leaseMs">, endOf: (run: Run) => number): boolean {
  if (w.wpid !== null && w.wpid !== run.wpid) return false;
  // A lapse report names jobs its worker still held (their outcome not yet stored, however long
  // after the handler's end: a settle retried across a store outage, say): it hits their runs
  // there that had started.
  if (w.jobIds !== undefined) return w.jobIds.has(run.id) && run.start <= w.to;
  const exposedUntil = endOf(run) + (w.wpid === null ? config.ackSlackMs : config.leaseMs);
  return w.from <= exposedUntil && w.to >= run.start;
}

/** How far a handler's clock (its ledger) and the store's clock (a job's history) may disagree on one host, ms. */
const CLOCK_SLACK_MS = 1_000;

/**
 * Why a dead-lettered healthy job is not explained by what was done to it, or null when it is:
 * every attempt it used up is either a lease expiry that a recorded fault of its worker (or of
 * the store) overlapped, or a failure its handler wrote down as a failed run of that attempt.
 */
function unexplainedAttempt(job: FinalJob, runs: readonly Run[], windows: readonly Window[]): string | null {
  const used = job.history.filter((h) => h.outcome !== "released" && h.outcome !== "completed" && h.outcome !== "cancelled");
  if (used.length === 0) return "its history records no attempt that could have failed";
  for (const h of used) {
    if (h.outcome === "lease-expired") {
      const hit = windows.some((w) => concerns(w, job.id) && (w.wpid === null || w.wpid === h.pid) && w.from <= h.finishedAt && w.to >= h.startedAt);
      if (!hit) return `attempt ${h.attempt} (worker ${h.pid}, ${h.startedAt}..${h.finishedAt}) expired with no recorded fault on its worker or the store`;
    } else {
      const failedRun = runs.some(
        (r) =>
          r.attempt === h.attempt && r.wpid === h.pid && r.ok === false && r.start >= h.startedAt - CLOCK_SLACK_MS && r.start <= h.finishedAt + CLOCK_SLACK_MS,
      );
      if (!failedRun) return `attempt ${h.attempt} (worker ${h.pid}) is recorded as ${h.outcome}, but no handler run of it failed`;
    }
  }
  return null;
}

/**
 * Broker model: why a healthy job the broker dead-lettered itself (`x-delivery-limit`: returned
 * that often without a settle) is not explained, or null when it is: it must have run, and every
 * run must have failed or been hit by a fault of its worker or of the broker. Returns without a
 * run (prefetched and handed back) cannot be told apart here, so they do not explain it.
 */
function unexplainedReturns(runs: readonly Run[], windows: readonly Window[], hit: (run: Run, w: Window) => boolean): string | null {
  if (runs.length === 0) return "dead-lettered by x-delivery-limit, but it never ran";
  for (const r of runs) {
    if (r.ok === false) continue;
    if (!windows.some((w) => hit(r, w)))
      return `its run of attempt ${r.attempt} on ${r.wpid} at ${r.start} ${r.ok ? "succeeded" : "was cut off"} with no recorded fault on its worker or the broker`;
  }
  return null;
}

/**
 * The stretches in which the backend's rescue left leases alone after store trouble: each outage
 * and connection cut, and `holdMs` after its end (CheckConfig.rescueHoldMs). None when 0.
 */
export function rescueHoldWindows(faults: readonly FaultEvent[], holdMs: number): Array<{ from: number; to: number }> {
  if (holdMs <= 0) return [];
  return faults.flatMap((f) => {
    if (f.t === "outage") return [{ from: f.from, to: f.to + holdMs }];
    if (f.t === "cut") return [{ from: f.from ?? f.at, to: f.at + holdMs }];
    return [];
  });
}

/**
 * A function giving, for [from, to], how long some worker was available while the store was up.
 */
export function workingTime(
  available: ReadonlyArray<{ from: number; to: number }>,
  outages: ReadonlyArray<{ from: number; to: number }>,
): (from: number, to: number) => number {
  // Merge the availability intervals, then cut the outages out.
  const merged: Array<[number, number]> = [];
  for (const a of [...available].sort((x, y) => x.from - y.from)) {
    const last = merged[merged.length - 1];
    if (last && a.from <= last[1]) last[1] = Math.max(last[1], a.to);
    else merged.push([a.from, a.to]);
  }
  let pieces = merged;
  for (const o of outages) {
    const next: Array<[number, number]> = [];
    for (const [a, b] of pieces) {
      if (o.to <= a || o.from >= b) next.push([a, b]);
      else {
        if (o.from > a) next.push([a, o.from]);
        if (o.to < b) next.push([o.to, b]);
      }
    }
    pieces = next;
  }
  return (from, to) => {
    let total = 0;
    for (const [a, b] of pieces) total += Math.max(0, Math.min(b, to) - Math.max(a, from));
    return total;
  };
}

/**
 * The availability spans with each watchdog-killed worker's last blocked stretch cut out: its
 * event loop was stuck (a pill) for the time its watchdog logged before the kill, so its rescuer
 * could not run, though the process was up. The watchdog measures afresh after a SIGSTOP, so the
 * logged time is all after any stop.
 */
export function withoutBlockedLoops(
  available: ReadonlyArray<{ wpid: number; from: number; to: number }>,
  faults: readonly FaultEvent[],
): Array<{ wpid: number; from: number; to: number }> {
  const blockedFrom = new Map<number, number>();
  for (const f of faults) {
    if (f.t !== "death" || f.cause !== "watchdog") continue;
    const ms = /event loop blocked for (\d+) ms/.exec(f.said ?? "")?.[1];
    if (ms !== undefined) blockedFrom.set(f.wpid, f.at - Number(ms));
  }
  return available.flatMap((a) => {
    const from = blockedFrom.get(a.wpid);
    if (from === undefined || a.to <= from) return [a];
    return a.from < from ? [{ ...a, to: from }] : [];
  });
}

export function check(input: CheckInput): CheckResult {
  const { config, checks } = input;
  const broker = (input.model ?? "records") === "broker";

  // ---- the producer's ledger
  const invokes = new Map<string, Extract<EnqueueRecord, { t: "invoke" }>>();
  const outcome = new Map<string, "ok" | "fail" | "unknown">();
  const ackAt = new Map<string, number>();
  let idCollisions = 0;
  const collisionExamples: string[] = [];
  for (const e of input.enqueues) {
    if (e.t === "invoke") {
      if (invokes.has(e.id)) {
        idCollisions++;
        pushExample(collisionExamples, `${e.id} invoked twice`);
      }
      invokes.set(e.id, e);
    } else {
      outcome.set(e.id, e.t);
      if (e.t === "ok") ackAt.set(e.id, e.at);
      if (e.t === "ok" && e.duplicate) {
        idCollisions++;
        pushExample(collisionExamples, `${e.id}: the store said the id already existed`);
      }
    }
  }
  // An invoke with no outcome: the producer died during the call.
  for (const id of invokes.keys()) if (!outcome.has(id)) outcome.set(id, "unknown");
  const kindOf = (id: string): JobKind | null => invokes.get(id)?.kind ?? null;
  const designedOf = (id: string): number => invokes.get(id)?.designed ?? 1;

  // ---- runs, final states
  const runs = pairRuns(input.runs);
  const runsByJob = new Map<string, Run[]>();
  for (const r of runs) {
    const list = runsByJob.get(r.id) ?? [];
    list.push(r);
    runsByJob.set(r.id, list);
  }
  const final = new Map(input.final.map((j) => [j.id, j]));

  // ---- the faults: only those observed count (as exercised, as excuses, as downtime)
  const observedFaults: FaultEvent[] = [];
  const unobservedEx: string[] = [];
  let unobservedFaults = 0;
  for (const f of input.faults) {
    const why = unobserved(f);
    if (why === null) observedFaults.push(f);
    else {
      unobservedFaults++;
      pushExample(unobservedEx, why);
      // The process did die (its exit was seen); only the cause is unproven.
      if (f.t === "death") observedFaults.push({ ...f, cause: "unknown" });
    }
  }
  // A worker SIGSTOPped while holding the store's one write lock (SQLite) stopped every other
  // process's writes until its SIGCONT: for them the store was down, as in a crash (store-wide
  // window, no working time, acknowledgements held up). It is still counted as a stop, not a crash.
  // A stall of the whole machine (the runner's own timer seconds late) is the same for every
  // process: nothing ran, no lease was renewed, and the store's clock went on.
  const lockedStops = observedFaults.flatMap((f) =>
    f.t === "stop" && f.heldWriteLock === true
      ? [{ from: f.from, to: f.to, label: `store write lock held by ${f.slot}/${f.wpid}, SIGSTOPped ${f.from}..${f.to}` }]
      : [],
  );
  const blocked = [
    ...lockedStops,
    ...(input.stalls ?? []).map((s) => ({ from: s.from, to: s.to, label: `machine stalled ${s.from}..${s.to} (the runner's timer ${s.to - s.from} ms late)` })),
  ];
  const lapses = input.logs.lapses ?? [];
  const windows = faultWindows(observedFaults, config.leaseMs)
    .concat(blocked.map(({ from, to, label }) => ({ from, to, wpid: null, label })))
    .concat(lapseWindows(lapses));
  // When each worker process ended (death or exit after SIGTERM): a run without an end record
  // ended then, at the latest.
  const processEnds = new Map<number, number[]>();
  for (const f of observedFaults) {
    if (f.t !== "death" && f.t !== "term") continue;
    const list = processEnds.get(f.wpid) ?? [];
    list.push(f.t === "death" ? f.at : f.to);
    processEnds.set(f.wpid, list);
  }
  const endOf = (run: Run): number => {
    if (run.end !== null) return run.end;
    const ends = (processEnds.get(run.wpid) ?? []).filter((t) => t >= run.start);
    return ends.length ? Math.min(...ends) : Infinity;
  };

  // ---- lost, stranded, unexpected, recovered
  const lostEx: string[] = [];
  let lost = 0;
  // Kills of a replicated primary with the evidence of where replication stood (observed outages only).
  const kills = observedFaults.flatMap((f) => (f.t === "outage" && f.replication ? [{ to: f.to, replication: f.replication }] : []));
  const windowLossEx: string[] = [];
  let windowLost = 0;
  let maxAckBeforeKillMs: number | null = null;
  let enqueuedOk = 0;
  let enqueueFailed = 0;
  let enqueueUnknown = 0;
  let recovered = 0;
  let queuedAtEnd = 0;
  for (const [id, o] of outcome) {
    if (!invokes.has(id)) continue;
    const f = final.get(id);
    if (o === "ok") {
      enqueuedOk++;
      // Broker model: a message still queued is not lost (it is stranded, bounded below).
      if (broker && f?.state === "waiting") queuedAtEnd++;
      else if (!f || (f.state !== "completed" && f.state !== "dead")) {
        // Gone from the store altogether, acknowledged inside a kill's replication window, and never
        // run once the promoted replica served: what an asynchronous promotion loses. Excused only
        // with asynchronous replication; with waitForReplicas the reply promised a replica had it.
        const at = ackAt.get(id)!;
        const kill = f || broker ? null : replicationWindowOf(at, kills, config.ackSlackMs);
        const ranAfter = kill !== null && (runsByJob.get(id) ?? []).some((r) => r.start > kill.to + config.ackSlackMs);
        if (kill !== null && !ranAfter) {
          const r = kill.replication;
          const what = `${id} (${kindOf(id)}): acknowledged ${r.killedAt - at} ms before the kill of the primary :${r.primaryPort} at ${r.killedAt}, not on the promoted replica (${describeReplication(r)})`;
          if (r.waitReplicas === 0) {
            windowLost++;
            if (maxAckBeforeKillMs === null || r.killedAt - at > maxAckBeforeKillMs) maxAckBeforeKillMs = r.killedAt - at;
            pushExample(windowLossEx, what);
            continue;
          }
          lost++;
          pushExample(lostEx, `${what}: not excused, every write waited for a replica`);
          continue;
        }
        lost++;
        pushExample(
          lostEx,
          `${id} (${kindOf(id)}): ${f ? `state ${f.state}, attempt ${f.attempt}` : broker ? "no handler finished it, not dead-lettered, not queued" : "not in the store"}, ${runsByJob.get(id)?.length ?? 0} run(s)`,
        );
      }
    } else if (o === "fail") {
      enqueueFailed++;
    } else {
      enqueueUnknown++;
      if (f || runsByJob.has(id)) recovered++;
    }
  }
  const strandedEx: string[] = [];
  let stranded = 0;
  for (const f of input.final) {
    if (!TERMINAL.has(f.state)) {
      stranded++;
      pushExample(strandedEx, `${f.id}: ${f.state}, attempt ${f.attempt}`);
    }
  }
  const unexpectedIds = new Set<string>();
  const unexpectedEx: string[] = [];
  const seenIds = new Set<string>([...runsByJob.keys(), ...final.keys()]);
  for (const id of seenIds) {
    const o = invokes.has(id) ? outcome.get(id) : undefined;
    if (o === undefined || o === "fail") {
      unexpectedIds.add(id);
      pushExample(
        unexpectedEx,
        `${id}: ${o === "fail" ? "its enqueue failed definitely" : "never enqueued"}, yet ${runsByJob.has(id) ? "it ran" : "it is in the store"}`,
      );
    }
  }

  // ---- executions against the faults that hit each job
  let executions = 0;
  let maxExecutions = 0;
  let maxExecutionsJob: string | null = null;
  let duplicated = 0;
  let execBoundBroken = 0;
  const execEx: string[] = [];
  const hitCount = new Map<string, number>();
  for (const [id, list] of runsByJob) {
    executions += list.length;
    if (list.length > maxExecutions) {
      maxExecutions = list.length;
      maxExecutionsJob = id;
    }
    const designed = designedOf(id);
    if (list.length > designed) duplicated++;
    const hitting = windows.filter((w) => concerns(w, id) && list.some((r) => hits(r, w, config, endOf)) && lapseExplains(w, list));
    hitCount.set(id, hitting.length);
    // Each fault that hits a run allows one more run. Broker model: a failed attempt is settled
    // by publishing its retry copy (confirmed) and then acknowledging the original, so a fault
    // between the two forks the job: the redelivered original runs that attempt again and then
    // the attempts after it, while the copy goes on too. A fault hitting a failed run of attempt
    // a allows 1 + (designed - a) more runs.
    // Broker model, too: a store-wide fault (restart, connections cut) closes the connections one
    // by one, so a delivery requeued by one close can be pushed to a worker whose connection
    // closes next, before it settles: such a fault allows one run more per worker it hit.
    const allowance = hitting.reduce((sum, w) => {
      if (!broker) return sum + 1;
      if (w.wpid === null) sum += new Set(list.filter((r) => hits(r, w, config, endOf)).map((r) => r.wpid)).size - 1;
      const forked = list.filter((r) => r.ok === false && hits(r, w, config, endOf)).map((r) => 1 + Math.max(0, designed - r.attempt));
      return sum + Math.max(1, ...forked);
    }, 0);
    if (list.length > designed + allowance) {
      execBoundBroken++;
      pushExample(
        execEx,
        `${id} (${kindOf(id)}): ${list.length} runs > ${designed} designed + ${allowance} allowed by ${hitting.length} fault(s) [` +
          list.map((r) => `attempt ${r.attempt} pid ${r.pid}/${r.wpid} ${r.start}..${r.end ?? "?"}`).join("; ") +
          `]${hitting.length ? ` hit by ${hitting.map((w) => w.label).join(", ")}` : ""}`,
      );
    }
  }

  // ---- dead letters, stale acknowledgements, phantom completions
  let deadLettered = 0;
  let healthyDead = 0;
  const healthyDeadWhy: string[] = [];
  let staleApplied = 0;
  let phantom = 0;
  const staleEx: string[] = [];
  const phantomEx: string[] = [];
  let healthyDeadUnexplained = 0;
  for (const f of input.final) {
    if (f.state === "dead") {
      deadLettered++;
      const k = kindOf(f.id);
      if (k !== null && HEALTHY_KINDS.includes(k)) {
        // A healthy job only dies of what was done to it: every attempt it used up must be a
        // lease expiry a recorded fault hit, or a failed run its handler wrote down. Anything
        // else (no history at all, an expiry no fault explains) is a job the store killed: lost.
        const unexplained =
          broker && f.error?.startsWith("LeaseExpiredError:")
            ? unexplainedReturns(
                runsByJob.get(f.id) ?? [],
                windows.filter((w) => concerns(w, f.id)),
                (r, w) => hits(r, w, config, endOf),
              )
            : unexplainedAttempt(f, runsByJob.get(f.id) ?? [], windows);
        const what = `${f.id} (${k}) after ${f.attempt} attempt(s) [${f.history.map((h) => h.outcome).join(", ")}]: ${f.error ?? "no error"}`;
        if (unexplained !== null) {
          healthyDeadUnexplained++;
          lost++;
          pushExample(lostEx, `${what}; dead-lettered, but ${unexplained}`);
        } else {
          healthyDead++;
          pushExample(healthyDeadWhy, what);
        }
      }
    }
    // Broker model: "completed" is a handler's end record itself (no stored result or token), so a
    // completion without a run cannot exist and a stale acknowledgement cannot be seen; fencing
    // by channel is tested in test/backends/amqp-specific.test.ts instead.
    if (f.state !== "completed" || broker) continue;
    const result = f.result;
    const resultAttempt = result && typeof result === "object" && "attempt" in result ? result.attempt : undefined;
    const resultToken = result && typeof result === "object" && "token" in result && typeof result.token === "number" ? result.token : null;
    const expired = f.history.find((h) => h.attempt === f.attempt && (h.outcome === "lease-expired" || h.outcome === "failed" || h.outcome === "dead"));
    const jobRuns = runsByJob.get(f.id) ?? [];
    // Attempt numbers repeat after a release (the attempt is given back), lease tokens never do:
    // the completion belongs to the run that holds the result's token, and no later claim of the
    // job may have run.
    const newer = resultToken === null ? undefined : jobRuns.find((r) => r.token !== null && r.token > resultToken);
    if ((typeof resultAttempt === "number" && resultAttempt !== f.attempt) || expired || newer) {
      staleApplied++;
      pushExample(
        staleEx,
        `${f.id}: completed at attempt ${f.attempt} by the result of attempt ${String(resultAttempt)}` +
          (resultToken !== null ? ` (lease token ${resultToken})` : "") +
          (expired ? `; attempt ${f.attempt} is also recorded as ${expired.outcome}` : "") +
          (newer ? `; a later claim (token ${String(newer.token)}, attempt ${newer.attempt}) ran at ${newer.start}` : ""),
      );
    }
    const completedRun = jobRuns.find(
      (r) => (resultToken !== null ? r.token === resultToken : r.attempt === f.attempt) && r.attempt === f.attempt && r.ok === true,
    );
    if (!completedRun) {
      phantom++;
      pushExample(
        phantomEx,
        `${f.id}: completed at attempt ${f.attempt}${resultToken !== null ? ` under lease token ${resultToken}` : ""}, but no handler finished that ${resultToken !== null ? "claim" : "attempt"}`,
      );
    }
  }

  // ---- broker model: no run after the dead-lettering; every dead letter with its forensics
  let runsAfterDead = 0;
  let deadWithoutForensics = 0;
  const afterDeadEx: string[] = [];
  const forensicsEx: string[] = [];
  if (broker) {
    for (const f of input.final) {
      if (f.state !== "dead") continue;
      if (f.error === null || (!/^(LeaseExpiredError|ForeignMessage):/.test(f.error) && f.history.length === 0)) {
        deadWithoutForensics++;
        pushExample(forensicsEx, `${f.id}: dead letter with ${f.error === null ? "no error" : `error "${f.error}" but no attempt recorded`}`);
      }
      const deadAt = f.deadAt ?? null;
      if (deadAt === null) continue;
      const late = (runsByJob.get(f.id) ?? []).find((r) => r.start > deadAt + CLOCK_SLACK_MS);
      if (late) {
        runsAfterDead++;
        pushExample(afterDeadEx, `${f.id}: dead-lettered at ${deadAt}, yet attempt ${late.attempt} started at ${late.start} on ${late.wpid}`);
      }
    }
  }

  // ---- terminal-state regressions
  const regressionIds = new Set<string>();
  const regressionEx: string[] = [];
  const firstTerminal = new Map<string, Observation>();
  const byTime = [...input.observations].sort((a, b) => a.at - b.at);
  for (const o of byTime) {
    const t = firstTerminal.get(o.id);
    if (TERMINAL.has(o.state)) {
      if (!t) firstTerminal.set(o.id, o);
    } else if (t && o.at > t.at) {
      if (!regressionIds.has(o.id))
        pushExample(regressionEx, `${o.id}: seen ${t.state} (attempt ${t.attempt}) at ${t.at}, then ${o.state} (attempt ${o.attempt}) at ${o.at}`);
      regressionIds.add(o.id);
    }
  }
  // A claim after the job was seen finished shows as a run with a higher attempt number.
  for (const [id, t] of firstTerminal) {
    const later = (runsByJob.get(id) ?? []).find((r) => r.attempt > t.attempt);
    if (later && !regressionIds.has(id)) {
      regressionIds.add(id);
      pushExample(regressionEx, `${id}: seen ${t.state} at attempt ${t.attempt} (${t.at}), then ran attempt ${later.attempt} at ${later.start}`);
    }
  }

  // ---- recovery: from a worker's death (or SIGSTOP) to its jobs being taken back
  //
  // A held job is taken back when the rescuer hands it back (its expired attempt is closed, store
  // clock): that is the mechanism the bound (lease + rescue interval) is about. Running again may
  // also wait for a free slot when the surviving workers are busy; that is reported, not bounded.
  // Time counts only while some worker had started (and was not stopped), the store was up and,
  // where the backend holds it after store trouble, the rescue was not held (rescueHoldWindows).
  const recoveryBoundMs = config.leaseMs + config.rescueIntervalMs + config.recoveryToleranceMs;
  const outages = observedFaults.filter((f): f is Extract<FaultEvent, { t: "outage" }> => f.t === "outage");
  const rescueHeld = rescueHoldWindows(observedFaults, config.rescueHoldMs ?? 0);
  const workingMs = workingTime(withoutBlockedLoops(input.available, observedFaults), [...outages, ...blocked, ...rescueHeld]);
  // The jobs a worker held when it died (or was stopped) are exactly those whose attempt under
  // that worker ended "lease-expired" after that moment; the rescue closed it (finishedAt).
  const expiredOn = new Map<number, Array<{ id: string; startedAt: number; rescuedAt: number }>>();
  for (const f of input.final) {
    for (const h of f.history) {
      if (h.outcome !== "lease-expired") continue;
      const list = expiredOn.get(h.pid) ?? [];
      list.push({ id: f.id, startedAt: h.startedAt, rescuedAt: h.finishedAt });
      expiredOn.set(h.pid, list);
    }
  }
  // What a slow recovery's failure message shows: the faults and the workers' availability between
  // the death and the take-back, so the evidence explains itself.
  const meanwhile = (from: number, to: number): string => {
    const faults = windows.filter((w) => w.jobIds === undefined && w.from <= to && w.to >= from).map((w) => w.label);
    const up = input.available.filter((a) => a.from <= to && a.to >= from).map((a) => `${a.wpid} ${a.from}..${a.to}`);
    return `; meanwhile: ${faults.join("; ") || "no fault"}; workers available: ${up.join(", ") || "none"}`;
  };
  let maxRecoveryMs: number | null = null;
  let maxRecoveryWallMs: number | null = null;
  let maxRunAgainMs: number | null = null;
  let recoveries = 0;
  const recoveryEx: string[] = [];
  let slowRecoveries = 0;
  // Broker model: a run its worker's death cut off (no end record) is redelivered by the broker
  // once it sees the connection gone; reported as the time to the job's next start (working time).
  let redeliveries = 0;
  let maxRedeliveryMs: number | null = null;
  if (broker) {
    for (const f of observedFaults) {
      if (f.t !== "death") continue;
      for (const r of runs) {
        if (r.wpid !== f.wpid || r.end !== null || r.start > f.at || endOf(r) !== f.at) continue;
        const next = (runsByJob.get(r.id) ?? []).find((x) => x.start > f.at);
        if (!next) continue;
        redeliveries++;
        const ms = Math.round(workingMs(f.at, next.start));
        if (maxRedeliveryMs === null || ms > maxRedeliveryMs) maxRedeliveryMs = ms;
      }
    }
  }
  for (const f of observedFaults) {
    if (f.t !== "death" && f.t !== "stop") continue;
    const wpid = f.wpid;
    const at = f.t === "death" ? f.at : f.from;
    for (const e of expiredOn.get(wpid) ?? []) {
      if (e.startedAt > at || e.rescuedAt < at) continue;
      const starts = (runsByJob.get(e.id) ?? []).map((r) => r.start).filter((t) => t > at);
      const runAgain = starts.length ? Math.min(...starts) : null;
      const back = Math.min(e.rescuedAt, runAgain ?? Infinity);
      const wall = back - at;
      const ms = Math.round(workingMs(at, back));
      recoveries++;
      if (maxRecoveryMs === null || ms > maxRecoveryMs) maxRecoveryMs = ms;
      if (maxRecoveryWallMs === null || wall > maxRecoveryWallMs) maxRecoveryWallMs = wall;
      if (runAgain !== null) {
        const again = Math.round(workingMs(at, runAgain));
        if (maxRunAgainMs === null || again > maxRunAgainMs) maxRunAgainMs = again;
      }
      if (ms > recoveryBoundMs) {
        slowRecoveries++;
        pushExample(
          recoveryEx,
          `${e.id}: taken back ${ms} ms (working time; ${wall} ms wall) after ${f.t === "death" ? `the death (${f.cause})` : "the SIGSTOP"} of ${f.slot}/${wpid} at ${at}` +
            meanwhile(at, back),
        );
      }
    }
  }

  // ---- SIGTERM: no claims after the signal, drained in time, documented exit code
  let claimsAfterSigterm = 0;
  let slowDrains = 0;
  let wrongExitCodes = 0;
  const claimEx: string[] = [];
  const drainEx: string[] = [];
  const exitEx: string[] = [];
  const sandboxed = new Set(config.sandboxedPids);
  const termExits = { zero: 0, one: 0 };
  let termInFlight: { min: number; max: number } | null = null;
  for (const t of input.terms) {
    const received = t.receivedAt;
    if (t.code === 0) termExits.zero++;
    if (t.code === 1) termExits.one++;
    // Jobs the worker held at the signal, by the store's record of their attempts.
    const signalAt = received ?? t.sentAt;
    let inFlight = 0;
    for (const f of input.final) for (const h of f.history) if (h.pid === t.wpid && h.startedAt <= signalAt && h.finishedAt >= signalAt) inFlight++;
    termInFlight =
      termInFlight === null ? { min: inFlight, max: inFlight } : { min: Math.min(termInFlight.min, inFlight), max: Math.max(termInFlight.max, inFlight) };
    if (received !== null) {
      // The worker's own clock for its handlers (in-process only: a sandbox starts later)…
      if (!sandboxed.has(t.wpid)) {
        for (const r of runs) {
          if (r.wpid === t.wpid && r.start > received) {
            claimsAfterSigterm++;
            pushExample(claimEx, `${t.slot}/${t.wpid}: ${r.id} started at ${r.start}, after SIGTERM at ${received}`);
          }
        }
      }
      // …and the store's record of claims (a claim that raced the signal is released unstarted).
      for (const f of input.final) {
        for (const h of f.history) {
          if (h.pid === t.wpid && h.startedAt > received + 50 && h.outcome !== "released") {
            claimsAfterSigterm++;
            pushExample(claimEx, `${t.slot}/${t.wpid}: claimed ${f.id} at ${h.startedAt} (store clock), after SIGTERM at ${received}`);
          }
        }
      }
    }
    const took = t.exitAt === null ? null : t.exitAt - t.sentAt;
    // With the store down or its connections cut meanwhile, acknowledgements wait for it: the
    // worker keeps trying them until their leases run out, so the limit grows by a lease.
    const end = t.exitAt ?? Infinity;
    const storeTrouble =
      observedFaults.some((f) => (f.t === "outage" && f.from <= end && f.to >= t.sentAt) || (f.t === "cut" && f.at >= t.sentAt && f.at <= end)) ||
      blocked.some((l) => l.from <= end && l.to >= t.sentAt);
    const limit = config.shutdownGraceMs + config.termToleranceMs + (storeTrouble ? config.leaseMs : 0);
    if (t.forced || took === null || took > limit) {
      slowDrains++;
      pushExample(
        drainEx,
        `${t.slot}/${t.wpid}: ${t.forced ? "did not exit, SIGKILLed" : `exited ${took} ms after SIGTERM`} (limit ${limit} ms${storeTrouble ? ", store trouble meanwhile" : ""}; ` +
          // How long the signal took to reach its handler: a process the machine starves of CPU sees it late.
          `${t.receivedAt === null ? "its log never said it received the signal" : `its log said it received the signal ${t.receivedAt - t.sentAt} ms after it was sent`})`,
      );
    }
    const expected = t.loggedDrained === null ? null : t.loggedDrained ? 0 : 1;
    if (!t.forced && (t.code === null || expected === null || t.code !== expected)) {
      wrongExitCodes++;
      pushExample(
        exitEx,
        `${t.slot}/${t.wpid}: exit ${t.code ?? t.signal}, log said ${t.loggedDrained === null ? "nothing" : t.loggedDrained ? "drained (0)" : "released (1)"}`,
      );
    }
  }

  // ---- poison pills
  let pills = 0;
  let pillsNotDead = 0;
  const pillEx: string[] = [];
  for (const [id, inv] of invokes) {
    if (!inv.kind.startsWith("pill-") || outcome.get(id) !== "ok") continue;
    pills++;
    const f = final.get(id);
    if (!f || f.state !== "dead" || f.attempt > inv.maxAttempts) {
      pillsNotDead++;
      pushExample(pillEx, `${id} (${inv.kind}): ${f ? `${f.state} after ${f.attempt} attempt(s), limit ${inv.maxAttempts}` : "missing"}`);
    }
  }
  const pillDeaths = input.faults.filter((f) => f.t === "death" && (f.cause === "watchdog" || f.cause === "exited")).length;
  // Each run of a blocking or exiting pill in a worker's own process may take that process down
  // once; in a sandbox, never. More deaths than that is a crash loop.
  const inProcessPillRuns = runs.filter((r) => {
    const k = kindOf(r.id);
    return (k === "pill-block" || k === "pill-exit") && r.pid === r.wpid;
  }).length;
  const sandboxedPillDeaths = input.faults.filter((f) => f.t === "death" && (f.cause === "watchdog" || f.cause === "exited") && sandboxed.has(f.wpid)).length;
  let maxHealthyWaitMs: number | null = null;
  const waitEx: string[] = [];
  let slowHealthy = 0;
  for (const [id, list] of runsByJob) {
    const inv = invokes.get(id);
    if (!inv || !HEALTHY_KINDS.includes(inv.kind) || (hitCount.get(id) ?? 0) > 0) continue;
    // Broker model: a delivery a worker held unstarted (prefetched) when it died or stopped is in
    // no history; any fault between the enqueue and the first start may have held the job.
    if (broker && windows.some((w) => concerns(w, id) && w.from <= list[0]!.start && w.to >= inv.at)) continue;
    // Claimed by a worker that went down before starting it (e.g. behind a pill that blocked
    // the loop in the same claim batch): a fault hit it even though it never ran there.
    const f = final.get(id);
    if (f && f.history.some((h) => h.outcome === "lease-expired" || h.outcome === "released")) continue;
    // Working time, as recoveries count it: while no worker had started (the run's start-up: the
    // producer enqueues while the workers still boot) or the store was down, no worker could take it.
    const wait = Math.max(0, Math.round(workingMs(inv.at, list[0]!.start)));
    if (maxHealthyWaitMs === null || wait > maxHealthyWaitMs) maxHealthyWaitMs = wait;
    if (checks.healthyDelayLimitMs !== null && wait > checks.healthyDelayLimitMs) {
      slowHealthy++;
      pushExample(waitEx, `${id} (${inv.kind}) waited ${wait} ms to start`);
    }
  }

  // ---- what actually happened
  const faults: CheckResult["metrics"]["faults"] = {
    killed: 0,
    failpoint: 0,
    stop: 0,
    outage: 0,
    cut: 0,
    term: 0,
    pill: pills,
    "died-other": 0,
    "start-failed": 0,
  };
  for (const f of observedFaults) {
    if (f.t === "death") {
      // Deaths in a SQLite store crash are counted by its outage event.
      if (f.cause === "killed") faults.killed++;
      else if (f.cause === "failpoint") faults.failpoint++;
      else if (f.cause === "start-failed") faults["start-failed"]++;
      else if (f.cause !== "store-crash") faults["died-other"]++;
    } else if (f.t === "stop") faults.stop++;
    else if (f.t === "term") faults.term++;
    else if (f.t === "outage") faults.outage++;
    else faults.cut++;
  }

  const bounds: Bound[] = [];
  const bound = (name: string, limit: string, value: number, ok: boolean, examples: string[] = []) => bounds.push({ name, limit, value, ok, examples });
  if (input.checks.lossMeasured) bound("lost", "measured (asynchronous replica)", lost, true, lostEx);
  else bound("lost", "= 0", lost, lost === 0, lostEx);
  if (kills.length > 0) {
    bounds.push({
      name: REPLICATION_WINDOW_LOSS,
      limit: "measured (acknowledged after the replica was last in step, before the kill; asynchronous replication only)",
      value: windowLost,
      ok: true,
      measured: true,
      examples: windowLossEx,
    });
  }
  bound(
    "healthy jobs dead-lettered (each explained by faults)",
    `<= ${checks.maxHealthyDead}`,
    healthyDead,
    healthyDead <= checks.maxHealthyDead,
    healthyDeadWhy,
  );
  bound("stranded (not finished after the drain)", "= 0", stranded, stranded === 0, strandedEx);
  bound("unexpected", "= 0", unexpectedIds.size, unexpectedIds.size === 0, unexpectedEx);
  if (broker) {
    bound("runs after the job was dead-lettered (broker)", "= 0", runsAfterDead, runsAfterDead === 0, afterDeadEx);
    bound("dead letters without forensics (broker)", "= 0", deadWithoutForensics, deadWithoutForensics === 0, forensicsEx);
  } else {
    bound("terminal-state regressions", "= 0", regressionIds.size, regressionIds.size === 0, regressionEx);
    bound("stale acknowledgements applied", "= 0", staleApplied, staleApplied === 0, staleEx);
    bound("completions without a finished run", "= 0", phantom, phantom === 0, phantomEx);
  }
  bound("jobs over 'executions <= designed + faults that hit it'", "= 0", execBoundBroken, execBoundBroken === 0, execEx);
  if (!broker) {
    bound("recoveries slower than lease + rescue interval + tolerance", `= 0 (bound ${recoveryBoundMs} ms)`, slowRecoveries, slowRecoveries === 0, recoveryEx);
  }
  bound("job id collisions", "= 0", idCollisions, idCollisions === 0, collisionExamples);
  bound("torn ledger lines", "= 0", input.torn, input.torn === 0);
  bound("faults recorded without the observation that proves them", "= 0", unobservedFaults, unobservedFaults === 0, unobservedEx);
  if (checks.sigterm) {
    bound("claims after SIGTERM", "= 0", claimsAfterSigterm, claimsAfterSigterm === 0, claimEx);
    bound("drains over grace + tolerance", `= 0 (grace ${config.shutdownGraceMs} + ${config.termToleranceMs} ms)`, slowDrains, slowDrains === 0, drainEx);
    bound("exit codes not as documented (0 drained, 1 released)", "= 0", wrongExitCodes, wrongExitCodes === 0, exitEx);
  }
  if (checks.poison) {
    bound("pills not dead within their attempts", "= 0", pillsNotDead, pillsNotDead === 0, pillEx);
    bound(
      "worker deaths caused by pills",
      `<= ${inProcessPillRuns} (in-process pill runs; 0 in sandboxes)`,
      pillDeaths,
      pillDeaths <= inProcessPillRuns && sandboxedPillDeaths === 0,
    );
    if (checks.healthyDelayLimitMs !== null) {
      bound("healthy jobs (no fault hit) delayed over a lease", `= 0 (limit ${checks.healthyDelayLimitMs} ms)`, slowHealthy, slowHealthy === 0, waitEx);
    }
  }
  const missing = checks.mustExercise.filter((k) => faults[k] === 0);
  bound("fault kinds that never happened", `= 0 (needs ${checks.mustExercise.join(", ") || "none"})`, missing.length, missing.length === 0, missing);

  return {
    model: broker ? "broker" : "records",
    metrics: {
      attempted: invokes.size,
      enqueuedOk,
      enqueueFailed,
      enqueueUnknown,
      lost,
      replicationWindow:
        kills.length === 0
          ? null
          : {
              kills: kills.length,
              asynchronousKills: kills.filter((k) => k.replication.waitReplicas === 0).length,
              maxBehindBytes: maxOrNull(
                kills.map((k) =>
                  k.replication.primaryOffset === null || k.replication.replicaOffset === null
                    ? null
                    : Math.max(0, k.replication.primaryOffset - k.replication.replicaOffset),
                ),
              ),
              maxInStepAgoMs: maxOrNull(kills.map((k) => (k.replication.inStepAt === null ? null : k.replication.killedAt - k.replication.inStepAt))),
              lost: windowLost,
              maxAckBeforeKillMs,
            },
      stranded,
      unexpected: unexpectedIds.size,
      recovered,
      duplicated,
      executions,
      maxExecutions,
      maxExecutionsJob,
      deadLettered,
      healthyDead,
      healthyDeadWhy,
      healthyDeadUnexplained,
      queuedAtEnd,
      runsAfterDead,
      deadWithoutForensics,
      redeliveries,
      maxRedeliveryMs,
      unobservedFaults,
      staleRefused: input.logs.settleRefused,
      leaseLost: input.logs.leaseLost,
      leaseLapses: {
        reports: lapses.length,
        jobs: new Set(lapses.flatMap((l) => l.jobIds)).size,
        maxTickLateMs: lapses.length ? Math.max(...lapses.map((l) => l.tickLateMs)) : null,
        maxRenewalPendingMs: lapses.length ? Math.max(...lapses.map((l) => l.renewalPendingMs)) : null,
      },
      staleApplied,
      phantomCompletions: phantom,
      regressions: regressionIds.size,
      execBoundBroken,
      maxRecoveryMs,
      maxRecoveryWallMs,
      maxRunAgainMs,
      recoveryBoundMs,
      recoveries,
      faults,
      stopsHoldingWriteLock: lockedStops.length,
      machineStalls: input.stalls?.length ?? 0,
      claimsAfterSigterm,
      termExits,
      termInFlight,
      failpointKills: input.logs.failpointKills,
      slowDrains,
      wrongExitCodes,
      terms: input.terms.length,
      pills,
      pillsNotDead,
      pillDeaths,
      maxHealthyWaitMs,
      idCollisions,
      tornLines: input.torn,
    },
    bounds,
    ok: bounds.every((b) => b.ok),
  };
}
