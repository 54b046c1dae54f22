import { ConveyorError } from "../core/errors.js";

/**
 * What a worker is doing, one mode at a time:
 * - `created`: constructed with `autostart: false`, `run()` not called yet: no claims, no heartbeats.
 * - `starting`: running, but its sandbox has not said yet which job names it handles: no claims.
 * - `waiting`: running, no claim in flight; a wake-up, the poll timer or a free slot starts one.
 * - `polling`: a claim is in flight (on its own, or riding with completions).
 * - `paused`: `pause()`: no claims and no buffered starts until `resume()`; running jobs finish.
 * - `draining`: `close()` began: no more claims; in-flight jobs finish or are released.
 * - `stopped`: closed.
 */
export type WorkerMode = "created" | "starting" | "waiting" | "polling" | "paused" | "draining" | "stopped";

/** Every legal move. Anything else is a bug in the worker, and throws. */
const NEXT: Readonly<Record<WorkerMode, readonly WorkerMode[]>> = {
  created: ["starting", "waiting", "paused", "draining"],
  starting: ["waiting", "paused", "draining"],
  waiting: ["polling", "paused", "draining"],
  polling: ["waiting", "paused", "draining"],
  // Back to where pause() found it (created when run() was never called).
  paused: ["created", "starting", "waiting", "draining"],
  draining: ["stopped"],
  stopped: [],
};

/** A worker tried a move between modes that its design does not allow. */
export class IllegalModeTransitionError extends ConveyorError {
  override name = "IllegalModeTransitionError";
  constructor(
    readonly from: WorkerMode,
    readonly to: WorkerMode,
  ) {
    super(`worker mode cannot go from ${from} to ${to} (allowed from ${from}: ${NEXT[from].join(", ") || "none"}); this is a bug in Conveyor's worker`);
  }
}

/** The worker's current mode and its checked transitions (like graphile-worker's LocalQueue modes). */
export class ModeMachine {
  private mode: WorkerMode = "created";

  get current(): WorkerMode {
    return this.mode;
  }

  /** True in one of `modes`. */
  is(...modes: WorkerMode[]): boolean {
    return modes.includes(this.mode);
  }

  /** Moves to `next`; throws IllegalModeTransitionError when that move is not allowed. */
  to(next: WorkerMode): void {
    if (!NEXT[this.mode].includes(next)) throw new IllegalModeTransitionError(this.mode, next);
    this.mode = next;
  }

  /** Claims may go out and buffered jobs may start. */
  get claiming(): boolean {
    return this.mode === "waiting" || this.mode === "polling";
  }

  /** `close()` began (or ended). */
  get closing(): boolean {
    return this.mode === "draining" || this.mode === "stopped";
  }
}
