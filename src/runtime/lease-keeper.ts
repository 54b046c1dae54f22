import type { Backend, ClaimedJob } from "../backend/contract.js";
import type { TimerClock, ClockTimer } from "../core/clock.js";
import type { LeaseLossReason } from "../core/errors.js";
import { BufferMarks } from "./buffer-marks.js";

/**
 * One claimed job's lease as this worker holds it: first in the prefetch buffer, then, once
 * started, until the store has its outcome. A heartbeat renews the one deadline wherever it is.
 */
export interface Hold {
  readonly claimed: ClaimedJob;
  /** By the worker's clock: when the store will consider the lease expired (counted from the claim request). */
  deadline: number;
}

/**
 * Leases that passed their deadline by this worker's clock while it still held them: no renewal
 * reached the store in time, so the store may already have handed the jobs to another worker.
 */
export interface LeaseLapse {
  /** The jobs whose leases lapsed (each reported once per hold). */
  jobIds: string[];
  /** How long ago the earliest of those leases lapsed, ms. */
  lapsedForMs: number;
  /**
   * How late the heartbeat tick that noticed it fired, ms: time this process's event loop did not
   * run (a handler blocked it, or the machine gave the process no CPU). When something else
   * noticed it before the tick did (the store's answer that the lease is lost, a renewal that
   * could not reach the store, the start of a buffered job, a new claim of the same job): how
   * overdue the next tick was then.
   */
  tickLateMs: number;
  /** How long the renewal still out had waited for the store's answer, ms; 0 when none was out. */
  renewalPendingMs: number;
}

export interface LeaseKeeperOptions {
  backend: Backend;
  clock: TimerClock;
  leaseMs: number;
  heartbeatIntervalMs: number;
  /** A started job's lease is gone: abort its handler (the store will refuse its outcome). */
  onRunningLost(hold: Hold, reason: LeaseLossReason): void;
  /** A buffered job's lease is gone before it started: it was taken out of the buffer, unstarted. */
  onBufferedLost(hold: Hold, reason: LeaseLossReason): void;
  /** Hands one lease back to the store (the settler's batched release). */
  release(lease: ClaimedJob["lease"]): Promise<unknown>;
  /** Buffered jobs the store took back unstarted (no attempt used). */
  onReleased(jobIds: string[], why: string): void;
  onError(error: unknown, during: string): void;
  /** The worker's concurrency. Buffered marks are sent only at 1: see the constructor. */
  concurrency: number;
  /**
   * Held leases lapsed before a renewal reached the store: checked at each heartbeat tick, and for
   * a hold as it is dropped, replaced or finished before a tick saw it (LeaseKeeper.noticeLapses).
   */
  onLapsed?(lapse: LeaseLapse): void;
}

/**
 * Owns every lease a worker holds (like BullMQ's LockManager): the prefetch buffer, the started
 * jobs until their outcome is stored, the heartbeat that renews them all in one call, and their
 * local deadlines. It decides when a lease is surely gone (the store said so, or the deadline
 * passed while the store was unreachable) and tells the worker, which owns the handlers.
 *
 * The store also learns which held jobs are only buffered (BufferMarks), for its stall counting.
 */
export class LeaseKeeper {
  /** Claimed ahead of free slots, oldest first; started as slots free up. */
  private buffer: Hold[] = [];
  /** Started and not yet settled, by job id. */
  private readonly started = new Map<string, Hold>();
  private readonly marks: BufferMarks;
  private timer: ClockTimer | null = null;
  private beat: Promise<void> | null = null;
  /** When the renewal now out was sent (by the clock), or null. */
  private beatSentAt: number | null = null;
  /** When the next heartbeat tick is due (by the clock). */
  private tickDue = 0;
  /** Holds whose lapse was reported already. */
  private readonly lapseReported = new WeakSet<Hold>();
  private stopped = false;

  constructor(private readonly o: LeaseKeeperOptions) {
    // The store blames an expiry only on a job that was its worker's one unexcused active job
    // (RescueOptions.maxStalls). While the buffer holds jobs, every slot is busy (a slot that frees
    // takes the next buffered job at once, and pause and shutdown hand the buffer back), so a
    // worker of 2 or more slots then has at least 2 started jobs: no job of it can be blamed,
    // marked or not. When the buffer is empty there is nothing to mark. So the marks change a
    // verdict only at concurrency 1 (and in the moments of a pause or shutdown before the buffer
    // is handed back, where an unmarked job can only look busier, or at worst be blamed one
    // stall), and they cost two more row versions per buffered job (a third of PostgreSQL's
    // processing rate at prefetch 500 and concurrency 10, bench/ab-mark-buffered.ts).
    this.marks = new BufferMarks(o.concurrency === 1 ? o.backend : null, (error, during) => o.onError(error, during));
  }

  get bufferedCount(): number {
    return this.buffer.length;
  }

  /** Starts renewing leases every `heartbeatIntervalMs`. */
  start(): void {
    if (this.timer || this.stopped) return;
    this.tickDue = this.o.clock.now() + this.o.heartbeatIntervalMs;
    const tick = (): void => {
      const now = this.o.clock.now();
      const lateMs = this.tickLateMs(now);
      this.tickDue = now + this.o.heartbeatIntervalMs;
      this.timer = this.o.clock.after(this.o.heartbeatIntervalMs, tick);
      this.noticeLapses(now, lateMs);
      void this.heartbeat();
    };
    this.timer = this.o.clock.after(this.o.heartbeatIntervalMs, tick);
  }

  /** How overdue the heartbeat tick is at `now`, ms (0 before it is due or when none is planned). */
  private tickLateMs(now: number): number {
    return this.timer === null ? 0 : Math.max(0, now - this.tickDue);
  }

  /**
   * Reports the held leases (of `among`, or all) whose deadline passed before a renewal reached
   * the store. Each deadline counts from when its last renewal was sent, so this errs towards
   * reporting: the store may have renewed a little later. Nothing is aborted here: the store
   * decides (the next renewal reports the lease lost if another worker took the job, and a late
   * settle is fenced). The tick looks at every hold; a hold that leaves before a tick saw it
   * (the store's answer to a renewal sent before a stall came back first and reported it lost,
   * the renewal failed, the job was claimed again, or its run ended) is looked at as it leaves,
   * else its lapse would go unreported. A report that throws (a listener's error) is passed to
   * onError: it must not turn a renewal's answer into a failed renewal.
   */
  private noticeLapses(now: number, tickLateMs: number, among?: readonly Hold[]): void {
    if (!this.o.onLapsed) return;
    const lapsed = (among ?? [...this.started.values(), ...this.buffer]).filter((h) => now > h.deadline && !this.lapseReported.has(h));
    if (lapsed.length === 0) return;
    for (const h of lapsed) this.lapseReported.add(h);
    try {
      this.o.onLapsed({
        jobIds: lapsed.map((h) => h.claimed.job.id),
        lapsedForMs: Math.round(now - Math.min(...lapsed.map((h) => h.deadline))),
        tickLateMs: Math.round(tickLateMs),
        renewalPendingMs: this.beatSentAt === null ? 0 : Math.round(now - this.beatSentAt),
      });
    } catch (error) {
      this.o.onError(error, "reporting lapsed leases");
    }
  }

  /**
   * Stops the heartbeats (one in flight is not awaited: a store that does not answer must not
   * hold up a shutdown) and waits for the buffered marks on their way.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    this.timer?.cancel();
    this.timer = null;
    await this.marks.settled();
  }

  /**
   * Takes newly claimed jobs into the buffer. The store starts a lease before it answers, so the
   * deadlines count from `requestSentAt` (by this keeper's clock).
   */
  accept(claimed: readonly ClaimedJob[], requestSentAt: number): Hold[] {
    const holds = claimed.map((c): Hold => ({ claimed: c, deadline: requestSentAt + this.o.leaseMs }));
    this.buffer.push(...holds);
    this.marks.bufferedByClaim(claimed);
    return holds;
  }

  /**
   * For a claim about to be sent with `freeSlots` slots free: how many of its jobs will start at
   * once (`ClaimRequest.startsAtOnce`), when this keeper marks buffered jobs and the store can
   * record them with the claim; undefined otherwise (the store then marks none).
   */
  startsAtOnce(freeSlots: number): number | undefined {
    return this.marks.enabled && this.o.backend.capabilities.claimMarksBuffered === true ? Math.max(0, freeSlots) : undefined;
  }

  /** Of `holds`, the ones the free slots did not take stay buffered: the store is told so. */
  noteBuffered(holds: readonly Hold[]): void {
    // No marks kept (concurrency 2 or more): no set of the buffer to build per claim.
    if (!this.marks.enabled || holds.length === 0 || this.buffer.length === 0) return;
    const waiting = new Set(this.buffer);
    // Those the claim recorded as buffered already are not sent again.
    this.marks.buffered(holds.filter((h) => waiting.has(h) && h.claimed.markedBuffered !== true).map((h) => h.claimed.lease));
  }

  /**
   * The oldest buffered job whose lease is still ours, now counted as started; null when the
   * buffer is empty. A lease that ran out while its job waited here (this process was stopped,
   * or heartbeats failed) may already belong to another worker: that job is reported lost and
   * handed back unstarted (fenced, so harmless if the store already rescued it).
   */
  next(): Hold | null {
    for (;;) {
      const hold = this.buffer.shift();
      if (!hold) return null;
      const now = this.o.clock.now();
      if (now >= hold.deadline) {
        this.noticeLapses(now, this.tickLateMs(now), [hold]);
        this.marks.forget(hold.claimed.lease);
        this.o.onBufferedLost(hold, "expired");
        // Released rather than left to expire: no attempt used, and no stall counted.
        this.o.release(hold.claimed.lease).catch((error: unknown) => this.o.onError(error, `releasing buffered job ${hold.claimed.job.id}`));
        continue;
      }
      // A run of the same job still here under an older lease (the store rescued the job and
      // leased it to this worker again): its hold leaves the map now, so look at it first.
      const replaced = this.started.get(hold.claimed.job.id);
      if (replaced !== undefined && replaced !== hold && now > replaced.deadline) this.noticeLapses(now, this.tickLateMs(now), [replaced]);
      this.started.set(hold.claimed.job.id, hold);
      // Before the handler runs: one that kills this process at once is then on record as started.
      this.marks.started(hold.claimed.lease);
      return hold;
    }
  }

  /**
   * The store has the job's outcome, or the worker gave the lease up: stop renewing it. A run that
   * ended after its lease lapsed (the process stalled, nothing rescued the job, the store took the
   * outcome) leaves here, so its hold is looked at as it leaves, like every other way out.
   */
  finish(hold: Hold): void {
    if (this.started.get(hold.claimed.job.id) !== hold) return;
    this.started.delete(hold.claimed.job.id);
    const now = this.o.clock.now();
    // Only a passed deadline can be a lapse (noticeLapses' own test): nothing built for the rest.
    if (now > hold.deadline) this.noticeLapses(now, this.tickLateMs(now), [hold]);
  }

  /** True while the lease has surely not expired in the store. */
  isLive(hold: Hold): boolean {
    return this.o.clock.now() <= hold.deadline;
  }

  /** Hands every buffered job back to the store unstarted (no attempt used). */
  async releaseBuffered(why: string): Promise<void> {
    const buffered = this.buffer;
    this.buffer = [];
    if (buffered.length === 0) return;
    for (const h of buffered) this.marks.forget(h.claimed.lease);
    const jobIds = buffered.map((h) => h.claimed.job.id);
    try {
      const results = await this.o.backend.release(buffered.map((h) => h.claimed.lease));
      this.o.onReleased(
        jobIds.filter((_, i) => results[i] === "applied"),
        why,
      );
    } catch (error) {
      // They come back when their leases expire; nothing is lost, only delayed.
      this.o.onError(error, `releasing ${jobIds.length} buffered jobs (they run again after their leases expire)`);
    }
  }

  /** Renews every held lease in one call (skipped while the previous one is still out). */
  heartbeat(): Promise<void> {
    this.beat ??= this.renew().finally(() => (this.beat = null));
    return this.beat;
  }

  private async renew(): Promise<void> {
    // Started jobs still settling are included: their lease must outlive the acknowledgement. So
    // are buffered jobs, which are active in the store under our lease although not started yet.
    const held = [...this.started.values()];
    const buffered = this.buffer.slice();
    if (held.length === 0 && buffered.length === 0) return;
    const sentAt = this.o.clock.now();
    this.beatSentAt = sentAt;
    try {
      const leases = held.map((h) => h.claimed.lease).concat(buffered.map((h) => h.claimed.lease));
      const { lost } = await this.o.backend.heartbeat(leases, this.o.leaseMs);
      const lostHolds = lost.flatMap(({ lease, reason }) => {
        const hold = this.holdOf(lease);
        return hold === undefined ? [] : [{ hold, reason }];
      });
      if (lostHolds.length > 0) {
        const now = this.o.clock.now();
        // Whatever the reason ("gone": the job ran elsewhere and was removed), the deadline decides.
        this.noticeLapses(
          now,
          this.tickLateMs(now),
          lostHolds.map((l) => l.hold),
        );
      }
      this.beatSentAt = null;
      const lostTokens = new Map<string, number>();
      for (const { lease } of lost) lostTokens.set(lease.jobId, lease.token);
      const lostStarted: Array<{ hold: Hold; reason: LeaseLossReason }> = [];
      for (const { hold, reason } of lostHolds) {
        if (this.started.get(hold.claimed.job.id) === hold) lostStarted.push({ hold, reason });
        else this.dropBuffered(hold, reason);
      }
      // Only now: aborting a started job frees its slot, which starts the next buffered job, and
      // that must not be one whose lease this same answer reported lost.
      for (const { hold, reason } of lostStarted) this.o.onRunningLost(hold, reason);
      // A buffered job that started while the call was out is renewed all the same.
      for (const h of held.concat(buffered)) {
        if (lostTokens.get(h.claimed.lease.jobId) !== h.claimed.lease.token) h.deadline = sentAt + this.o.leaseMs;
      }
    } catch (error) {
      const now = this.o.clock.now();
      this.noticeLapses(now, this.tickLateMs(now));
      this.beatSentAt = null;
      this.o.onError(error, "renewing leases");
      // Cannot reach the store: once a lease has surely expired there, another worker may already
      // run the job, so stop ours rather than run it twice at once.
      for (const h of held) if (!this.isLive(h) && this.started.get(h.claimed.job.id) === h) this.o.onRunningLost(h, "expired");
      for (const h of this.buffer.slice()) if (!this.isLive(h)) this.dropBuffered(h, "expired");
    }
  }

  /** The hold (started, else buffered) of this lease, matched by job id and token; undefined when none. */
  private holdOf(lease: ClaimedJob["lease"]): Hold | undefined {
    const ours = (h: Hold | undefined): h is Hold => h !== undefined && h.claimed.lease.jobId === lease.jobId && h.claimed.lease.token === lease.token;
    const started = this.started.get(lease.jobId);
    return ours(started) ? started : this.buffer.find(ours);
  }

  private dropBuffered(hold: Hold, reason: LeaseLossReason): void {
    const i = this.buffer.indexOf(hold);
    if (i < 0) return;
    this.buffer.splice(i, 1);
    this.marks.forget(hold.claimed.lease);
    this.o.onBufferedLost(hold, reason);
  }
}
