import type Database from "better-sqlite3";
import { preparedFor } from "../checked-lists.js";
import { byteOrderRange } from "../named-range.js";
import type { PendingRange } from "./statements.js";

/**
 * How many queues with pending jobs the loose scan walks before a claim probes every named
 * queue instead (the same bound as PostgreSQL's claim.sql): past it, probing the named queues
 * costs no more than scanning on.
 */
export const PENDING_SCAN_LIMIT = 32;

/** A claim's named queues, prepared once per list (checked-lists.ts): de-duplicated, as a set, and their range. */
interface NamedQueues {
  readonly all: readonly string[];
  readonly set: ReadonlySet<string>;
  /** The first and last name in SQLite's BINARY order. */
  readonly range: { first: string; last: string } | null;
}

function prepare(queues: readonly string[]): NamedQueues {
  const set = new Set(queues);
  const all = [...set];
  return { all, set, range: byteOrderRange(all) };
}

/**
 * The named queues a claim has to probe: those among `queues` that hold waiting or scheduled
 * jobs, found by one loose scan of the pending rows between the first and the last name
 * (queries/pending-queues.sql) instead of a probe per named queue, so a worker naming 1,000
 * queues of which 999 are empty probes one. Run inside the claim's transaction, so no job can
 * arrive between the scan and the probes: an empty queue skipped here has no job to miss.
 * Every named queue is returned (probed, as before) when there is only one, or when the scan
 * finds more than PENDING_SCAN_LIMIT pending queues in the range.
 */
export function queuesToProbe(pendingQueues: Database.Statement<[PendingRange], string>, queues: readonly string[]): readonly string[] {
  const named = preparedFor(queues, "sqlite-named-queues", prepare);
  if (named.all.length <= 1 || named.range === null) return named.all;
  const most = Math.min(named.all.length, PENDING_SCAN_LIMIT) + 1;
  const pending = pendingQueues.all({ ...named.range, most });
  if (pending.length >= most) return named.all;
  return pending.filter((queue) => named.set.has(queue));
}
