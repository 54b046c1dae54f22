import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { DEFAULT_EVENT_PRUNE_LIMIT, type EventPrunePolicy } from "../core/queue-events.js";
import { DEFAULT_MAX_STALLS, DEFAULT_PRUNE_LIMIT, type Backend, type PrunePolicy, type RescuedJob } from "../backend/contract.js";
import { MAX_TIMER_MS } from "../core/clock.js";

export interface MaintenanceSettings {
  /** How often to look for expired leases, ms. Default 5 000. */
  rescueIntervalMs?: number;
  /** Lease expiries in a row before a job is quarantined in `dead`. Default 3. */
  maxStalls?: number;
  /** How often to prune finished jobs and expired idempotency keys, ms. Default 60 000. */
  pruneIntervalMs?: number;
  /** Count limits for finished jobs per queue. */
  retention?: PrunePolicy;
  /**
   * Retention of the job event log (stores with `capabilities.eventLog`), pruned with the jobs:
   * `{ maxAgeMs: 86400000 (24 h), maxEvents: 100000, limit: 10000 }` by default.
   */
  eventRetention?: EventPrunePolicy;
  onRescued?: (job: RescuedJob) => void;
  onError?: (error: unknown, during: string) => void;
}

/**
 * The small timers that keep a store healthy: the rescuer (expired leases back to waiting, or
 * quarantined), the promoter (due scheduled jobs relabelled waiting) and the pruner (retention).
 * Every backend call is atomic and idempotent, so any number of processes may run these at once;
 * intervals are jittered so a fleet does not fire together.
 */
export class Maintenance {
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private busy = new Set<Promise<unknown>>();
  private stopped = true;
  /** Set by stop(): a prune loop in progress ends after its current call. */
  private stopRequested = false;

  constructor(
    private readonly backend: Backend,
    private readonly settings: MaintenanceSettings = {},
  ) {}

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.stopRequested = false;
    this.every(this.settings.rescueIntervalMs ?? 5_000, () => this.rescueOnce(), "rescuing expired leases");
    this.every(this.settings.pruneIntervalMs ?? 60_000, () => this.pruneOnce(), "pruning finished jobs");
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.stopRequested = true;
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
    await Promise.allSettled([...this.busy]);
  }

  /** One rescue pass (and a promotion pass); returns the rescued jobs. */
  async rescueOnce(): Promise<RescuedJob[]> {
    const rescued = await this.backend.rescueExpired({ maxStalls: this.settings.maxStalls ?? DEFAULT_MAX_STALLS });
    for (const job of rescued) this.settings.onRescued?.(job);
    await this.backend.promoteDue();
    return rescued;
  }

  /**
   * Prunes until the backlog is gone: one call deletes at most `retention.limit` rows (one short
   * transaction), so a busy queue that finishes more jobs per interval than that gets several
   * calls, not one, or its table would grow without bound.
   */
  async pruneOnce(): Promise<void> {
    const limit = this.settings.retention?.limit ?? DEFAULT_PRUNE_LIMIT;
    for (;;) {
      const { jobs, idempotencyKeys } = await this.backend.prune(this.settings.retention);
      if ((jobs < limit && idempotencyKeys < limit) || this.stopRequested) break;
      // SQLite prunes synchronously: let timers (heartbeats, settles) run between batches, or a
      // large backlog would hold the event loop past the leases.
      await yieldToEventLoop();
    }
    await this.pruneEventsOnce();
  }

  /** The event log's retention, in batches like the jobs'. */
  private async pruneEventsOnce(): Promise<void> {
    const pruneEvents = this.backend.pruneEvents?.bind(this.backend);
    if (this.backend.capabilities.eventLog !== true || !pruneEvents) return;
    const limit = this.settings.eventRetention?.limit ?? DEFAULT_EVENT_PRUNE_LIMIT;
    while (!this.stopRequested && (await pruneEvents(this.settings.eventRetention)) >= limit) await yieldToEventLoop();
  }

  private every(intervalMs: number, task: () => Promise<unknown>, during: string): void {
    const tick = () => {
      if (this.stopped) return;
      const run = task()
        .catch((error: unknown) => this.settings.onError?.(error, during))
        .finally(() => {
          this.busy.delete(run);
          if (!this.stopped) schedule();
        });
      this.busy.add(run);
    };
    const schedule = () => {
      // Jitter may take a long interval past Node's longest timer, which would fire at once.
      const timer = setTimeout(tick, Math.min(MAX_TIMER_MS, Math.round(intervalMs * (0.8 + 0.4 * Math.random()))));
      // Maintenance alone never keeps a process alive.
      timer.unref();
      this.timers.set(during, timer);
    };
    schedule();
  }
}
