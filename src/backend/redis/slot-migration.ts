/**
 * Slot migrations on Redis Cluster, seen from the rescue.
 *
 * `redis-cli --cluster reshard` (or any MIGRATE-based move) carries a slot's keys over a few at
 * a time. All of a queue's keys share one slot (keys.ts), so while that slot is half moved every
 * script of the queue that names keys on both sides is refused with TRYAGAIN, and one that reads
 * a key already gone fails with "Script attempted to access a non local key". That holds for the
 * whole move of the slot, heartbeats and acknowledgements included: a queue with thousands of
 * jobs (each job a key) takes longer to move than a lease lasts. Without care, the first rescue
 * to run once the slot settles finds every lease of the queue expired and hands the jobs to other
 * workers, while their holders, which never stopped trying, acknowledge a moment later: refused
 * (fenced), and the jobs run twice although no worker failed.
 *
 * So a lease cannot expire on account of a migration: a backend that saw a queue's slot refuse a
 * script for a migration (any script: claims, heartbeats, acknowledgements, rescues) leaves that
 * queue's leases alone in its rescue until `holdMs` after the last such refusal. In that window
 * the holders' heartbeats (retried every heartbeat interval) and acknowledgements land, and a
 * holder that is really gone is rescued once the window ends: its job is delayed by at most the
 * window, never lost. Fencing is unchanged: a heartbeat extends only a lease still held under its
 * token, an acknowledgement applies only under its token, and the rescue still takes only leases
 * past their expiry.
 *
 * The window must outlast a holder's next successful heartbeat after the move: one lease is enough
 * (a heartbeat is due every lease / 3), so it is the longest lease this backend granted or renewed,
 * or the worker's default lease when it granted none (a process that only rescues).
 *
 * What it does not cover: a backend that never tried the queue during the move (a process started
 * after it) rescues at once; a worker's own deadline still aborts a handler whose heartbeats
 * failed for a whole lease (it cannot know that every rescuer holds off).
 */

/** The worker's default lease (src/runtime/worker.ts `leaseMs`), the window when no lease was seen, ms. */
export const DEFAULT_MIGRATION_HOLD_MS = 30_000;

/**
 * Replies a script gets from a slot that is being moved, in Redis' words: TRYAGAIN (its keys are
 * split between the two nodes), a non local key (one it reads has left), and ASK / MOVED, which
 * ioredis follows and only reports once it gives up ("Too many Cluster redirections. Last error:
 * …"): the two nodes sent it back and forth because neither had all the keys.
 */
const MIGRATION_REPLY = /\bTRYAGAIN\b|non local key|\b(?:ASK|MOVED) \d+ /;

/** True when `error` (or one of its causes) is a refusal because the queue's slot is being moved. */
export function isSlotMigrationError(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (MIGRATION_REPLY.test(e.message)) return true;
  }
  return false;
}

/**
 * The hash tag of a key (`{…}`, what Redis Cluster hashes), or the whole key without one. Every key
 * of one queue has the same tag, so it names the queue's slot.
 */
export function hashTagOf(key: string): string {
  const open = key.indexOf("{");
  if (open < 0) return key;
  const close = key.indexOf("}", open + 1);
  if (close <= open + 1) return key;
  return key.slice(open + 1, close);
}

/** Per queue slot (hash tag): when a migration was last seen refusing one of its scripts. */
export class SlotMigrationWatch {
  private readonly seenAt = new Map<string, number>();
  private longestLeaseMs = 0;

  constructor(private readonly now: () => number) {}

  /** A lease of `ms` was granted or renewed here: the window grows to cover it. */
  noteLease(ms: number): void {
    if (ms > this.longestLeaseMs) this.longestLeaseMs = ms;
  }

  /** A script on `keys` failed: remembers it if the failure was a slot migration. */
  noteFailure(keys: readonly string[], error: unknown): void {
    const first = keys[0];
    if (first === undefined || !isSlotMigrationError(error)) return;
    this.seenAt.set(hashTagOf(first), this.now());
  }

  /** The window after the last refusal during which the rescue leaves the slot's leases alone, ms. */
  get holdMs(): number {
    return this.longestLeaseMs > 0 ? this.longestLeaseMs : DEFAULT_MIGRATION_HOLD_MS;
  }

  /** True while leases of the queue whose key is `key` must not be expired. */
  isHeld(key: string): boolean {
    const tag = hashTagOf(key);
    const at = this.seenAt.get(tag);
    if (at === undefined) return false;
    if (this.now() - at < this.holdMs) return true;
    this.seenAt.delete(tag);
    return false;
  }
}
