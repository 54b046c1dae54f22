/**
 * Which Redis failures hold the rescue of which queue's leases (the rule: ../lease-hold.ts).
 *
 * A scope is what fails together: on Redis Cluster a queue's slot (every key of a queue shares its
 * hash tag, keys.ts; a master's death, a failover or a slot move reaches the queues of its slots),
 * on a single server or behind Sentinel the whole server. The failures that count are the store
 * not answering or not able to take writes: a lost or refused connection, LOADING, CLUSTERDOWN,
 * MASTERDOWN, TRYAGAIN, READONLY (a client still talking to a demoted primary), and the refusals
 * of a slot being moved (slot-migration.ts). An error a script raised for a reason of its own (a
 * layout too new, a bad argument) is an answer, not an outage.
 */
import { LeaseHoldWatch } from "../lease-hold.js";
import { hashTagOf, isSlotMigrationError } from "./slot-migration.js";

/** The scope of every queue on a single server or behind Sentinel. */
const WHOLE_SERVER = "";

/** A failover demoted the primary this connection still talks to. */
const READONLY_REPLY = /^READONLY\b/;

export class RedisRescueHold {
  private readonly watch: LeaseHoldWatch;

  /**
   * @param now this process's clock (or the injected test clock), ms
   * @param cluster true on Redis Cluster: one scope per queue slot, otherwise one for the server
   * @param isUnavailable the backend's test for "Redis did not answer, or is not serving now"
   */
  constructor(
    now: () => number,
    private readonly cluster: boolean,
    private readonly isUnavailable: (error: unknown) => boolean,
  ) {
    this.watch = new LeaseHoldWatch(now);
  }

  /** A lease of `ms` was granted or renewed here. */
  noteLease(ms: number): void {
    this.watch.noteLease(ms);
  }

  /** A call on `keys` (one queue's) failed: the queue's scope is held if Redis was out or its slot moving. */
  noteFailure(keys: readonly string[], error: unknown): void {
    const first = keys[0];
    if (first === undefined || !this.isStoreFailure(error)) return;
    this.watch.noteFailure(this.scopeOf(first));
  }

  /** A call on `keys` got Redis' answer. */
  noteAnswer(keys: readonly string[]): void {
    const first = keys[0];
    if (first !== undefined && this.watch.watching) this.watch.noteAnswer(this.scopeOf(first));
  }

  /** The connection to a single server (or the Sentinel-monitored primary) closed: every queue is held. */
  noteConnectionLost(): void {
    if (!this.cluster) this.watch.noteFailure(WHOLE_SERVER);
  }

  /** True while the rescue must leave the leases of the queue whose key is `key` alone. */
  isHeld(key: string): boolean {
    return this.watch.isHeld(this.scopeOf(key));
  }

  private scopeOf(key: string): string {
    return this.cluster ? hashTagOf(key) : WHOLE_SERVER;
  }

  private isStoreFailure(error: unknown): boolean {
    if (isSlotMigrationError(error) || this.isUnavailable(error)) return true;
    for (let e: unknown = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
      if (READONLY_REPLY.test(e.message)) return true;
    }
    return false;
  }
}
