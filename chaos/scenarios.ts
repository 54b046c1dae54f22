/**
 * The scenarios, one per fault kind plus "mixed", and the fault schedule each draws from the
 * seed. The schedule is a pure function of (scenario, backend, seconds, seed): printing it again
 * from the same seed gives the same faults at the same offsets.
 */
import type { ExercisedKind } from "./checker.js";
import type { Mix } from "./jobs.js";
import { Prng } from "./prng.js";
import type { BackendKind } from "./stores.js";
import type { TopologyKind } from "./topologies.js";

export type ScenarioName = "kill" | "failpoints" | "stop" | "store-crash" | "conn-cut" | "poison" | "sigterm" | "mixed" | FailoverScenarioName;
/** The scenarios `--scenario all` runs (each on the backend given). */
export const SCENARIOS: readonly ScenarioName[] = ["kill", "failpoints", "stop", "store-crash", "conn-cut", "poison", "sigterm", "mixed"];

/**
 * Scale-out and failover (issue 19): each but rolling-restart brings its own replicated store
 * (chaos/topologies.ts), so it implies its backend; rolling-restart runs on the backend given.
 * `--scenario failover` runs them all.
 */
export type FailoverScenarioName = "redis-cluster-failover" | "redis-sentinel-failover" | "pg-primary-switch" | "pg-primary-switch-async" | "rolling-restart";
export const FAILOVER_SCENARIOS: readonly FailoverScenarioName[] = [
  "redis-cluster-failover",
  "redis-sentinel-failover",
  "pg-primary-switch",
  "pg-primary-switch-async",
  "rolling-restart",
];

export type FaultKind = "kill" | "stop" | "term" | "store-crash" | "conn-cut" | "failover" | "reshard" | "rolling";

export type PlannedFault =
  | { kind: "kill"; atMs: number; slot: number }
  | { kind: "stop"; atMs: number; slot: number; forMs: number }
  | { kind: "term"; atMs: number; slot: number }
  | { kind: "store-crash"; atMs: number; downMs: number }
  | { kind: "conn-cut"; atMs: number }
  /** Kill the primary (the chaos queue's master) of a replicated store; a replica takes over. */
  | { kind: "failover"; atMs: number }
  /** Redis Cluster: move the chaos queue's slot to another master (redis-cli --cluster reshard). */
  | { kind: "reshard"; atMs: number }
  /** SIGTERM every worker in turn, the next once the previous one's replacement has started. */
  | { kind: "rolling"; atMs: number };

/** The worker settings every scenario runs with (CLI flags of `conveyor worker`). */
export const WORKER = {
  slots: 3,
  concurrency: 4,
  leaseMs: 3_000,
  rescueIntervalMs: 1_000,
  pollIntervalMs: 250,
  shutdownGraceMs: 2_000,
  /** The worker slot that runs with `--prefetch`, and how many jobs it claims ahead. */
  prefetchSlot: 2,
  prefetch: 8,
} as const;

export interface ScenarioDef {
  name: ScenarioName;
  summary: string;
  /** Timed faults drawn for this scenario (round-robin over a shuffled list in "mixed"). */
  faults: readonly FaultKind[];
  /** Mean time between two timed faults, ms. */
  meanGapMs: number;
  /** Probability that a worker (re)start is armed with a failpoint. */
  failpointChance: number;
  /** Range of the failpoint's n (the n-th time the point is reached). */
  failpointNth: readonly [number, number];
  mix: Mix;
  ratePerSec: number;
  bursts?: { everyMs: number; size: number };
  /** One poison pill every `everyMs` (the four kinds in turns). */
  pills?: { everyMs: number };
  /** Worker slots that run handlers in a sandbox (--sandbox). */
  sandboxSlots: readonly number[];
  mustExercise: readonly ExercisedKind[];
  sigtermChecks: boolean;
  poisonChecks: boolean;
  /** The replicated store the scenario brings (it then runs on that store's backend only). */
  topology?: TopologyKind;
  /** Worker processes (default WORKER.slots). */
  workers?: number;
  /** Queues the producer spreads jobs over, worker i serving queue i mod queues (default 1). */
  queues?: number;
  /** Faults in the order listed, round after round, instead of shuffled. */
  fixedOrder?: boolean;
  /**
   * Acknowledged jobs may go missing (an asynchronous replica promoted before it had them): the
   * checker still counts them as lost, but as a measurement, not a broken bound.
   */
  lossMeasured?: boolean;
}

const HEALTHY: Mix = { work: 85, flaky: 15 };

/**
 * A failover scenario: healthy jobs at a steady rate, no worker faults, the replicated store of
 * `topology` failed over every ~12 s; only its name, topology and the differences vary.
 */
function failoverScenario(name: ScenarioName, summary: string, topology: TopologyKind, extra: Partial<ScenarioDef> = {}): ScenarioDef {
  return {
    name,
    summary,
    faults: ["failover"],
    meanGapMs: 12_000,
    failpointChance: 0,
    failpointNth: [1, 1],
    mix: HEALTHY,
    ratePerSec: 20,
    sandboxSlots: [],
    mustExercise: ["outage"],
    sigtermChecks: false,
    poisonChecks: false,
    topology,
    ...extra,
  };
}

export const SCENARIO_DEFS: Readonly<Record<ScenarioName, ScenarioDef>> = {
  kill: {
    name: "kill",
    summary: "SIGKILL a random worker at random times",
    faults: ["kill"],
    meanGapMs: 3_000,
    failpointChance: 0,
    failpointNth: [1, 1],
    mix: HEALTHY,
    ratePerSec: 20,
    sandboxSlots: [],
    mustExercise: ["killed"],
    sigtermChecks: false,
    poisonChecks: false,
  },
  failpoints: {
    name: "failpoints",
    summary: "every worker start armed with a failpoint: SIGKILL just after a claim, after the handler, or after the ack",
    faults: [],
    meanGapMs: 0,
    failpointChance: 1,
    failpointNth: [3, 60],
    mix: HEALTHY,
    ratePerSec: 20,
    sandboxSlots: [],
    mustExercise: ["failpoint"],
    sigtermChecks: false,
    poisonChecks: false,
  },
  stop: {
    name: "stop",
    summary: "SIGSTOP a random worker for 1.5-2.5 leases, then SIGCONT: its late acks must be refused",
    faults: ["stop"],
    meanGapMs: 6_000,
    failpointChance: 0,
    failpointNth: [1, 1],
    mix: HEALTHY,
    ratePerSec: 20,
    sandboxSlots: [],
    mustExercise: ["stop"],
    sigtermChecks: false,
    poisonChecks: false,
  },
  "store-crash": {
    name: "store-crash",
    summary: "the store crashes and comes back (PostgreSQL immediate stop, Redis SIGKILL, SQLite: every writer SIGKILLed)",
    faults: ["store-crash"],
    meanGapMs: 9_000,
    failpointChance: 0,
    failpointNth: [1, 1],
    mix: HEALTHY,
    ratePerSec: 20,
    sandboxSlots: [],
    mustExercise: ["outage"],
    sigtermChecks: false,
    poisonChecks: false,
  },
  "conn-cut": {
    name: "conn-cut",
    summary: "every client connection cut (pg_terminate_backend, Redis CLIENT KILL)",
    faults: ["conn-cut"],
    meanGapMs: 2_500,
    failpointChance: 0,
    failpointNth: [1, 1],
    mix: HEALTHY,
    ratePerSec: 20,
    sandboxSlots: [],
    mustExercise: ["cut"],
    sigtermChecks: false,
    poisonChecks: false,
  },
  poison: {
    name: "poison",
    summary: "poison pills (throws, process.exit, blocks the event loop, exceeds its timeout); w0 and w1 sandboxed, w2 in-process with the watchdog",
    faults: [],
    meanGapMs: 0,
    failpointChance: 0,
    failpointNth: [1, 1],
    mix: HEALTHY,
    ratePerSec: 15,
    pills: { everyMs: 4_000 },
    sandboxSlots: [0, 1],
    mustExercise: ["pill"],
    sigtermChecks: false,
    poisonChecks: true,
  },
  sigterm: {
    name: "sigterm",
    summary: "SIGTERM a random worker at full load: no claims after it, drain within the grace period, exit 0/1",
    faults: ["term"],
    meanGapMs: 4_000,
    failpointChance: 0,
    failpointNth: [1, 1],
    mix: { work: 80, flaky: 10, slow: 10 },
    ratePerSec: 15,
    bursts: { everyMs: 4_000, size: 60 },
    sandboxSlots: [],
    mustExercise: ["term"],
    sigtermChecks: true,
    poisonChecks: false,
  },
  mixed: {
    name: "mixed",
    summary: "all of the above at once",
    faults: ["kill", "stop", "term", "store-crash", "conn-cut"],
    meanGapMs: 3_000,
    failpointChance: 0.5,
    // Low enough that armed workers reach it before the next fault kills them: mixed requires it.
    failpointNth: [2, 20],
    mix: { work: 80, flaky: 12, slow: 8 },
    ratePerSec: 15,
    pills: { everyMs: 6_000 },
    sandboxSlots: [0, 1],
    // Half the worker starts are armed: a run where none fired did not test what it claims.
    mustExercise: ["killed", "failpoint", "stop", "term", "outage", "cut", "pill"],
    sigtermChecks: true,
    poisonChecks: true,
  },
  "redis-cluster-failover": failoverScenario(
    "redis-cluster-failover",
    "Redis Cluster (3 masters + 1 replica each): the chaos queue's master SIGKILLed under load (its replica promoted), and its slot moved to another master (redis-cli --cluster reshard), in turns",
    "redis-cluster",
    { faults: ["failover", "reshard"], fixedOrder: true },
  ),
  "redis-sentinel-failover": failoverScenario(
    "redis-sentinel-failover",
    "Redis primary + replica + 3 sentinels: the primary SIGKILLed under load, the sentinels promote the replica, ioredis follows",
    "redis-sentinel",
  ),
  "pg-primary-switch": failoverScenario(
    "pg-primary-switch",
    "PostgreSQL primary + synchronous hot standby behind a multi-host URL (target_session_attrs=read-write): the primary crashed under load, the standby promoted",
    "pg-sync",
  ),
  "pg-primary-switch-async": failoverScenario(
    "pg-primary-switch-async",
    "the same with an asynchronous standby: what a promotion loses is measured (lost counted, not bounded)",
    "pg-async",
    { lossMeasured: true },
  ),
  "rolling-restart": {
    name: "rolling-restart",
    summary: "20 workers over 4 queues, SIGTERM one at a time (the next once its replacement started), as a Deployment rollout",
    faults: ["rolling"],
    meanGapMs: 10_000,
    failpointChance: 0,
    failpointNth: [1, 1],
    mix: { work: 80, flaky: 10, slow: 10 },
    ratePerSec: 40,
    sandboxSlots: [],
    mustExercise: ["term"],
    sigtermChecks: true,
    poisonChecks: false,
    workers: 20,
    queues: 4,
  },
};

/** The name of queue `i` of a scenario (the first is CHAOS_QUEUE). */
export function queueName(i: number): string {
  return i === 0 ? "chaos" : `chaos-${i}`;
}

/** Every queue a scenario's producer fills. */
export function queuesOf(def: ScenarioDef): string[] {
  return Array.from({ length: def.queues ?? 1 }, (_, i) => queueName(i));
}

/**
 * Healthy jobs a scenario may end with dead-lettered, each explained by faults (a dead healthy
 * job that no fault explains is lost, whatever this says). 0: a lease expiry counts toward a job's
 * quarantine (maxStalls) only when the job was alone in its worker, the likely culprit, so the
 * deaths of workers that merely held a healthy job (in a prefetch buffer, say) never dead-letter
 * it. Before that rule the suite's 30 s mixed runs ended with 0-6 such jobs per backend.
 * `--max-healthy-dead` and CHAOS_MAX_HEALTHY_DEAD override it.
 */
export const DEFAULT_MAX_HEALTHY_DEAD = 0;

/** Why a scenario does not apply to a backend, or null when it does. */
export function notApplicable(scenario: ScenarioName, backend: BackendKind): string | null {
  if (scenario === "conn-cut" && backend === "sqlite") return "SQLite is embedded: there are no connections to cut";
  const topology = SCENARIO_DEFS[scenario].topology;
  if (topology !== undefined && !topology.startsWith(backend === "postgres" ? "pg-" : backend)) return `it runs on its own ${topology} store`;
  return null;
}

/** The definition as it applies to `backend` (mixed drops what the backend cannot suffer). */
export function scenarioFor(name: ScenarioName, backend: BackendKind): ScenarioDef {
  const def = SCENARIO_DEFS[name];
  if (backend !== "sqlite" || name !== "mixed") return def;
  return { ...def, faults: def.faults.filter((f) => f !== "conn-cut"), mustExercise: def.mustExercise.filter((k) => k !== "cut") };
}

/** Quiet time at the start (workers starting) and at the end of the fault phase, ms. */
export const WARMUP_MS = 3_000;
export const QUIET_TAIL_MS = 1_500;
/** Steady work before a rollout starts: the throughput baseline it is measured against. */
export const ROLLOUT_BASELINE_MS = 10_000;

/** The timed faults of one run, in order. */
export function planFaults(def: ScenarioDef, durationMs: number, prng: Prng): PlannedFault[] {
  const out: PlannedFault[] = [];
  if (def.faults.length === 0) return out;
  let bag: FaultKind[] = [];
  const slots = def.workers ?? WORKER.slots;
  // Failovers start early (a short run still gets one); a rollout after ROLLOUT_BASELINE_MS of
  // steady work, the throughput it is compared with.
  let t = def.faults.includes("rolling")
    ? WARMUP_MS + ROLLOUT_BASELINE_MS
    : WARMUP_MS + prng.between(0, def.meanGapMs / (def.fixedOrder || def.topology ? 6 : 2));
  while (t < durationMs - QUIET_TAIL_MS) {
    if (bag.length === 0) bag = def.fixedOrder ? [...def.faults] : prng.shuffle(def.faults);
    const kind = bag.shift()!;
    const atMs = Math.round(t);
    let busyMs = 0;
    switch (kind) {
      case "kill":
        out.push({ kind, atMs, slot: prng.int(0, slots - 1) });
        break;
      case "stop": {
        const forMs = Math.round(WORKER.leaseMs * prng.between(1.5, 2.5));
        out.push({ kind, atMs, slot: prng.int(0, slots - 1), forMs });
        break;
      }
      case "term":
        out.push({ kind, atMs, slot: prng.int(0, slots - 1) });
        break;
      case "store-crash": {
        const downMs = prng.int(500, 3_000);
        out.push({ kind, atMs, downMs });
        busyMs = downMs;
        break;
      }
      case "conn-cut":
      case "failover":
      case "reshard":
      case "rolling":
        out.push({ kind, atMs });
        break;
    }
    t += busyMs + def.meanGapMs * prng.between(0.5, 1.5);
  }
  return out;
}

/** The failpoint a worker start gets (CONVEYOR_FAILPOINTS), or null. */
export function failpointFor(def: ScenarioDef, prng: Prng): string | null {
  if (!prng.chance(def.failpointChance)) return null;
  const name = prng.pick(["after-claim", "after-handler", "after-ack"] as const);
  return `${name}:${prng.int(def.failpointNth[0], def.failpointNth[1])}`;
}
