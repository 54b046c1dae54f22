/**
 * A lease must not expire on account of the store: the rule behind holding the rescue.
 *
 * A holder keeps its lease by heartbeats, and settles it by an acknowledgement. Both need the
 * store to answer. When it does not (its connection is lost, it fails over, a Redis Cluster node
 * is down or reconfiguring, a slot is being moved), every holder's renewals fail for as long as
 * that lasts, and a lease can run out although its holder never stopped. The first rescue once
 * the store answers again would take such jobs back and hand them to other workers, while their
 * holders, retrying, acknowledge a moment later: refused (fenced), and the jobs run twice although
 * no worker failed. A failover can also roll a lease back: a renewal the old primary acknowledged
 * but never replicated is gone on the new one.
 *
 * So a backend that saw a store (a scope: a Redis Cluster slot, or the whole server) fail leaves
 * the leases in that scope alone in its rescue while the store keeps failing and for `holdMs`
 * after it answered again. In that window the holders' heartbeats (due every lease / 3, retried)
 * and acknowledgements land. A holder that is really gone is rescued once the window ends: its job
 * is delayed by at most the window, never lost. Fencing is unchanged: a heartbeat extends only a
 * lease still held under its token, an acknowledgement applies only under its token, and the
 * rescue still takes only leases past their expiry.
 *
 * The window must outlast a holder's next successful heartbeat after the store answers: one lease
 * is enough, so it is the longest lease this backend granted or renewed, or the worker's default
 * lease when it granted none (a process that only rescues).
 *
 * What it does not cover: a backend that never tried the scope while it failed (a process started
 * after the outage, or one that sent nothing there meanwhile) rescues at once; a worker's own
 * deadline still aborts a handler whose heartbeats failed for a whole lease (it cannot know that
 * every rescuer holds off).
 */

/** The worker's default lease (src/runtime/worker.ts `leaseMs`): the window when no lease was seen, ms. */
export const DEFAULT_LEASE_HOLD_MS = 30_000;

interface ScopeState {
  /** The store failed and has not answered since. */
  failing: boolean;
  /** When it answered again (store-neutral: this process's clock, ms). */
  answeredAt: number;
}

/** Per scope: whether the store failed lately, and so whether the rescue must leave its leases alone. */
export class LeaseHoldWatch {
  private readonly scopes = new Map<string, ScopeState>();
  private longestLeaseMs = 0;

  /** @param now this process's clock (or the injected test clock), ms */
  constructor(private readonly now: () => number) {}

  /** A lease of `ms` was granted or renewed here: the window grows to cover it. */
  noteLease(ms: number): void {
    if (ms > this.longestLeaseMs) this.longestLeaseMs = ms;
  }

  /** The store behind `scope` failed (did not answer, or refused for a reason of its own). */
  noteFailure(scope: string): void {
    const state = this.scopes.get(scope);
    if (state === undefined) this.scopes.set(scope, { failing: true, answeredAt: 0 });
    else state.failing = true;
  }

  /** The store behind `scope` answered a call: the window starts now if it was failing. */
  noteAnswer(scope: string): void {
    const state = this.scopes.get(scope);
    if (state === undefined || !state.failing) return;
    state.failing = false;
    state.answeredAt = this.now();
  }

  /** True when some scope failed lately: answers need noting (a cheap test for every call's success path). */
  get watching(): boolean {
    return this.scopes.size > 0;
  }

  /** The window after the store answered again, ms. */
  get holdMs(): number {
    return this.longestLeaseMs > 0 ? this.longestLeaseMs : DEFAULT_LEASE_HOLD_MS;
  }

  /** True while leases in `scope` must not be expired: the store is failing, or answered again less than holdMs ago. */
  isHeld(scope: string): boolean {
    const state = this.scopes.get(scope);
    if (state === undefined) return false;
    if (state.failing || this.now() - state.answeredAt < this.holdMs) return true;
    this.scopes.delete(scope);
    return false;
  }
}
