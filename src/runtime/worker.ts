import { hostname } from "node:os";
import type { EventPrunePolicy } from "../core/queue-events.js";
import type { Backend, ClaimedJob, ClaimRequest, CompletionTransaction, PrunePolicy, SettleResult } from "../backend/contract.js";
import type { BoundHandler, Handler, Job, JobContext } from "../core/define.js";
import { validatePayload } from "../core/define.js";
import { InvalidInputError, JobTimeoutError, LeaseLostError, RetryLater, ShutdownError, UnrecoverableError, type LeaseLossReason } from "../core/errors.js";
import { TypedEmitter, type WorkerEvents } from "../core/events.js";
import type { JobTelemetry } from "../core/telemetry.js";
import { newWorkerId } from "../core/ids.js";
import type { JobRecord, WorkerIdentity } from "../core/job.js";
import { consoleLogger, type Logger } from "../core/logger.js";
import { decideRetryAfter } from "../core/retry.js";
import { checkOptionKeys, intInRange, MAX_COUNT, nonNegativeInt, positiveInt, shown, timerMs, toError } from "../core/checks.js";
import { errorInfo } from "../core/error-info.js";
import { MAX_JSON_DEPTH, nestedDeeperThan, type Json } from "../core/json.js";
import { checkName } from "../core/spec.js";
import { MAX_HOLD_MS } from "../core/flow.js";
import { QueueThrottle } from "./throttle.js";
import { Maintenance } from "../maintenance/maintenance.js";
import { Scheduler, type SchedulerOptions } from "../maintenance/scheduler.js";
import { failpoint } from "./failpoints.js";
import { SandboxPool, type SandboxOptions } from "./sandbox.js";
import { startWatchdog } from "./watchdog.js";
import { Settler, type ClaimRide } from "./settler.js";
import { LeaseKeeper, type Hold, type LeaseLapse } from "./lease-keeper.js";
import { ModeMachine, type WorkerMode } from "./worker-mode.js";
import { monotonicClock, sleepOn, type ClockTimer, type TimerClock } from "../core/clock.js";
import { DEFAULT_SHUTDOWN_GRACE_MS, installShutdownSignals, shutdownDeadlineMs } from "./shutdown.js";
import { isStoreTooNew } from "../backend/migration-files.js";

/** Handlers by job name, or handlers bound to definitions (`def.handle(fn)`). */
export type Handlers = Record<string, Handler | BoundHandler<unknown>> | ReadonlyArray<BoundHandler<unknown>>;

export interface WorkerOptions {
  /** Where jobs are stored. */
  backend: Backend;
  /** Queue name or names to take jobs from. */
  queues: string | readonly string[];
  /**
   * Job handlers. A worker claims only jobs whose name it has a handler for: a job nobody handles
   * stays `waiting` (never lost, never dropped) until a worker that knows it comes along, and shows
   * up as a growing oldest-waiting age. That keeps rolling deploys safe when producers are newer
   * than workers. Leave out when `sandbox` is given: the sandbox module provides the handlers.
   */
  handlers?: Handlers;
  /**
   * Run handlers in child processes instead of this one (one job per process at a time, up to
   * `concurrency` processes). A handler that blocks its event loop or calls process.exit then
   * only loses its own process, which is killed at the job's timeout and replaced. Costs a
   * process per slot and an IPC round trip per job. Default: handlers run in this process.
   */
  sandbox?: SandboxOptions;
  /**
   * Kill this process when its event loop stays blocked longer than `stallMs` ms (a handler stuck
   * in synchronous code), so an orchestrator restarts it; its jobs are rescued after their leases.
   * A loop that stood still while the process used less than half that on the CPU (a process the
   * machine starved, or a synchronous wait) gets 10 × `stallMs` (see runtime/watchdog.ts).
   * `stallMs` from 200 (two stamps of the watched loop) to 2 147 483 647. Default: off (the CLI
   * turns it on with stallMs = leaseMs).
   */
  watchdog?: { stallMs: number };
  /**
   * Jobs run at once by this worker. Default 10. A job whose handler has returned frees its slot
   * while the store records the outcome; while more than 4 × (concurrency + prefetch) such jobs
   * wait for the store, the worker claims nothing, so it holds at most 5 × (concurrency + prefetch)
   * jobs in all.
   */
  concurrency?: number;
  /**
   * The largest result a handler may return, in bytes of JSON (UTF-8). A larger one fails the job
   * at once (UnrecoverableError, dead, the size in its error): store large output elsewhere (a
   * blob store, a table) and return where it is. Results are kept with the job and read whole by
   * listings, the dashboard and `GET /v1/jobs/{id}`. Not applied on a store that keeps no job
   * records (RabbitMQ, Kafka), which drops results. Default 1 048 576 (1 MiB); at most
   * 9 007 199 254 740 991 (no bound in practice).
   */
  maxResultBytes?: number;
  /**
   * Jobs claimed ahead of free slots and held in a local buffer, so a slot that frees up starts
   * its next job at once instead of after a round trip to the store, and claims fetch many jobs
   * per call. Buffered jobs are `active` in the store under this worker's lease (heartbeated like
   * running ones, released unstarted on shutdown); if this process dies they run again only after
   * their lease expires, and other workers cannot take them meanwhile. The store is told which
   * claimed jobs wait in the buffer and when they start (one batched call at a time), so a
   * death of this process does not count toward a buffered job's quarantine (`maxStalls`).
   * Worth it for many short
   * jobs (the PostgreSQL benchmark uses 500); leave at 0 for long jobs or small fleets where
   * spreading work evenly matters more. Default 0 (claim only what can start now).
   */
  prefetch?: number;
  /**
   * Lease length in milliseconds; a worker silent for this long loses its jobs. Default 30 000. The
   * timers of this option and the three below take at most 2 147 483 647 ms (about 24.8 days, the
   * longest timer Node.js runs; a longer one would fire every millisecond).
   */
  leaseMs?: number;
  /** Heartbeat period in milliseconds (all leases in one call). Default leaseMs / 3. */
  heartbeatIntervalMs?: number;
  /**
   * Poll period in milliseconds when idle. Wake-ups from the store usually start jobs sooner;
   * polling is the fallback when one is missed. Default 1000.
   */
  pollIntervalMs?: number;
  /** On close or SIGTERM, how long in-flight jobs may run before they are aborted and released, ms. Default 25 000. */
  shutdownGraceMs?: number;
  /**
   * Run the rescuer (expired leases), promoter and pruner in this process. Safe in every process at
   * once. Default true.
   */
  maintenance?: boolean | MaintenanceOptions;
  /**
   * Fire due cron schedules (`queue.schedule`) from this process: of every queue, not only the
   * ones this worker takes jobs from, unless `scheduler.queues` says otherwise. Safe in every
   * process at once (each tick is fired exactly once, by one compare-and-set in the store); turn
   * it off where another process (e.g. `conveyor serve`) runs it. Default true.
   */
  scheduler?: boolean | SchedulerOptions;
  /** Install SIGTERM/SIGINT handlers that close the worker and exit (0 drained, 1 released). Default false. */
  handleSignals?: boolean;
  /** This worker's id in leases and attempt history. Default `host:pid:random`. */
  workerId?: string;
  /** Where warnings and errors go. Default JSON lines on stderr, warnings and errors only. */
  logger?: Logger;
  /** Start claiming at once. Default true; with false call `run()`. */
  autostart?: boolean;
  /** Random source for backoff jitter, in [0, 1). Default Math.random. */
  random?: () => number;
  /** Tracing around each handler run (see `conveyor-jobs/metrics`). Default none. */
  telemetry?: JobTelemetry;
  /**
   * The clock the worker's lease deadlines, heartbeats, job timeouts, polling and shutdown grace
   * period run on. Default: monotonic time (`performance.now()`) with Node's timers. Inject a
   * `FakeClock` (`conveyor-jobs/testing`), usually the store's own, to drive them in tests.
   */
  clock?: TimerClock;
}

export interface MaintenanceOptions {
  /** How often to look for expired leases, ms. Default 5 000. */
  rescueIntervalMs?: number;
  /**
   * Lease expiries in a row before a job is quarantined in `dead`. Default 3. Only expiries of a
   * job that had started (not one held in a prefetch buffer) and was its worker's only started
   * job count (see `RescueOptions.maxStalls`).
   */
  maxStalls?: number;
  /** How often to prune finished jobs, ms. Default 60 000. */
  pruneIntervalMs?: number;
  /** Count limits for finished jobs per queue (ages are per job). */
  retention?: PrunePolicy;
  /**
   * Retention of the job event log (docs/events.md), pruned with the jobs. Default
   * `{ maxAgeMs: 86400000 (24 h), maxEvents: 100000, limit: 10000 }`.
   */
  eventRetention?: EventPrunePolicy;
}

/** The default of WorkerOptions.maxResultBytes: 1 MiB of JSON. */
export const DEFAULT_MAX_RESULT_BYTES = 1024 * 1024;

const WORKER_OPTION_KEYS: Record<keyof WorkerOptions, true> = {
  backend: true,
  queues: true,
  handlers: true,
  sandbox: true,
  watchdog: true,
  concurrency: true,
  maxResultBytes: true,
  prefetch: true,
  leaseMs: true,
  heartbeatIntervalMs: true,
  pollIntervalMs: true,
  shutdownGraceMs: true,
  maintenance: true,
  scheduler: true,
  handleSignals: true,
  workerId: true,
  logger: true,
  autostart: true,
  random: true,
  telemetry: true,
  clock: true,
};
const SANDBOX_OPTION_KEYS: Record<keyof SandboxOptions, true> = { module: true, abortGraceMs: true, processes: true };
const MAINTENANCE_OPTION_KEYS: Record<keyof MaintenanceOptions, true> = {
  rescueIntervalMs: true,
  maxStalls: true,
  pruneIntervalMs: true,
  retention: true,
  eventRetention: true,
};

/** Maintenance options as a worker takes them: its timers' periods, the quarantine's count. */
function checkMaintenanceOptions(m: MaintenanceOptions): void {
  checkOptionKeys("maintenance option", m, MAINTENANCE_OPTION_KEYS);
  if (m.rescueIntervalMs !== undefined) timerMs("maintenance option rescueIntervalMs", m.rescueIntervalMs);
  if (m.pruneIntervalMs !== undefined) timerMs("maintenance option pruneIntervalMs", m.pruneIntervalMs);
  if (m.maxStalls !== undefined) intInRange("maintenance option maxStalls", m.maxStalls, 1, MAX_COUNT);
}

/** Longest workerId: room for a fully qualified host name (253) with a process id and a tag. */
const WORKER_ID_MAX_LENGTH = 512;

/** The least watchdog stallMs: two stamps of the watched loop. */
export const MIN_WATCHDOG_STALL_MS = 200;

/** A worker id as leases and attempt histories show it: 1-512 characters, no control character (C0, DEL or C1). */
function checkWorkerId(value: unknown): string {
  if (typeof value !== "string" || value.length === 0 || value.length > WORKER_ID_MAX_LENGTH || /[\u0000-\u001f\u007f-\u009f]/.test(value)) {
    throw new InvalidInputError(`option workerId must be 1-${WORKER_ID_MAX_LENGTH} characters without control characters; got ${shown(value)}`);
  }
  return value;
}

export interface CloseOptions {
  /** Overrides `shutdownGraceMs` for this close, ms. */
  graceMs?: number;
  /** Abort and release in-flight jobs now instead of waiting. */
  force?: boolean;
  /** Why, for the log and the shutdown event. Default "close()". */
  reason?: string;
}

export interface CloseResult {
  /** True when every in-flight job finished within the grace period. */
  drained: boolean;
  /** Jobs handed back to `waiting` (no attempt used) because they did not finish in time. */
  releasedJobIds: string[];
}

interface Running {
  claimed: ClaimedJob;
  /** The claim and its lease deadline (kept by the LeaseKeeper). */
  hold: Hold;
  job: Job<unknown>;
  handler: BoundHandler<unknown>;
  /**
   * Aborts the handler's signal; dropped (null) once the outcome is decided, when nothing aborts
   * the run any more, so it is not kept while the store acknowledges the outcome.
   */
  controller: AbortController | null;
  /** Set once an outcome was decided; later outcomes (a late handler result) are ignored. */
  done: boolean;
  /** Counts against `concurrency` until the handler's outcome is decided (not until it is acknowledged). */
  slotHeld: boolean;
  /** By the worker's clock. */
  startedAt: number;
  timer: ClockTimer | null;
  /** Opened when the handler asks for `ctx.tx()`; the completion commits inside it. */
  completionTx: Promise<CompletionTransaction> | null;
  /** Made only when something waits for the run to end (pause, close: `whenSettled`), not per job. */
  settled: Promise<void> | null;
  resolveSettled: (() => void) | null;
  /** ctx.log lines not yet handed to the store, and the write that will take them. */
  logLines: string[];
  logWrite: Promise<void> | null;
  /** The last log write started (NO_LOG_WRITTEN until one is): the outcome is stored after it. */
  logWritten: Promise<void>;
}

/** A run's `logWritten` before any log line: nothing to wait for, and no promise made per job. */
const NO_LOG_WRITTEN: Promise<void> = Promise.resolve();

/**
 * Runs handlers for jobs claimed from a backend: claim -> run -> settle.
 *
 * Claims in batches up to its free slots, heartbeats every lease in one call, aborts a handler's
 * signal when its lease is lost, it times out, or the worker shuts down, and settles results in
 * batches. At-least-once: a job whose worker dies runs again after its lease expires.
 */
export class Worker extends TypedEmitter<WorkerEvents> {
  readonly id: string;
  readonly identity: WorkerIdentity;
  private readonly backend: Backend;
  private readonly queues: string[];
  private readonly handlers = new Map<string, BoundHandler<unknown>>();
  /** Jobs run at once (the `concurrency` option). */
  readonly concurrency: number;
  private readonly maxResultBytes: number;
  private readonly leaseMs: number;
  private readonly heartbeatIntervalMs: number;
  private readonly pollIntervalMs: number;
  /** How long close() lets in-flight jobs run before it aborts and releases them, ms. */
  readonly shutdownGraceMs: number;
  private readonly logger: Logger;
  private readonly random: () => number;
  private readonly telemetry: JobTelemetry | null;
  private readonly settler: Settler;
  private readonly clock: TimerClock;
  /** Every lease this worker holds: the prefetch buffer, heartbeats, deadlines. */
  private readonly leases: LeaseKeeper;
  /** created → starting → waiting ⇄ polling → draining → stopped, with paused beside (see WorkerMode). */
  private readonly modes = new ModeMachine();
  /** Where `resume()` returns to. */
  private resumeTo: WorkerMode = "created";
  private readonly maintenance: Maintenance | null;
  private readonly scheduler: Scheduler | null;
  private readonly running = new Map<string, Running>();
  private readonly prefetch: number;
  /** Guards startBuffered against re-entry from a handler that settles synchronously. */
  private startingBuffered = false;
  /** Jobs whose handler is still running: what `concurrency` limits. Settling jobs do not count. */
  private busySlots = 0;
  private readonly sandbox: SandboxPool | null;
  private readonly watchdogOptions: { stallMs: number } | null;
  private stopWatchdog: (() => Promise<void>) | null = null;

  /** The claim round in flight (fill or a ride): pause and shutdown await it, so jobs it brings are released. */
  private claimRound: Promise<void> | null = null;
  /** Something asked for a claim while a round was in flight: the round claims once more. */
  private claimAgain = false;
  /** A claim left to the settler, to go out with the completions waiting there (see `claimRide`). */
  private claimWanted = false;
  private fillScheduled = false;
  private pollTimer: ClockTimer | null = null;
  /** Queues whose flow control lets nothing start before a known time (see QueueThrottle). */
  private readonly throttle = new QueueThrottle();
  /**
   * Queues whose last claim found jobs held back by running ones (a group's or a name's
   * concurrency): this worker claims again as soon as one of its own jobs of such a queue is
   * settled, instead of at its next poll (the store wakes nobody when a job finishes). With ten
   * groups of concurrency 100 the worker's own jobs filled every slot, a claim found none free,
   * and it sat out whole poll intervals (docs/flow-control.md, "Session 34").
   */
  private readonly waitingOnRunning = new Set<string>();
  private throttleTimer: ClockTimer | null = null;
  private unsubscribe: (() => void) | null = null;
  private closing: Promise<CloseResult> | null = null;
  private forceNow: (() => void) | null = null;
  private forceRequested = false;
  private removeSignalHandlers: (() => void) | null = null;

  constructor(options: WorkerOptions) {
    super();
    if (!options?.backend) throw new InvalidInputError("new Worker() needs { backend, queues, handlers }");
    checkOptionKeys("new Worker() option", options, WORKER_OPTION_KEYS);
    this.backend = options.backend;
    if (typeof options.queues !== "string" && !Array.isArray(options.queues)) {
      throw new InvalidInputError(`new Worker() option queues must be a queue name or an array of them; got ${shown(options.queues)}`);
    }
    const queues: readonly string[] = typeof options.queues === "string" ? [options.queues] : options.queues;
    if (queues.length === 0) throw new InvalidInputError("new Worker() needs at least one queue name in { queues }");
    this.queues = queues.map((q) => checkName("queue", q));
    this.concurrency = positiveInt("option concurrency", options.concurrency ?? 10);
    this.maxResultBytes = positiveInt("option maxResultBytes", options.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES);
    const sandbox = checkOptionKeys("sandbox option", options.sandbox, SANDBOX_OPTION_KEYS);
    if (sandbox !== undefined && (typeof sandbox.module !== "string" || sandbox.module === "")) {
      throw new InvalidInputError(`sandbox option module must be the path of the handlers module; got ${shown(sandbox.module)}`);
    }
    // Every slot's process started with the worker, plus a spare for one killed mid-job (a pill).
    this.sandbox = sandbox ? new SandboxPool({ processes: this.concurrency + 1, ...sandbox }) : null;
    if (options.handlers !== undefined) this.registerHandlers(options.handlers);
    else if (!this.sandbox) throw new InvalidInputError("new Worker() needs { handlers } (or { sandbox: { module } })");
    const watchdog = checkOptionKeys("watchdog option", options.watchdog, { stallMs: true });
    // Below two stamps of the watched loop (runtime/watchdog.ts, every 100 ms) a healthy process would be killed.
    this.watchdogOptions = watchdog === undefined ? null : { stallMs: timerMs("watchdog option stallMs", watchdog.stallMs, MIN_WATCHDOG_STALL_MS) };
    this.prefetch = nonNegativeInt("option prefetch", options.prefetch ?? 0);
    this.leaseMs = timerMs("option leaseMs", options.leaseMs ?? 30_000);
    this.heartbeatIntervalMs = timerMs("option heartbeatIntervalMs", options.heartbeatIntervalMs ?? Math.max(1, Math.floor(this.leaseMs / 3)));
    if (this.heartbeatIntervalMs >= this.leaseMs) {
      throw new InvalidInputError(
        `heartbeatIntervalMs (${this.heartbeatIntervalMs}) must be shorter than leaseMs (${this.leaseMs}); leave it unset for leaseMs / 3`,
      );
    }
    this.pollIntervalMs = timerMs("option pollIntervalMs", options.pollIntervalMs ?? 1_000);
    this.shutdownGraceMs = timerMs("option shutdownGraceMs", options.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_MS, 0);
    this.logger = options.logger ?? consoleLogger();
    if (options.random !== undefined && typeof options.random !== "function") {
      throw new InvalidInputError(`option random must be a function returning a number in [0, 1); got ${shown(options.random)}`);
    }
    this.random = options.random ?? Math.random;
    this.telemetry = options.telemetry?.attempt ? options.telemetry : null;
    this.id = options.workerId === undefined ? newWorkerId() : checkWorkerId(options.workerId);
    this.identity = { id: this.id, host: hostname(), pid: process.pid };
    this.settler = new Settler(this.backend, () => this.claimRide());
    this.clock = options.clock ?? monotonicClock;
    this.leases = new LeaseKeeper({
      backend: this.backend,
      clock: this.clock,
      leaseMs: this.leaseMs,
      heartbeatIntervalMs: this.heartbeatIntervalMs,
      onRunningLost: (hold, reason) => this.runningLost(hold, reason),
      onBufferedLost: (hold, reason) => this.reportBufferedLoss(hold, reason),
      release: (lease) => this.settler.release(lease),
      onReleased: (jobIds, why) => this.reportReleased(jobIds, why),
      onError: (error, during) => this.reportError(error, during),
      concurrency: this.concurrency,
      onLapsed: (lapse) => this.reportLapse(lapse),
    });
    const m = options.maintenance ?? true;
    if (typeof m !== "boolean") checkMaintenanceOptions(m);
    this.maintenance =
      m === false
        ? null
        : new Maintenance(this.backend, {
            ...(m === true ? {} : m),
            onRescued: (rescued) => this.emit("job:stalled-rescued", { rescued }),
            onError: (error, during) => this.reportError(error, during),
          });
    // A store that keeps no schedules (capabilities.schedules false) gets no scheduler loop.
    const sched = this.backend.capabilities.schedules ? (options.scheduler ?? true) : false;
    if (sched !== true && sched !== false && (typeof sched !== "object" || sched === null)) {
      throw new InvalidInputError(`option scheduler must be true, false or { refreshMs, queues, retryMs }; got ${shown(sched)}`);
    }
    this.scheduler =
      sched === false ? null : new Scheduler(this.backend, sched === true ? {} : sched, { onError: (error, during) => this.reportError(error, during) });
    if (options.handleSignals)
      this.removeSignalHandlers = installShutdownSignals([this], { logger: this.logger, deadlineMs: shutdownDeadlineMs(this.shutdownGraceMs) });
    if (options.autostart ?? true) this.run();
  }

  private registerHandlers(handlers: Handlers): void {
    if (!handlers || typeof handlers !== "object") {
      throw new InvalidInputError("new Worker() needs { handlers }: an object of job name -> async (job, ctx) => result, or [definition.handle(fn)]");
    }
    const entries: BoundHandler<unknown>[] = Array.isArray(handlers)
      ? (handlers as ReadonlyArray<BoundHandler<unknown>>).slice()
      : Object.entries(handlers as Record<string, Handler | BoundHandler>).map(([name, h]) =>
          typeof h === "function" ? { name, schema: null, run: h } : { ...h, name },
        );
    for (const h of entries) {
      checkName("job", h.name);
      if (typeof h.run !== "function") throw new InvalidInputError(`handler for job "${h.name}" must be a function`);
      if (this.handlers.has(h.name)) throw new InvalidInputError(`two handlers for job "${h.name}"; keep one`);
      this.handlers.set(h.name, h);
    }
  }

  /** Job names this worker runs. */
  get jobNames(): string[] {
    return [...this.handlers.keys()];
  }

  /** Jobs currently held (running or settling). */
  get activeCount(): number {
    return this.running.size;
  }

  /** Slots whose handler is still running (at most `concurrency`); jobs being acknowledged do not count. */
  get busySlotCount(): number {
    return this.busySlots;
  }

  /** Jobs claimed ahead and waiting in this worker for a free slot (see `prefetch`). */
  get bufferedCount(): number {
    return this.leases.bufferedCount;
  }

  /**
   * What the worker is doing: `created` (not run yet), `starting` (its sandbox is loading),
   * `waiting` (for work), `polling` (a claim is in flight), `paused`, `draining` (closing),
   * `stopped`. See WorkerMode.
   */
  get mode(): WorkerMode {
    return this.modes.current;
  }

  /**
   * Stops this worker taking jobs, without shutting it down: no more claims, and jobs claimed ahead
   * (`prefetch`) go back to the store unstarted, so other workers can run them. Jobs already
   * running finish normally, their leases renewed; the promise resolves once they have settled.
   * `resume()` starts claiming again. To stop every worker of a queue, use `queue.pause()`.
   */
  async pause(): Promise<void> {
    if (this.modes.closing) return;
    if (!this.modes.is("paused")) {
      this.resumeTo = this.modes.is("polling") ? "waiting" : this.modes.current;
      this.modes.to("paused");
    }
    // A claim already on its way lands in the buffer; wait for it so it is released below.
    await this.claimRound;
    await this.leases.releaseBuffered("paused");
    await Promise.all([...this.running.values()].map((r) => this.whenSettled(r)));
  }

  /** Takes jobs again after `pause()` (once `run()` has started the worker, with `autostart: false`). */
  resume(): void {
    if (!this.modes.is("paused")) return;
    // Before run() there are no heartbeats, subscription or poll yet: claiming then would hold
    // jobs whose leases nothing renews. run() starts claiming itself.
    this.modes.to(this.resumeTo);
    this.scheduleFill();
  }

  /** True between `pause()` and `resume()`. */
  get isPaused(): boolean {
    return this.modes.is("paused");
  }

  /** Starts claiming (only needed with `autostart: false`). */
  run(): void {
    const paused = this.modes.is("paused");
    if (!this.modes.is("created") && !(paused && this.resumeTo === "created")) return;
    // Until a sandbox says which job names it handles, nothing can be claimed.
    const next: WorkerMode = this.sandbox ? "starting" : "waiting";
    if (paused) this.resumeTo = next;
    else this.modes.to(next);
    this.unsubscribe = this.backend.subscribe((queue) => {
      if (queue === "*" || this.queues.includes(queue)) this.scheduleFill();
    });
    this.leases.start();
    this.maintenance?.start();
    this.scheduler?.start();
    if (this.watchdogOptions) this.stopWatchdog = startWatchdog(this.watchdogOptions);
    this.schedulePoll();
    if (this.sandbox) {
      const pool = this.sandbox;
      pool.names.then(
        (names) => {
          for (const name of names) {
            if (!this.handlers.has(name)) this.handlers.set(name, { name, schema: null, run: (job, ctx) => pool.run(job as JobRecord, ctx) });
          }
          if (this.modes.is("starting")) this.modes.to("waiting");
          else if (this.modes.is("paused") && this.resumeTo === "starting") this.resumeTo = "waiting";
          this.scheduleFill();
        },
        (error: unknown) => this.reportError(error, "loading the sandbox handlers module; this worker will claim nothing"),
      );
    }
    this.scheduleFill();
  }

  // ---------------------------------------------------------------- claiming

  private scheduleFill(): void {
    if (this.fillScheduled || this.modes.closing) return;
    this.fillScheduled = true;
    // Coalesce: a burst of wake-ups and finished jobs in one tick becomes one claim.
    setImmediate(() => {
      this.fillScheduled = false;
      void this.fill();
    });
  }

  private schedulePoll(): void {
    if (this.modes.closing) return;
    this.pollTimer?.cancel();
    // A little jitter so a fleet started together does not poll in lock-step.
    const delay = Math.round(this.pollIntervalMs * (0.9 + 0.2 * Math.random()));
    this.pollTimer = this.clock.after(delay, () => {
      this.pollTimer = null;
      this.scheduleFill();
      this.schedulePoll();
    });
  }

  /** Claims again when the first throttled queue's next slot opens. */
  private armThrottleTimer(): void {
    const inMs = this.throttle.nextOpenInMs(this.clock.now());
    this.throttleTimer?.cancel();
    this.throttleTimer = null;
    if (inMs === null || this.modes.closing) return;
    this.throttleTimer = this.clock.after(Math.ceil(inMs), () => {
      this.throttleTimer = null;
      this.scheduleFill();
    });
  }

  /**
   * Room for claimed jobs: free slots plus free buffer places, or none while more than
   * `settlingBound` finished jobs wait for the store's acknowledgement. A slot frees as its
   * handler returns, so claiming overlaps settling; but a store slower to settle than to claim
   * would otherwise have this worker claim, run and heartbeat ever more jobs whose outcome it has
   * not stored (a PostgreSQL completion made slow by a bad plan left 13,880 of them waiting:
   * docs/performance-postgres.md, "Session 34"), each to be run again if the process died. None
   * rather than less: a room opened one acknowledgement at a time made claims of a job or two.
   */
  private get room(): number {
    if (this.settlingCount > this.settlingBound) return 0;
    return this.concurrency - this.busySlots + this.prefetch - this.leases.bufferedCount;
  }

  /** Jobs whose handler is done and whose outcome the store has not acknowledged yet: held, slot freed. */
  private get settlingCount(): number {
    return this.running.size - this.busySlots;
  }

  /**
   * Finished jobs that may wait for their acknowledgement before claims stop (see `room`): four
   * rounds of the slots and the buffer. A store keeping up was seen with up to three rounds waiting
   * (one batch of completions on its way, more gathering behind it while claims run ahead: 1,530
   * jobs at concurrency 10 with prefetch 500 on PostgreSQL), where a bound of two rounds held
   * claims back one to three times per drain of 20,000 jobs.
   */
  private get settlingBound(): number {
    return 4 * (this.concurrency + this.prefetch);
  }

  /** A claim round begins: `polling` while claims are allowed (a paused or closing worker stays so). */
  private beginRound(): () => void {
    let endRound!: () => void;
    const round = new Promise<void>((resolve) => (endRound = resolve));
    this.claimRound = round;
    if (this.modes.is("waiting")) this.modes.to("polling");
    return () => {
      if (this.claimRound === round) this.claimRound = null;
      if (this.modes.is("polling")) this.modes.to("waiting");
      endRound();
    };
  }

  private fill(): Promise<void> {
    if (this.claimRound) {
      this.claimAgain = true;
      return this.claimRound;
    }
    const end = this.beginRound();
    const round = this.claimRound!;
    void this.claimLoop(end);
    return round;
  }

  /** Claims until the slots and the buffer are full or the store has no more (one round of fill); then `end`. */
  private async claimLoop(end: () => void): Promise<void> {
    try {
      do {
        this.claimAgain = false;
        this.startBuffered();
        // What the slots and the buffer can take. With a buffer, wait until it has drained to
        // half before claiming again (unless slots are idle), so claims fetch many jobs each.
        const room = this.room;
        if (!this.modes.claiming || room <= 0) break;
        if (this.modes.is("waiting")) this.modes.to("polling");
        if (this.leases.bufferedCount > 0 && room < Math.ceil(this.prefetch / 2)) break;
        // Slots still have buffered work and completions are about to go out: let the claim ride
        // with them (one round trip and one commit for both, Backend.completeAndClaim). Not when
        // the buffer is empty: then slots wait for this claim, and sent on its own it overlaps the
        // completions on another connection instead of waiting its turn behind them (measured:
        // no-op jobs at concurrency 10 ran at less than half the rate when every claim rode;
        // docs/performance-postgres.md).
        if (this.leases.bufferedCount > 0 && this.settler.carriesClaims) {
          this.claimWanted = true;
          break;
        }
        // The store starts the lease before it answers: count our deadline from the request.
        const requestSentAt = this.clock.now();
        const request = this.claimRequest(room, requestSentAt);
        if (request === null) break;
        const claimed = await this.backend.claim(request);
        if (this.modes.closing) {
          // The claim raced with shutdown: hand the jobs straight back, unstarted.
          await this.backend.release(claimed.map((c) => c.lease)).catch((e: unknown) => this.reportError(e, "releasing jobs claimed during shutdown"));
          break;
        }
        this.deliverClaimed(claimed, requestSentAt);
        // A full batch means more may be waiting; an empty one means wait for a wake-up or poll.
        if (claimed.length === room) this.claimAgain = true;
      } while (this.claimAgain && !this.modes.closing);
    } catch (error) {
      this.reportError(error, "claiming jobs");
      // The store is unreachable: polling will try again; no tight loop.
    } finally {
      this.armThrottleTimer();
      end();
    }
  }

  /**
   * The claim for `room` jobs, made at `now`: queues rate-limited or held are left out until their
   * next slot opens (flow control), and the throttles the store reports are noted. Null when every
   * queue is waiting for its slot.
   */
  private claimRequest(room: number, now: number): ClaimRequest | null {
    const queues = this.throttle.open(this.queues, now);
    if (queues.length === 0) return null;
    const request: ClaimRequest = {
      queues,
      names: this.jobNames,
      worker: this.identity,
      limit: room,
      leaseMs: this.leaseMs,
      onThrottle: (t) => {
        if (t.retryInMs === null) this.waitingOnRunning.add(t.queue);
        this.throttle.note(t.queue, t.retryInMs, this.clock.now());
      },
    };
    // The free slots take the first jobs; the store may record the rest as buffered (LeaseKeeper).
    const startsAtOnce = this.leases.startsAtOnce(Math.min(room, this.concurrency - this.busySlots));
    return startsAtOnce === undefined ? request : { ...request, startsAtOnce };
  }

  /**
   * Asked by the settler as a batch of completions goes out: the claim to send with it, when this
   * worker left one to it (`claimWanted`) and no claim round is running. The ride is a claim
   * round like `claimLoop`'s (pause and shutdown await it), and delivers into the buffer as it does.
   */
  private claimRide(): ClaimRide | null {
    if (!this.claimWanted) return null;
    this.claimWanted = false;
    const room = this.room;
    if (this.claimRound || !this.modes.claiming || room <= 0) {
      // Not now: an ordinary claim round decides (one may be running; it then claims again).
      this.scheduleFill();
      return null;
    }
    const requestSentAt = this.clock.now();
    // Flow control as in claimLoop (a ride used to ignore it): what the claim meets arms the
    // wake-up timer once it is delivered or failed.
    const request = this.claimRequest(room, requestSentAt);
    if (request === null) {
      this.armThrottleTimer();
      return null;
    }
    const end = this.beginRound();
    return {
      request,
      deliver: (claimed) => {
        if (this.modes.closing) {
          // The claim raced with shutdown: hand the jobs straight back, unstarted, before the
          // round ends (shutdown awaits it).
          void this.backend
            .release(claimed.map((c) => c.lease))
            .catch((e: unknown) => this.reportError(e, "releasing jobs claimed during shutdown"))
            .finally(end);
          return;
        }
        end();
        this.deliverClaimed(claimed, requestSentAt);
        this.armThrottleTimer();
        // A full batch means more may be waiting; an empty one means wait for a wake-up or poll.
        if (claimed.length === room) this.scheduleFill();
      },
      failed: (error) => {
        end();
        this.armThrottleTimer();
        this.reportError(error, "claiming jobs");
      },
    };
  }

  /**
   * Puts newly claimed jobs in the buffer and starts what free slots can take; the store is told
   * which ones stay buffered (LeaseKeeper.noteBuffered).
   */
  private deliverClaimed(claimed: readonly ClaimedJob[], requestSentAt: number): void {
    if (claimed.length) failpoint("after-claim");
    const holds = this.leases.accept(claimed, requestSentAt);
    this.startBuffered();
    this.leases.noteBuffered(holds);
  }

  /**
   * Starts buffered jobs while slots are free, oldest claim first. A handler that fails at once
   * frees its slot from inside `start`; the nested call returns and this loop takes the slot, so
   * a run of such jobs never recurses.
   */
  private startBuffered(): void {
    if (!this.modes.claiming || this.startingBuffered) return;
    this.startingBuffered = true;
    try {
      while (this.busySlots < this.concurrency) {
        const hold = this.leases.next();
        if (!hold) break;
        this.start(hold);
      }
    } finally {
      this.startingBuffered = false;
    }
  }

  // ---------------------------------------------------------------- running

  private start(hold: Hold): void {
    const claimed = hold.claimed;
    const handler = this.handlers.get(claimed.job.name);
    const controller = new AbortController();
    const job = claimed.job as Job<unknown>;
    const r: Running = {
      claimed,
      job,
      handler: handler!,
      controller,
      done: false,
      slotHeld: true,
      startedAt: this.clock.now(),
      hold,
      timer: null,
      completionTx: null,
      settled: null,
      resolveSettled: null,
      logLines: [],
      logWrite: null,
      logWritten: NO_LOG_WRITTEN,
    };
    // The store leased this job to us again, under a newer token (tokens only grow): the lease an
    // earlier run of it here holds is gone (it expired and the job was rescued), and the renewal
    // whose answer would say so finds this run in its place. That earlier run stops now.
    const earlier = this.running.get(claimed.job.id);
    if (earlier !== undefined && earlier.claimed.lease.token < claimed.lease.token) this.loseLease(earlier, "expired");
    this.running.set(claimed.job.id, r);
    this.busySlots++;
    this.emit("job:started", { job: claimed.job, workerId: this.id, waitMs: Math.max(0, (claimed.job.startedAt ?? claimed.job.runAt) - claimed.job.runAt) });

    if (!handler) {
      // Cannot happen while claims filter by name; fail safe rather than drop the job.
      void this.finishFailure(r, new UnrecoverableError(`no handler for job "${claimed.job.name}" in worker ${this.id}`));
      return;
    }
    const timeoutMs = claimed.job.timeoutMs ?? handler.timeoutMs ?? null;
    if (timeoutMs !== null) {
      r.timer = this.clock.after(timeoutMs, () => {
        const error = new JobTimeoutError(timeoutMs);
        controller.abort(error);
        void this.finishFailure(r, error);
      });
    }
    const ctx: JobContext = {
      signal: controller.signal,
      progress: (value) => this.reportProgress(r, value),
      log: (line) => this.appendLog(r, line),
      once: (key, ttlMs = 24 * 60 * 60 * 1000) => this.backend.idempotency.once(key, ttlMs),
      tx: () => this.openCompletionTx(r),
      children: async () => (await this.backend.flow(claimed.job.id, claimed.job.queue))?.children ?? [],
    };
    void (async () => {
      let result: unknown;
      try {
        if (handler.schema) job.data = validatePayload(job.name, handler.schema, job.data);
        result = await (this.telemetry ? this.telemetry.attempt!(claimed.job, async () => handler.run(job, ctx)) : handler.run(job, ctx));
      } catch (error) {
        void this.finishFailure(r, toError(error));
        return;
      }
      // Not awaited: this frame holds ctx and its closures, which need not live until the store
      // has acknowledged the outcome (a round trip in which they would outlive a young collection).
      void this.finishSuccess(r, result);
    })();
  }

  private async openCompletionTx(r: Running): Promise<CompletionTransaction["client"]> {
    const begin = this.backend.beginCompletion?.bind(this.backend);
    if (!this.backend.capabilities.transactionalCompletion || !begin) {
      throw new InvalidInputError(`ctx.tx() needs a backend with transactional completion (PostgreSQL); ${this.backend.description} has none`);
    }
    if (r.done) throw new LeaseLostError(r.job.id, "gone");
    r.completionTx ??= begin(r.claimed.lease);
    return (await r.completionTx).client;
  }

  /** Rolls back a handler's transaction that will not complete the job. */
  private async abandonCompletionTx(r: Running): Promise<void> {
    const tx = r.completionTx;
    r.completionTx = null;
    if (!tx) return;
    try {
      await (await tx).rollback();
    } catch (error) {
      this.reportError(error, `rolling back the transaction of job ${r.job.id}`);
    }
  }

  private async reportProgress(r: Running, value: Json): Promise<void> {
    if (r.done) return;
    const outcome = await this.backend.progress(r.claimed.lease, value);
    if (outcome === "stale") this.emit("job:settle-refused", { job: r.job as JobRecord, operation: "progress" });
    else this.emit("job:progress", { job: r.job as JobRecord, progress: value });
  }

  /**
   * Buffers a ctx.log line; the lines of one tick go to the store in one fenced append, after the
   * previous append (so lines keep their order). Never rejects: a store error is reported as a
   * worker error, like a failed heartbeat, rather than failing the handler over a log line.
   */
  private appendLog(r: Running, line: string): Promise<void> {
    if (r.done) return Promise.resolve();
    r.logLines.push(String(line));
    if (r.logWrite === null) {
      const previous = r.logWritten;
      r.logWrite = (async () => {
        await previous;
        await Promise.resolve();
        const lines = r.logLines;
        r.logLines = [];
        r.logWrite = null;
        try {
          const outcome = await this.backend.appendLogs(r.claimed.lease, lines);
          if (outcome === "stale") this.emit("job:settle-refused", { job: r.job as JobRecord, operation: "log" });
        } catch (error) {
          this.reportError(error, `storing ${lines.length} log line(s) of job ${r.job.id}`);
        }
      })();
      r.logWritten = r.logWrite;
    }
    return r.logWrite;
  }

  private takeOutcome(r: Running): boolean {
    if (r.done) return false;
    r.done = true;
    r.timer?.cancel();
    // What only an undecided run needs goes now (see Running.controller).
    r.timer = null;
    r.controller = null;
    this.freeSlot(r);
    return true;
  }

  /**
   * The handler is done: its slot can take the next job while the acknowledgement is still on its
   * way, so claiming overlaps settling instead of waiting for it. The job stays in `running` (and
   * heartbeated) until the store has the outcome.
   */
  private freeSlot(r: Running): void {
    if (!r.slotHeld) return;
    r.slotHeld = false;
    this.busySlots--;
    // A buffered job takes the slot now; the refill (if the buffer ran low) comes after.
    this.startBuffered();
    this.scheduleFill();
  }

  private async finishSuccess(r: Running, value: unknown): Promise<void> {
    if (!this.takeOutcome(r)) return;
    const durationMs = this.clock.now() - r.startedAt;
    let result: Json = null;
    let resultBytes = 0;
    let refused: string | null = null;
    try {
      // null needs no round trip through JSON (it is its own text, 4 bytes) unless the bound is below it.
      if (value === null && this.maxResultBytes >= 4) resultBytes = 4;
      else if (value !== undefined) {
        const text = JSON.stringify(value);
        result = JSON.parse(text) as Json;
        // UTF-8 takes at most 3 bytes per UTF-16 code unit: most results are measured by length alone.
        resultBytes = text.length * 3 <= this.maxResultBytes ? text.length : Buffer.byteLength(text, "utf8");
        // The bounds protect the stores that keep results (a store without job records drops them).
        if (this.backend.capabilities.jobRecords) refused = this.refusedResult(text, result, resultBytes);
      }
    } catch (error) {
      refused = `the handler's result is not JSON: ${toError(error).message}`;
    }
    if (refused !== null) {
      // A result that cannot be stored is the handler's bug; record it rather than lose the job.
      r.done = false;
      await this.finishFailure(r, new UnrecoverableError(refused));
      return;
    }
    failpoint("after-handler");
    const tx = r.completionTx;
    const outcome = tx
      ? await this.commitCompletionTx(r, tx, result)
      : await this.settle(r, () => this.settler.complete({ lease: r.claimed.lease, result }, resultBytes));
    if (outcome !== "abandoned") failpoint("after-ack");
    if (outcome === "applied") this.emit("job:completed", { job: r.job as JobRecord, result, durationMs });
    else if (outcome === "stale") this.emit("job:settle-refused", { job: r.job as JobRecord, operation: "complete" });
    this.finished(r);
  }

  /** Why a store that keeps results cannot take this one (its JSON `text`), or null. */
  private refusedResult(text: string, result: Json, resultBytes: number): string | null {
    // SQLite's JSON functions refuse past 1,000 levels: its settle failed for as long as it was tried.
    // Nesting past the bound takes two brackets a level: a shorter text cannot (no walk, no allocation).
    if (text.length > 2 * MAX_JSON_DEPTH && nestedDeeperThan(result, MAX_JSON_DEPTH)) {
      return `the handler's result nests arrays or objects more than ${MAX_JSON_DEPTH} levels deep, as no payload may; return a flatter value`;
    }
    if (resultBytes > this.maxResultBytes) {
      return (
        `the handler's result is ${resultBytes} bytes of JSON, over maxResultBytes (${this.maxResultBytes}): store large output ` +
        `elsewhere (a blob store, a table) and return where it is, or raise maxResultBytes on the Worker`
      );
    }
    return null;
  }

  /** The handler's transaction carries the completion; if it fails we cannot retry it elsewhere. */
  private async commitCompletionTx(r: Running, tx: Promise<CompletionTransaction>, result: Json): Promise<SettleResult | "abandoned"> {
    if (r.logWritten !== NO_LOG_WRITTEN) await r.logWritten;
    try {
      return await (await tx).commit(result);
    } catch (error) {
      // Unknown whether it committed: the fenced completion either landed or the lease will expire
      // and the job run again, with the handler's writes rolled back together with it.
      this.reportError(error, `committing the transaction of job ${r.job.id}`);
      return "abandoned";
    }
  }

  private async finishFailure(r: Running, error: Error): Promise<void> {
    if (!this.takeOutcome(r)) return;
    await this.abandonCompletionTx(r);
    const durationMs = this.clock.now() - r.startedAt;
    const job = r.job as JobRecord;
    const decision = decideRetryAfter(error, {
      attempt: job.attempt,
      maxAttempts: job.maxAttempts,
      backoff: job.backoff,
      backoffFn: r.handler?.backoff,
      random: this.random,
    });
    const unrecoverable = decision.unrecoverable;
    const retryDelayMs = decision.kind === "retry" ? decision.delayMs : null;
    if (decision.kind === "retry" && decision.backoffError) this.reportError(decision.backoffError, `computing the backoff of job ${job.id} (retried at once)`);
    if (error instanceof RetryLater && error.pause !== undefined) await this.holdQueue(job, error.pause, error.delayMs);
    const outcome = await this.settle(r, () => this.settler.fail({ lease: r.claimed.lease, error: errorInfo(error), retryDelayMs }));
    if (outcome === "applied") {
      this.emit("job:failed", { job, error, durationMs, retryDelayMs });
      if (retryDelayMs === null) {
        this.emit("job:dead", { job, error, reason: unrecoverable ? "unrecoverable" : "attempts-exhausted" });
      } else {
        this.emit("job:retry-scheduled", { job, error, delayMs: retryDelayMs, nextAttempt: job.attempt + 1 });
      }
    } else if (outcome === "stale") {
      this.emit("job:settle-refused", { job, operation: "fail" });
    }
    this.finished(r);
  }

  /**
   * RetryLater with pause: no job of the queue (or of the job's limiter key) starts anywhere for
   * the delay (a 429 from downstream). Held before the job is failed, so its own retry cannot
   * start before the hold. A store error is reported, not retried: the job's own retry delay
   * still applies.
   */
  private async holdQueue(job: JobRecord, pause: "queue" | "key", delayMs: number): Promise<void> {
    if (delayMs < 1) return;
    try {
      const forMs = Math.min(delayMs, MAX_HOLD_MS);
      if (pause === "key") {
        await this.backend.holdQueue(job.queue, forMs, { keyOfJob: job.id });
      } else {
        await this.backend.holdQueue(job.queue, forMs);
        this.throttle.note(job.queue, delayMs, this.clock.now());
      }
    } catch (error) {
      this.reportError(error, `holding ${pause === "key" ? `the limiter key of job ${job.id}` : `queue ${job.queue}`} for ${delayMs} ms`);
    }
  }

  /**
   * Sends a settle to the store, retrying while the store is unreachable and the lease is still
   * ours: giving up early would make the job run again after its lease expires.
   */
  private async settle(r: Running, send: () => Promise<"applied" | "stale">): Promise<"applied" | "stale" | "abandoned"> {
    // The job's log lines first: once the outcome is stored, the fence refuses them.
    if (r.logWritten !== NO_LOG_WRITTEN) await r.logWritten;
    for (let attempt = 0; ; attempt++) {
      try {
        return await send();
      } catch (error) {
        this.reportError(error, `settling job ${r.job.id}`);
        // A store upgraded past this code refuses every retry too (the worker is stopping).
        if (isStoreTooNew(error) || !this.leases.isLive(r.hold) || !this.running.has(r.job.id)) return "abandoned";
        await sleepOn(this.clock, Math.min(5_000, 100 * 2 ** attempt) * (0.5 + Math.random() / 2));
      }
    }
  }

  /** The store has the outcome (or it was abandoned): stop heartbeating the job. Its slot was freed earlier. */
  private finished(r: Running): void {
    if (this.running.get(r.job.id) === r) {
      // Claims held back by acknowledgements behind (see `room`) go on as they come in, and so
      // do claims that found the queue's slots all held (see `waitingOnRunning`).
      if (this.settlingCount > this.settlingBound) this.scheduleFill();
      else if (this.waitingOnRunning.size > 0 && this.waitingOnRunning.delete(r.job.queue)) this.scheduleFill();
      this.running.delete(r.job.id);
    }
    this.leases.finish(r.hold);
    r.resolveSettled?.();
  }

  /** Resolves once the run has ended (`finished`, which takes it out of `running`). */
  private whenSettled(r: Running): Promise<void> {
    if (this.running.get(r.job.id) !== r) return Promise.resolve();
    return (r.settled ??= new Promise<void>((resolve) => (r.resolveSettled = resolve)));
  }

  /** The lease is gone: abort the handler and forget the job; the store will refuse its result. */
  private loseLease(r: Running, reason: LeaseLossReason): void {
    const controller = r.controller;
    if (!this.takeOutcome(r)) return;
    controller?.abort(new LeaseLostError(r.job.id, reason));
    void this.abandonCompletionTx(r);
    this.emit("job:lease-lost", { job: r.job as JobRecord, reason });
    this.logger.warn({ jobId: r.job.id, reason, workerId: this.id }, "lease lost; aborted the handler, its result will be discarded");
    this.finished(r);
  }

  // ---------------------------------------------------------------- leases

  /** The keeper reports a started job's lease gone. */
  private runningLost(hold: Hold, reason: LeaseLossReason): void {
    const r = this.running.get(hold.claimed.job.id);
    if (r && r.hold === hold) this.loseLease(r, reason);
  }

  /**
   * Leases this worker still held passed their deadline before a renewal reached the store: the
   * jobs may run again elsewhere (their late settles are fenced). Said out loud because the cause
   * is outside the store: a handler blocking the event loop, a starved process, a slow store.
   */
  private reportLapse(lapse: LeaseLapse): void {
    this.emit("worker:leases-lapsed", lapse);
    this.logger.warn(
      { workerId: this.id, ...lapse },
      "leases lapsed before a renewal reached the store (this process ran late, or the store answered late); these jobs may run again elsewhere: raise leaseMs if it recurs",
    );
  }

  private reportBufferedLoss(hold: Hold, reason: LeaseLossReason): void {
    this.emit("job:lease-lost", { job: hold.claimed.job, reason });
    this.logger.warn({ jobId: hold.claimed.job.id, reason, workerId: this.id }, "lease lost on a buffered job before it started; it was not run here");
  }

  private reportReleased(jobIds: string[], why: string): void {
    if (jobIds.length) this.emit("job:released", { jobIds });
    this.logger.info({ workerId: this.id, releasedJobIds: jobIds }, `${why}: released jobs claimed ahead that had not started`);
  }

  // ---------------------------------------------------------------- shutdown

  /**
   * Graceful shutdown: stop claiming at once, let in-flight jobs finish within the grace period,
   * then abort the rest and release them to `waiting` (no attempt used). Safe to call twice; a
   * second call with `force` cuts the grace period short.
   */
  close(options: CloseOptions = {}): Promise<CloseResult> {
    if (this.closing) {
      if (options.force) {
        // Remembered for a shutdown that has not reached its grace period yet.
        this.forceRequested = true;
        this.forceNow?.();
      }
      return this.closing;
    }
    this.closing = this.shutdown(options);
    return this.closing;
  }

  /** `await using worker = new Worker(…)`: a graceful `close()` when the scope ends. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private async shutdown(options: CloseOptions): Promise<CloseResult> {
    this.modes.to("draining");
    this.throttleTimer?.cancel();
    this.throttleTimer = null;
    const graceMs = options.graceMs ?? this.shutdownGraceMs;
    this.pollTimer?.cancel();
    this.pollTimer = null;
    this.unsubscribe?.();
    this.unsubscribe = null;
    await this.maintenance?.stop();
    await this.scheduler?.stop();
    const activeJobIds = [...this.running.keys()];
    this.emit("worker:shutdown", { reason: options.reason ?? "close()", activeJobIds, graceMs });
    if (activeJobIds.length > 0) {
      this.logger.info({ workerId: this.id, activeJobIds, graceMs }, "shutting down: no more claims, draining in-flight jobs");
    }
    // Wait for a claim that was already on its way so its jobs are counted (or released).
    await this.claimRound;
    // Jobs claimed ahead never started: hand them back now, so other workers run them while
    // this one drains.
    await this.leases.releaseBuffered("shutting down");

    if (!options.force && !this.forceRequested && this.running.size > 0) {
      let timer: ClockTimer | undefined;
      const forced = new Promise<void>((resolve) => {
        this.forceNow = resolve;
        timer = this.clock.after(graceMs, resolve);
      });
      await Promise.race([Promise.all([...this.running.values()].map((r) => this.whenSettled(r))), forced]);
      timer?.cancel();
    }

    const leftover = [...this.running.values()].filter((r) => !r.done);
    const releasedJobIds: string[] = [];
    if (leftover.length > 0) {
      for (const r of leftover) {
        r.done = true;
        this.freeSlot(r);
        r.timer?.cancel();
        r.controller?.abort(new ShutdownError());
        r.controller = null;
      }
      await Promise.all(leftover.map((r) => this.abandonCompletionTx(r)));
      const results = await Promise.all(
        leftover.map((r) =>
          this.settler.release(r.claimed.lease).catch((error: unknown) => {
            this.reportError(error, `releasing job ${r.job.id}`);
            return "failed" as const;
          }),
        ),
      );
      leftover.forEach((r, i) => {
        if (results[i] === "applied") releasedJobIds.push(r.job.id);
        this.finished(r);
      });
      if (releasedJobIds.length) this.emit("job:released", { jobIds: releasedJobIds });
      this.logger.warn(
        { workerId: this.id, releasedJobIds, unreleasedJobIds: leftover.map((r) => r.job.id).filter((id) => !releasedJobIds.includes(id)) },
        "shutdown grace period over: aborted and released unfinished jobs; they will run again elsewhere",
      );
    }
    // Jobs still settling (a completion on its way) get to finish: their outcome is decided.
    await Promise.all([...this.running.values()].map((r) => this.whenSettled(r)));
    await this.settler.drain();
    await this.leases.stop();
    this.sandbox?.close();
    await this.stopWatchdog?.();
    this.removeSignalHandlers?.();
    const result: CloseResult = { drained: leftover.length === 0, releasedJobIds };
    this.modes.to("stopped");
    this.emit("worker:closed", result);
    return result;
  }

  private reportError(error: unknown, during: string): void {
    const e = toError(error);
    this.logger.error({ workerId: this.id, during, err: errorInfo(e) }, `worker error while ${during}`);
    this.emit("worker:error", { error: e, during });
    if (isStoreTooNew(e)) this.stopForNewerStore(e);
  }

  /**
   * Another process upgraded the store past this code while this worker ran (a Redis layout, a
   * schema): going on could lose jobs this code cannot read, and every call is refused anyway. So
   * the worker stops (force: its jobs' leases lapse and a current worker runs them again).
   */
  private stopForNewerStore(error: Error): void {
    if (this.closing) return;
    this.logger.error(
      { workerId: this.id, err: errorInfo(error) },
      "the store was upgraded by a newer Conveyor: stopping this worker; upgrade conveyor in this process and start it again",
    );
    void this.close({ force: true, reason: `the store was upgraded past this Conveyor: ${error.message}` });
  }
}
