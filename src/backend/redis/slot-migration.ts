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
 * So a lease cannot expire on account of a migration: a refusal for a migration holds the rescue
 * of the queue's leases like any store failure (../lease-hold.ts, rescue-hold.ts) until one lease
 * after the slot answers again.
 */

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
