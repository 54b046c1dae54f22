import { positiveInt } from "../../core/checks.js";
import type { Json } from "../../core/json.js";
import { badEventCursor, eventPrunePolicy, type EventLogPage, type EventPrunePolicy, type QueueEvent, type QueueEventType } from "../../core/queue-events.js";
import { jobIdFromStored } from "./codec.js";

/**
 * The event log on Redis. Each queue has its own stream, `<prefix>:{<queue>}:ev`, appended to by
 * the Lua script that makes each change (log_event in lua/_common.lua), in the queue's cluster
 * slot like every other key of the queue. There is no one stream for the whole prefix: on Redis
 * Cluster a script cannot write outside its queue's slot.
 *
 * So a position in the log is a position in every queue's stream, and a cursor has to say where
 * each queue stands without naming every queue (an id that grew by 30 bytes per queue could not be
 * sent back over HTTP past a few hundred queues). A cursor is a watermark and its exceptions:
 * base64url JSON `[w, { "<queue>": "<ms>-<seq>" }, wQueue?]`. Every event of every queue with a
 * stream id before `w` has been read, and at `w` itself those of every queue up to `wQueue` by name
 * (of every queue when there is none); a queue named in the exceptions has been read up to its own
 * position (past the watermark); no other event past it has been read. A page merges the queues'
 * streams by stream id, then queue name (about time order on one server; on a cluster each node
 * has its own clock, and only the order within a queue is guaranteed) and moves the watermark as
 * far as it can prove nothing can still appear before it:
 *
 * - in a queue whose read reached the end of its stream: nothing before Redis' time at that read
 *   (read-events-1.lua reads TIME in the same step), since every event is stamped by a later
 *   script with its own, later, time, or after the stream's last id when that is ahead of the clock;
 * - in a queue the page could not read to its end: nothing before its last entry read that the
 *   page does not hold;
 * - in a queue registered after the read of the registry: nothing before the registry's time then
 *   (queues-at-1.lua), since a queue is registered before its first event (RedisBackend.enqueue
 *   waits for the registry's answer before it writes). A registration lost with its node (a
 *   failover of an unreplicated write on a cluster) would hide the queue's events as it did before;
 * - and nothing before the next entry of the merge that the page does not hand out.
 *
 * Each bound by time is taken {@link CLOCK_SKEW_ALLOWANCE_MS} early: on a cluster the queues' nodes
 * read different clocks, and after a failover a replica's clock may be behind its primary's. So the
 * exceptions are the queues with events in about the last second, whatever the number of queues; a
 * page stops before an event whose id would pass {@link MAX_ISSUED_CURSOR_LENGTH}, and hands it out
 * once the watermark has moved on (at most about that second later). Resuming after an event never
 * skips nor repeats one of any queue. Two cases do not wait: an event stamped ahead of Redis' clock
 * (a clock set back: the watermark would pass it only once the clock caught up) goes past the
 * bound; and the latest cursor, when it would pass it, names no queue and so hands out again the
 * events of the second before it (a repeat, never a loss). The cursor of earlier versions, `{ "<queue>":
 * "<ms>-<seq>" }` for every queue, is still read (the watermark then is zero). The bounds by time
 * assume no clock is set back by more than the allowance: the cursor of earlier versions did not
 * depend on clocks.
 */

/** What the log needs of the backend. */
export interface RedisEventLogStore {
  /** Every queue name under the prefix (the registry). */
  queues(): Promise<string[]>;
  /** The registry and Redis' time of that read, ms (lua/queues-at-1.lua). */
  queuesAt(): Promise<{ queues: string[]; timeMs: number }>;
  /** The stream key of a queue. */
  streamKey(queue: string): string;
  /**
   * Each stream's entries from its start (inclusive), at most `count`, or its last entry alone
   * when `count` is 0; with Redis' time of the read that took them, ms, for each stream (one
   * script reads many streams on a single server, lua/read-streams-1.lua; a cluster reads each
   * with lua/read-events-1.lua). In the order of `reads`.
   */
  readStreams(reads: ReadonlyArray<{ key: string; start: string }>, count: number): Promise<Array<{ entries: StreamEntry[]; timeMs: number }>>;
  /** Runs lua/prune-events-1.lua on one stream; returns how many entries it deleted. */
  prune(key: string, minAt: number, maxEvents: number, limit: number): Promise<number>;
  /** The store's now, ms. */
  now(): Promise<number>;
}

/** One stream entry as ioredis returns it: [id, [field, value, …]]. */
export type StreamEntry = [string, string[]];

/**
 * How far behind another node's clock (or an earlier primary's) a Redis clock may be without an
 * event of its queues going unread, ms. Each bound the watermark takes from a clock is taken this
 * much earlier; the price is that the queues with events in this last stretch are named in the
 * cursor one by one.
 */
export const CLOCK_SKEW_ALLOWANCE_MS = 1_000;
/**
 * The longest event id a page hands out when it names one more queue than the id before it,
 * characters (or the cursor the page started from, when that was longer): under the 8,192 characters
 * HTTP's `?lastEventId=` takes and Node.js' 16 KB of headers (`Last-Event-ID`). About a hundred
 * queues with events in the last second fit.
 */
export const MAX_ISSUED_CURSOR_LENGTH = 4_096;

const STREAM_ID = /^(\d{1,15})-(\d{1,20})$/;
/** A cursor longer than this is refused before decoding (an earlier version's, about 2,000 queues). */
const MAX_CURSOR_LENGTH = 100_000;
const U64_MAX = (1n << 64n) - 1n;
const ZERO = "0-0";

/**
 * A point in the merge order of every queue's entries (stream id, then queue name): the entries up
 * to it. `queue` null is past every queue at that stream id. The merge order of entries at or
 * before a settled id is final, so a watermark can stop between queues that share a stream id
 * (several queues' events stamped in one millisecond share `<ms>-0`).
 */
interface Mark {
  id: string;
  queue: string | null;
}

/** Where a reader stands: see the file's comment. `ahead` holds only positions past `w`. */
interface Position {
  w: Mark;
  ahead: Map<string, string>;
}

function encodeCursor(w: Mark, ahead: ReadonlyMap<string, string>): string {
  const doc: unknown[] = [w.id];
  if (ahead.size > 0 || w.queue !== null) doc.push(Object.fromEntries(ahead));
  if (w.queue !== null) doc.push(w.queue);
  return Buffer.from(JSON.stringify(doc), "utf8").toString("base64url");
}

function decodeCursor(cursor: string): Position {
  if (cursor.length === 0 || cursor.length > MAX_CURSOR_LENGTH || !/^[A-Za-z0-9_-]+$/.test(cursor)) throw badEventCursor(cursor);
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8"));
  } catch {
    throw badEventCursor(cursor);
  }
  const streamIds = (doc: unknown): Map<string, string> => {
    if (typeof doc !== "object" || doc === null || Array.isArray(doc)) throw badEventCursor(cursor);
    const out = new Map<string, string>();
    for (const [queue, id] of Object.entries(doc)) {
      const canonical = typeof id === "string" && STREAM_ID.test(id) ? canonicalId(id) : null;
      if (canonical === null) throw badEventCursor(cursor);
      out.set(queue, canonical);
    }
    return out;
  };
  // An earlier version's cursor: every queue's position, nothing read before it otherwise.
  if (!Array.isArray(parsed)) return { w: { id: ZERO, queue: null }, ahead: streamIds(parsed) };
  const [id, ahead, queue] = parsed as unknown[];
  const canonical = typeof id === "string" && STREAM_ID.test(id) ? canonicalId(id) : null;
  if (parsed.length > 3 || canonical === null || (queue !== undefined && typeof queue !== "string")) throw badEventCursor(cursor);
  const w: Mark = { id: canonical, queue: queue ?? null };
  const positions = ahead === undefined ? new Map<string, string>() : streamIds(ahead);
  for (const [q, at] of positions) if (covers(w, q, at)) throw badEventCursor(cursor);
  return { w, ahead: positions };
}

function parts(id: string): [bigint, bigint] {
  const [, ms, seq] = STREAM_ID.exec(id)!;
  return [BigInt(ms!), BigInt(seq!)];
}

/** The stream id right after `id` (XRANGE's start is inclusive; "(" needs Redis 6.2). */
function after(id: string): string {
  const [ms, seq] = parts(id);
  return seq + 1n > U64_MAX ? `${ms + 1n}-0` : `${ms}-${seq + 1n}`;
}

/** The stream id right before `id` ("0-0", which no entry has, before the first). */
function before(id: string): string {
  const [ms, seq] = parts(id);
  if (seq > 0n) return `${ms}-${seq - 1n}`;
  return ms > 0n ? `${ms - 1n}-${U64_MAX}` : ZERO;
}

/** The last stream id a clock reading of `timeMs` proves final, taken with the skew allowance. */
function settledBy(timeMs: number): string {
  const ms = Math.floor(timeMs) - CLOCK_SKEW_ALLOWANCE_MS;
  return ms > 0 ? `${ms - 1}-${U64_MAX}` : ZERO;
}

/** Orders two numbers written without leading zeros, as they are, by length and then digit by digit. */
function compareDigits(a: string, b: string): number {
  if (a.length !== b.length) return a.length < b.length ? -1 : 1;
  return a === b ? 0 : a < b ? -1 : 1;
}

/**
 * Orders two stream ids in their canonical form (no leading zeros: Redis' own, and every id a
 * cursor holds once decoded). Called for every queue and entry of a page, so without BigInt.
 */
function compareIds(a: string, b: string): number {
  const ad = a.indexOf("-");
  const bd = b.indexOf("-");
  return compareDigits(a.slice(0, ad), b.slice(0, bd)) || compareDigits(a.slice(ad + 1), b.slice(bd + 1));
}

/** `id` written without leading zeros, so compareIds can read it; null when Redis would refuse it. */
function canonicalId(id: string): string | null {
  const [ms, seq] = parts(id);
  return seq > U64_MAX ? null : `${ms}-${seq}`;
}

const maxId = (a: string, b: string) => (compareIds(a, b) >= 0 ? a : b);
const minId = (a: string, b: string) => (compareIds(a, b) <= 0 ? a : b);

function compareMarks(a: Mark, b: Mark): number {
  const byId = compareIds(a.id, b.id);
  if (byId !== 0) return byId;
  if (a.queue === b.queue) return 0;
  if (a.queue === null) return 1;
  if (b.queue === null) return -1;
  return a.queue < b.queue ? -1 : 1;
}

const minMark = (a: Mark, b: Mark) => (compareMarks(a, b) <= 0 ? a : b);
const maxMark = (a: Mark, b: Mark) => (compareMarks(a, b) >= 0 ? a : b);

/** Whether `w` already says that `queue` is read through stream id `at`. */
function covers(w: Mark, queue: string, at: string): boolean {
  return compareMarks({ id: at, queue }, w) <= 0;
}

/** The first stream id of `queue` a reader at `w` has not read (XRANGE's inclusive start); `next` is after(w.id). */
function firstUnread(w: Mark, queue: string, next: string): string {
  return covers(w, queue, w.id) ? next : w.id;
}

/** The exceptions that stay once the watermark is `w`. */
function aheadOf(w: Mark, positions: ReadonlyMap<string, string>): Map<string, string> {
  const out = new Map<string, string>();
  for (const [queue, at] of positions) if (!covers(w, queue, at)) out.set(queue, at);
  return out;
}

function eventOf(queue: string, [id, fields]: StreamEntry): Omit<QueueEvent, "id"> {
  const f: Record<string, string> = {};
  for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i]!] = fields[i + 1]!;
  // Layout 6 (log_event in lua/_common.lua): t is "<type>[ <attempt>[ <at>]]"; layouts 4 and 5
  // kept attempt and time in fields a and at. A blank type is "added", a missing time the stream
  // id's; the id is in its stored form (jobIdFromStored takes an older layout's id as it is).
  const [typeText, attemptText, atText] = f.a === undefined ? (f.t ?? "").split(" ") : [f.t, f.a, f.at];
  const type = (typeText || "added") as QueueEventType;
  const at = atText ? Number(atText) : Number(STREAM_ID.exec(id)![1]);
  return {
    type,
    queue,
    name: f.n ?? "",
    jobId: jobIdFromStored(f.j ?? ""),
    attempt: Number(attemptText || 0),
    at,
    data: f.d ? (JSON.parse(f.d) as { [key: string]: Json }) : type === "added" ? { state: "waiting", runAt: at, priority: 0 } : null,
  };
}

export class RedisEventLog {
  constructor(private readonly store: RedisEventLogStore) {}

  async readEvents(cursor: string, limit: number): Promise<EventLogPage> {
    const from = decodeCursor(cursor);
    positiveInt("limit", limit);
    const registry = await this.store.queuesAt();
    // `bound`: the last stream id no event can still appear at or before, in any queue, apart
    // from the entries of this read that the page does not hand out (see the file's comment).
    let bound = settledBy(registry.timeMs);
    const afterW = after(from.w.id);
    const starts = registry.queues.map((queue) => {
      const position = from.ahead.get(queue);
      return position === undefined ? firstUnread(from.w, queue, afterW) : after(position);
    });
    const reads = await this.store.readStreams(
      registry.queues.map((queue, i) => ({ key: this.store.streamKey(queue), start: starts[i]! })),
      limit,
    );
    const perQueue = reads.map(({ entries, timeMs }, i) => {
      const queue = registry.queues[i]!;
      const last = entries.length > 0 ? entries[entries.length - 1]![0] : before(starts[i]!);
      return { entries: entries.map((entry) => ({ queue, entry })), settled: entries.length < limit ? maxId(last, settledBy(timeMs)) : last };
    });
    for (const { settled } of perQueue) bound = minId(bound, settled);
    // Every queue's entries are in stream order already; sorting the union by stream id, then
    // queue, keeps that order, so the first `limit` take a prefix of each queue's entries.
    const merged = perQueue
      .flatMap((q) => q.entries)
      .sort((a, b) => compareIds(a.entry[0], b.entry[0]) || (a.queue < b.queue ? -1 : a.queue > b.queue ? 1 : 0));
    // The watermark once the first `taken` entries of the merge are handed out: up to `bound`,
    // and not past the last entry handed out (nor, with none, past the next one); it never goes
    // back. So an event read again once settled (more than the skew allowance ago) gets the same
    // id from the same start, and an empty page's cursor moves on to `bound`.
    const settledMark: Mark = { id: bound, queue: null };
    const watermark = (taken: number): Mark => {
      const next = merged[taken];
      const last = merged[taken - 1];
      let w = settledMark;
      if (last !== undefined) w = minMark(w, { id: last.entry[0], queue: last.queue });
      else if (next !== undefined) w = minMark(w, { id: before(next.entry[0]), queue: null });
      return maxMark(from.w, w);
    };
    const longest = Math.max(MAX_ISSUED_CURSOR_LENGTH, cursor.length);
    const clockAhead = `${Math.floor(registry.timeMs) + CLOCK_SKEW_ALLOWANCE_MS}-0`;
    const start = watermark(0);
    let positions = aheadOf(start, from.ahead);
    let pageCursor = encodeCursor(start, positions);
    const events: QueueEvent[] = [];
    for (const [i, { queue, entry }] of merged.slice(0, limit).entries()) {
      const w = watermark(i + 1);
      const ahead = aheadOf(w, new Map(positions).set(queue, entry[0]));
      const id = encodeCursor(w, ahead);
      // Too many queues with events in the last second to name one more: the rest waits for the
      // watermark to pass them (at most about the skew allowance). An id naming no more queues
      // than the one before it always goes, so a page never stalls; so does an event stamped
      // ahead of Redis' clock (a clock set back), which the watermark would pass only once the
      // clock caught up: then ids grow past the bound instead.
      if (id.length > longest && ahead.size > positions.size && compareIds(entry[0], clockAhead) <= 0) break;
      events.push({ id, ...eventOf(queue, entry) });
      pageCursor = id;
      positions = ahead;
    }
    return { events, cursor: pageCursor };
  }

  async latestEventCursor(): Promise<string> {
    const registry = await this.store.queuesAt();
    let w = settledBy(registry.timeMs);
    const reads = await this.store.readStreams(
      registry.queues.map((queue) => ({ key: this.store.streamKey(queue), start: ZERO })),
      0,
    );
    const lasts = reads.map(({ entries, timeMs }, i) => {
      const last = entries[0]?.[0] ?? ZERO;
      return { queue: registry.queues[i]!, last, settled: maxId(last, settledBy(timeMs)) };
    });
    for (const { settled } of lasts) w = minId(w, settled);
    const mark: Mark = { id: w, queue: null };
    const exact = encodeCursor(mark, aheadOf(mark, new Map(lasts.map(({ queue, last }) => [queue, last]))));
    // More queues with events in the last second than an id can name: start at the watermark
    // alone, handing out again those events of the second before (a repeat, never a loss).
    return exact.length <= MAX_ISSUED_CURSOR_LENGTH ? exact : encodeCursor(mark, new Map());
  }

  /**
   * Deletes, queue by queue, the events older than `maxAgeMs` and those beyond the newest
   * `maxEvents` of the queue (per queue here: the SQL stores count the whole store), at most
   * `limit` in all.
   */
  async pruneEvents(policy?: EventPrunePolicy): Promise<number> {
    const p = eventPrunePolicy(policy);
    const minAt = (await this.store.now()) - p.maxAgeMs;
    let deleted = 0;
    for (const queue of await this.store.queues()) {
      if (deleted >= p.limit) break;
      deleted += await this.store.prune(this.store.streamKey(queue), minAt, p.maxEvents, p.limit - deleted);
    }
    return deleted;
  }
}
