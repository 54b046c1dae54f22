import type { Json } from "./json.js";

/**
 * The life of a job:
 *
 *   scheduled ──(run_at reached)──> waiting ──claim──> active ──> completed
 *                                                         ├──> scheduled   failed, retried after a backoff
 *                                                         ├──> dead        attempts exhausted or UnrecoverableError
 *                                                         ├──> waiting     released on shutdown (no attempt used)
 *                                                         └──> cancelled
 *
 * A `scheduled` job whose run_at has passed is claimable exactly like a `waiting` one; backends
 * report it as `waiting` (see `effectiveState`).
 *
 * The parent of a flow (`queue.addFlow`) starts in `waiting-children`: never claimed, until its
 * last child has settled (completed, dead or cancelled). It then becomes `scheduled` at its own
 * run_at (due at once, unless it was added with a delay that has not passed), or `dead` as soon as
 * a child fails when its flow's policy is "fail". Cancelling it cancels its children that have not
 * started.
 */
export type JobState = "scheduled" | "waiting" | "waiting-children" | "active" | "completed" | "dead" | "cancelled";

export const JOB_STATES: readonly JobState[] = ["scheduled", "waiting", "waiting-children", "active", "completed", "dead", "cancelled"];
export const TERMINAL_STATES: readonly JobState[] = ["completed", "dead", "cancelled"];

/** How long to wait before the next attempt. Persisted with the job, so it is plain data. */
export type BackoffSpec =
  | {
      /** Full jitter: random(0, min(maxDelayMs, delayMs * 2^retryIndex)). */
      type: "exponential";
      /** Base delay in milliseconds. */
      delayMs: number;
      /** Ceiling in milliseconds. */
      maxDelayMs: number;
    }
  | {
      /** The same delay before every retry. */
      type: "fixed";
      /** Delay in milliseconds. */
      delayMs: number;
    };

/**
 * How long a finished job is kept before the pruner deletes it, in milliseconds.
 * `0` deletes it as it finishes; `null` keeps it until removed by hand (it is also exempt from the
 * queue's count limit).
 */
export type RetentionMs = number | null;

/** A job as the producer hands it to a backend: validated, defaults applied, payload serialised. */
export interface JobSpec {
  /** Unique id. When the caller gave one it is also the dedup key. */
  id: string;
  /**
   * True when `id` was made by the producer (`newJobId`, no `jobId` option): a fresh id nobody
   * else holds, so a store may insert it without first looking for a stored job of that id.
   * Only a hint: a store that takes it must still report a duplicate (e.g. a spec sent again
   * after a lost answer) as `buildJobSpec`'s callers expect. Absent (false) for caller-chosen ids.
   */
  idGenerated?: boolean;
  queue: string;
  name: string;
  /** The payload, already serialised as JSON text (validated and size-checked). */
  payload: string;
  /** Lower runs first. */
  priority: number;
  /** Absolute time to become runnable, ms since epoch; `null` means "now + delayMs" on the store clock. */
  runAt: number | null;
  /** Used only when `runAt` is null: delay from the store's now, in milliseconds. */
  delayMs: number;
  /** Total attempts allowed, including the first. */
  maxAttempts: number;
  backoff: BackoffSpec;
  /** Per-attempt time limit in milliseconds, or null for none. */
  timeoutMs: number | null;
  /** Retention once completed or cancelled. */
  retainCompletedMs: RetentionMs;
  /** Retention once dead. */
  retainDeadMs: RetentionMs;
  /** Metadata kept beside the payload (trace context, callback URL), serialised JSON object, or null. */
  meta: string | null;
  /** The dedup window this job opens or joins (`options.dedup`), or absent for none. */
  dedup?: DedupWindow;
  /** Group and limiter key (options `group`, `limiter`); absent for most jobs. */
  flow?: JobFlow;
}

/** A job's own flow control (docs/flow-control.md). */
export interface JobFlow {
  group: { key: string; concurrency: number } | null;
  limiter: { key: string; max: number; durationMs: number } | null;
}

/**
 * What happens to a job added while another job with the same dedup key is inside its window:
 * - `drop`: the new job is not stored; the result names the window's job (`duplicate: true`).
 * - `extend`: as `drop`, and the window restarts: it now ends `ttlMs` after this add.
 * - `replace` (debounce): the window's job, while it still waits (`waiting` or `scheduled`), takes
 *   the new job's data and run time (now + its `delayMs`, or its `runAt`) and the window restarts.
 *   Once the window's job has started (or finished), the new job is stored and opens a new window.
 */
export type DedupMode = "drop" | "replace" | "extend";

/** A dedup window, checked: see `JobOptions.dedup`. */
export interface DedupWindow {
  /** Dedup key, unique per queue: 1-255 characters, no control characters. */
  key: string;
  /** Length of the window in ms from the add that opened (or restarted) it. */
  ttlMs: number;
  mode: DedupMode;
}

/** An error as stored: enough to debug without the process that raised it. */
export interface ErrorInfo {
  name: string;
  message: string;
  stack: string | null;
}

export type AttemptOutcome = "completed" | "failed" | "dead" | "released" | "lease-expired" | "cancelled";

/** One attempt in a job's history. */
export interface AttemptRecord {
  attempt: number;
  workerId: string;
  host: string;
  pid: number;
  /** ms since epoch, store clock. */
  startedAt: number;
  finishedAt: number;
  outcome: AttemptOutcome;
  error: ErrorInfo | null;
}

/** Identifies one claim of one job. Every settle call must present it; a stale token is refused. */
export interface Lease {
  jobId: string;
  /**
   * Fencing token: greater on every claim of this job than on the last, never handed out twice (one
   * greater on SQLite and PostgreSQL; on Redis at least the server's time in µs: docs/failover.md).
   * A safe integer.
   */
  token: number;
}

/** Who is running a job. */
export interface WorkerIdentity {
  id: string;
  host: string;
  pid: number;
}

/** A job as stored, returned by `get`, `list` and `claim`. */
export interface JobRecord {
  id: string;
  queue: string;
  name: string;
  data: Json;
  state: JobState;
  priority: number;
  /** Attempts started so far (1 while the first attempt runs). */
  attempt: number;
  maxAttempts: number;
  backoff: BackoffSpec;
  timeoutMs: number | null;
  /** When the job is (or was) due, ms since epoch. */
  runAt: number;
  createdAt: number;
  /** Start of the current or last attempt. */
  startedAt: number | null;
  /** When it reached completed / dead / cancelled. */
  finishedAt: number | null;
  /** Current lease while active. */
  lease: (Lease & { expiresAt: number; worker: WorkerIdentity }) | null;
  progress: Json | null;
  result: Json | null;
  /** The last attempt's error, if it failed. */
  error: ErrorInfo | null;
  /** Every finished attempt, oldest first. */
  history: AttemptRecord[];
  /** Lease expiries in a row (reset by any normal settle); a quarantine counter. */
  stalls: number;
  /** Times this job was replayed out of the dead-letter state. */
  replays: number;
  /** Metadata given at enqueue (`options.meta`), or null. */
  meta: { [key: string]: Json } | null;
  /** The flow parent this job is a child of (`queue.addFlow`); absent for a job outside a flow. */
  parent?: FlowRef;
}

/** A job named by id and queue (on Redis ids are unique per queue only). */
export interface FlowRef {
  id: string;
  queue: string;
}

/**
 * What a flow parent does when one of its children ends dead or cancelled:
 * - `fail` (the default): the parent becomes `dead` at once (error `ChildFailedError` naming the
 *   child); its other children carry on.
 * - `continue`: the parent runs once every child has settled, and `ctx.children()` lists the
 *   failures beside the results.
 */
export type ChildFailurePolicy = "fail" | "continue";

/** One child of a flow parent, as `ctx.children()` and `backend.flow()` report it. */
export interface ChildOutcome {
  id: string;
  queue: string;
  name: string;
  /**
   * The outcome recorded when the child settled (completed, dead, cancelled), or, while it has not
   * settled yet, its current state.
   */
  state: JobState;
  /** True once the child's outcome has reached the parent. */
  settled: boolean;
  /** The child's result when completed, else null. */
  result: Json | null;
  /** The child's last error when dead, else null. */
  error: ErrorInfo | null;
}

/** A job's place in a flow: its parent (if any) and its children (if it is a parent). */
export interface FlowInfo {
  parent: FlowRef | null;
  /** For a parent: what a failed child does to it; null for a job with no children. */
  onChildFailure: ChildFailurePolicy | null;
  /** Children that have not settled yet. */
  pendingChildren: number;
  /** Every child, in the order they were added. */
  children: ChildOutcome[];
}

/** One job of a flow as handed to `Backend.enqueueFlow`: its spec and its parent's position. */
export interface FlowNodeSpec {
  spec: JobSpec;
  /** Index in the same array of this job's parent (always an earlier node), or null for the root. */
  parent: number | null;
  /** Used when this node has children. */
  onChildFailure: ChildFailurePolicy;
}

/** `scheduled` jobs that are due are reported as `waiting`. */
export function effectiveState(state: JobState, runAt: number, now: number): JobState {
  return state === "scheduled" && runAt <= now ? "waiting" : state;
}
