import { EventEmitter } from "node:events";
import type { RescuedJob } from "../backend/contract.js";
import type { LeaseLossReason } from "./errors.js";
import type { JobRecord } from "./job.js";
import type { Json } from "./json.js";

/**
 * Every observable thing a worker does, as one typed event stream. Logs, metrics and traces all
 * subscribe to it; nothing else is an observation surface.
 */
export interface WorkerEvents {
  /** A job was claimed and its handler started. `waitMs`: from due (run_at) to start. */
  "job:started": { job: JobRecord; workerId: string; waitMs: number };
  /** The store accepted the completion. `durationMs`: handler run time. */
  "job:completed": { job: JobRecord; result: Json; durationMs: number };
  /** An attempt failed; `retryDelayMs` is null when the job went dead instead. */
  "job:failed": { job: JobRecord; error: Error; durationMs: number; retryDelayMs: number | null };
  /** A failed attempt will be retried after `delayMs`. */
  "job:retry-scheduled": { job: JobRecord; error: Error; delayMs: number; nextAttempt: number };
  /** The job reached the dead-letter state. */
  "job:dead": { job: JobRecord; error: Error; reason: "attempts-exhausted" | "unrecoverable" };
  "job:progress": { job: JobRecord; progress: Json };
  /** This worker lost the lease; the handler's signal was aborted and its result will be discarded. */
  "job:lease-lost": { job: JobRecord; reason: LeaseLossReason };
  /** The store refused a settle because the lease token was stale (a late acknowledgement). */
  "job:settle-refused": { job: JobRecord; operation: "complete" | "fail" | "release" | "progress" | "log" };
  /** Jobs handed back to `waiting` on shutdown, no attempt used. */
  "job:released": { jobIds: string[] };
  /** The rescuer found a job whose lease expired (its worker died or stalled). */
  "job:stalled-rescued": { rescued: RescuedJob };
  /** Something went wrong outside a handler (store unreachable, listener threw). Work continues. */
  "worker:error": { error: Error; during: string };
  /**
   * Leases this worker held passed their deadline (by its clock) before a renewal reached the
   * store: the jobs may run again elsewhere. `tickLateMs`: how late the heartbeat timer fired (the
   * event loop was blocked or starved of CPU); `renewalPendingMs`: how long the renewal still out
   * had waited for the store.
   */
  "worker:leases-lapsed": { jobIds: string[]; lapsedForMs: number; tickLateMs: number; renewalPendingMs: number };
  /** Shutdown began: no more claims. */
  "worker:shutdown": { reason: string; activeJobIds: string[]; graceMs: number };
  /** Shutdown finished. `drained` is false when jobs had to be released. */
  "worker:closed": { drained: boolean; releasedJobIds: string[] };
}

/** EventEmitter with the event map's types; a listener that throws is reported, never fatal. */
export class TypedEmitter<Events extends object> {
  private readonly emitter = new EventEmitter();

  constructor() {
    this.emitter.setMaxListeners(100);
  }

  on<K extends keyof Events & string>(event: K, listener: (payload: Events[K]) => void): this {
    this.emitter.on(event, listener);
    return this;
  }

  once<K extends keyof Events & string>(event: K, listener: (payload: Events[K]) => void): this {
    this.emitter.once(event, listener);
    return this;
  }

  off<K extends keyof Events & string>(event: K, listener: (payload: Events[K]) => void): this {
    this.emitter.off(event, listener);
    return this;
  }

  protected emit<K extends keyof Events & string>(event: K, payload: Events[K]): void {
    // listeners() copies the list (a listener may remove itself while it runs): not for none.
    if (this.emitter.listenerCount(event) === 0) return;
    for (const listener of this.emitter.listeners(event)) {
      try {
        (listener as (p: Events[K]) => void)(payload);
      } catch (error) {
        // A broken log or metrics listener must not take a job down with it.
        process.emitWarning(`conveyor: a listener for "${event}" threw: ${String(error)}`);
      }
    }
  }
}
