/**
 * What the chaos processes write down, and what the checker reads. Times are ms since the epoch
 * from `Date.now()` in the process that wrote them (all on one host, as the store's clock is).
 */
import type { AttemptOutcome, JobState } from "../src/index.js";

/** Kinds of chaos jobs; each kind's handler lives in chaos/handlers.ts. */
export type JobKind = "work" | "flaky" | "slow" | "pill-throw" | "pill-exit" | "pill-block" | "pill-timeout";

export const PILL_KINDS: readonly JobKind[] = ["pill-throw", "pill-exit", "pill-block", "pill-timeout"];

/** The producer's ledger (enqueues.jsonl): one `invoke` before each add, then its outcome. */
export type EnqueueRecord =
  | {
      t: "invoke";
      id: string;
      kind: JobKind;
      /** Executions the job needs by design when nothing fails around it (a flaky job: 2). */
      designed: number;
      /** Attempts the job is allowed (its maxAttempts). */
      maxAttempts: number;
      at: number;
      incarnation: number;
    }
  /** The store acknowledged the job. `duplicate`: the id already existed (never expected). */
  | { t: "ok"; id: string; at: number; duplicate: boolean }
  /** Definitely not stored (refused before anything was written). */
  | { t: "fail"; id: string; at: number; error: string }
  /** The call failed in a way that leaves it open whether the job was stored. */
  | { t: "unknown"; id: string; at: number; error: string };

/** A handler's ledger (runs-PID.jsonl): a record when a run starts and one when it ends. */
export type RunRecord =
  | {
      t: "start";
      id: string;
      name: string;
      attempt: number;
      /** The lease's fencing token (`job.lease?.token`). */
      token: number | null;
      /** The process running the handler (a sandbox child in sandbox mode). */
      pid: number;
      /** The worker process that claimed the job (= pid unless sandboxed). */
      wpid: number;
      slot: string;
      at: number;
    }
  | {
      t: "end";
      id: string;
      attempt: number;
      token: number | null;
      pid: number;
      wpid: number;
      at: number;
      ok: boolean;
      error?: string;
    };

/**
 * A fault as it actually happened, recorded by the runner (events.jsonl). Each carries the
 * observation that proves it happened (the checker ignores, and reports, one without it): a fault
 * the runner only attempted must neither excuse a duplicate nor count as exercised.
 */
export type FaultEvent =
  /**
   * A worker process died (anything but a clean exit 0 or 1 after a SIGTERM). `cause` "killed"
   * needs `signal` SIGKILL; "failpoint" and "watchdog" need `said`, the process's own log line.
   */
  | { t: "death"; slot: string; wpid: number; at: number; cause: DeathCause; code: number | null; signal: string | null; said?: string | null }
  /**
   * A worker was SIGSTOPped at `from` and SIGCONTed at `to`; `seen`: /proc showed it stopped.
   * `heldWriteLock`: /proc/locks showed it frozen holding the store's one write lock (SQLite's WAL
   * write lock), so no other process could write until the SIGCONT: the store was down meanwhile.
   */
  | { t: "stop"; slot: string; wpid: number; from: number; to: number; seen?: boolean; heldWriteLock?: boolean }
  /** A worker was sent SIGTERM at `from` and exited at `to`. */
  | { t: "term"; slot: string; wpid: number; from: number; to: number; code: number | null; signal: string | null }
  /**
   * The store was down (crashed) from `from` until it answered again at `to`. Observed: a server
   * crash whose command succeeded and after which a probe failed (`probeFailedAt`), or, on
   * SQLite, the processes with the file open SIGKILLed (`processesKilled` > 0).
   */
  | { t: "outage"; from: number; to: number; how: string; probeFailedAt?: number | null; processesKilled?: number; replication?: ReplicationAtKill }
  /**
   * Every client connection to the store was cut at `at` (by a command started at `from`, when it
   * takes time: RabbitMQ's closes run on the node while the command returns); observed when `killed` > 0.
   */
  | { t: "cut"; at: number; killed: number; from?: number };

/**
 * Where replication stood when a replicated store's primary was killed (Redis Sentinel): the
 * evidence that ties an acknowledged write missing afterwards to that kill. A write the primary
 * acknowledged after `inStepAt` and before the kill may not have reached the replica that was
 * promoted; one acknowledged before `inStepAt` had reached it.
 */
export interface ReplicationAtKill {
  /** Replicas every write waited for (the backend's waitForReplicas, WAIT); 0: asynchronous replication. */
  waitReplicas: number;
  /** The killed primary's port. */
  primaryPort: number;
  /** The last look before the kill, started at `readAt`: the primary's master_repl_offset, then the replica's slave_repl_offset (null: unread). */
  readAt: number | null;
  primaryOffset: number | null;
  replicaOffset: number | null;
  /**
   * The latest moment known before the kill by which everything the primary had written was on the
   * replica (a replica offset read at or past a primary offset read after this moment, with this
   * primary serving); null when no look ever saw the replica in step with it.
   */
  inStepAt: number | null;
  /** When the SIGKILL had taken effect (the process seen gone). */
  killedAt: number;
}

/**
 * killed: by the harness. failpoint, watchdog: the process said so. store-crash: SQLite's store
 * crash. start-failed: exited before it had started (the CLI cannot open a store that is down).
 * exited: exited by itself after starting (a pill calling process.exit). unknown: anything else.
 */
export type DeathCause = "killed" | "failpoint" | "watchdog" | "store-crash" | "start-failed" | "exited" | "unknown";

/** A sample of one job's state, taken by the runner's monitor from the store. */
export interface Observation {
  id: string;
  state: JobState;
  attempt: number;
  at: number;
}

/** One attempt of a job's stored history, as the checker needs it. */
export interface HistoryEntry {
  attempt: number;
  pid: number;
  startedAt: number;
  finishedAt: number;
  outcome: AttemptOutcome;
}

/** A job as stored at the end of the run. */
export interface FinalJob {
  id: string;
  name: string;
  state: JobState;
  attempt: number;
  maxAttempts: number;
  result: unknown;
  /** The last error, "Name: message", or null. */
  error: string | null;
  history: HistoryEntry[];
  /** When it was dead-lettered (store clock), for a dead job of a store without job records. */
  deadAt?: number | null;
}

/** What the runner saw of one SIGTERM. */
export interface TermObservation {
  slot: string;
  wpid: number;
  /** When the runner sent the signal. */
  sentAt: number;
  /** The worker's own log time of "received SIGTERM", or null if it never logged it. */
  receivedAt: number | null;
  /** When the process exited (null: it had to be SIGKILLed, see `forced`). */
  exitAt: number | null;
  code: number | null;
  signal: string | null;
  /** What the worker's log said: true "exiting 0" (drained), false "exiting 1" (released), null nothing. */
  loggedDrained: boolean | null;
  /** The process did not exit within its grace period + tolerance and was SIGKILLed. */
  forced: boolean;
}

/**
 * A worker's own report that leases it held lapsed before a renewal reached the store (its
 * "leases lapsed" warning): its process ran late (no CPU, a blocked loop) or the store answered
 * late, and the jobs named may have run again elsewhere.
 */
export interface LeaseLapseRecord {
  /** The worker process (from its worker id). */
  wpid: number;
  /** When the worker noticed, by the log line's time (epoch ms). */
  at: number;
  jobIds: string[];
  /** How long before `at` the earliest lease lapsed, ms. */
  lapsedForMs: number;
  /** How late the heartbeat tick that noticed it fired, ms (time the process's event loop did not run). */
  tickLateMs: number;
  /** How long a renewal had been out without an answer, ms (0 when none was). */
  renewalPendingMs: number;
}

/** Counts taken from the worker logs. */
export interface LogFacts {
  settleRefused: number;
  leaseLost: number;
  watchdogKills: number;
  /** Failpoint kills by point: after-claim, after-handler, after-ack. */
  failpointKills: Record<string, number>;
  workerErrors: number;
  /** The workers' lease-lapse reports (absent in evidence saved before they existed). */
  lapses?: LeaseLapseRecord[];
}
