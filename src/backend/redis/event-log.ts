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
 * So a position in the log is a position in each queue's stream: a cursor is the last stream id
 * read of every queue (base64url JSON `{ "<queue>": "<ms>-<seq>" }`); a queue it does not name is
 * read from its start. Stream ids come from Redis and only grow within a stream, so resuming
 * after an event never skips nor repeats one of its queue. A page merges the queues' streams by
 * stream id (about time order on one server; on a cluster each node has its own clock, and only
 * the order within a queue is guaranteed). An event's id is the cursor right after it: its size
 * grows with the number of queues that have events (about 30 bytes per queue).
 */

/** What the log needs of the backend. */
export interface RedisEventLogStore {
  /** Every queue name under the prefix (the registry). */
  queues(): Promise<string[]>;
  /** The stream key of a queue. */
  streamKey(queue: string): string;
  /** XRANGE key start end COUNT count. */
  range(key: string, start: string, count: number): Promise<StreamEntry[]>;
  /** The id of the last entry of a stream, or null when it has none. */
  lastId(key: string): Promise<string | null>;
  /** Runs lua/prune-events-1.lua on one stream; returns how many entries it deleted. */
  prune(key: string, minAt: number, maxEvents: number, limit: number): Promise<number>;
  /** The store's now, ms. */
  now(): Promise<number>;
}

/** One stream entry as ioredis returns it: [id, [field, value, …]]. */
export type StreamEntry = [string, string[]];

const STREAM_ID = /^(\d{1,15})-(\d{1,20})$/;
/** A cursor longer than this is refused before decoding (about 2,000 queues). */
const MAX_CURSOR_LENGTH = 100_000;
const U64_MAX = (1n << 64n) - 1n;

type Positions = Record<string, string>;

function encodeCursor(positions: Positions): string {
  return Buffer.from(JSON.stringify(positions), "utf8").toString("base64url");
}

function decodeCursor(cursor: string): Positions {
  if (cursor.length === 0 || cursor.length > MAX_CURSOR_LENGTH || !/^[A-Za-z0-9_-]+$/.test(cursor)) throw badEventCursor(cursor);
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8"));
  } catch {
    throw badEventCursor(cursor);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw badEventCursor(cursor);
  const positions: Positions = Object.create(null) as Positions;
  for (const [queue, id] of Object.entries(parsed)) {
    if (typeof id !== "string" || !STREAM_ID.test(id)) throw badEventCursor(cursor);
    positions[queue] = id;
  }
  return positions;
}

/** The stream id right after `id` (XRANGE's start is inclusive; "(" needs Redis 6.2). */
function after(id: string): string {
  const [, ms, seq] = STREAM_ID.exec(id)!;
  const next = BigInt(seq!) + 1n;
  return next > U64_MAX ? `${BigInt(ms!) + 1n}-0` : `${ms}-${next}`;
}

function compareIds(a: string, b: string): number {
  const [, am, as] = STREAM_ID.exec(a)!;
  const [, bm, bs] = STREAM_ID.exec(b)!;
  const ms = BigInt(am!) - BigInt(bm!);
  if (ms !== 0n) return ms < 0n ? -1 : 1;
  const seq = BigInt(as!) - BigInt(bs!);
  return seq === 0n ? 0 : seq < 0n ? -1 : 1;
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
    const positions = decodeCursor(cursor);
    positiveInt("limit", limit);
    const queues = await this.store.queues();
    const perQueue = await Promise.all(
      queues.map(async (queue) => {
        const from = positions[queue];
        const entries = await this.store.range(this.store.streamKey(queue), from === undefined ? "0-0" : after(from), limit);
        return entries.map((entry) => ({ queue, entry }));
      }),
    );
    // Every queue's entries are in stream order already; sorting the union by stream id keeps
    // that order, so the first `limit` take a prefix of each queue's entries.
    const merged = perQueue.flat().sort((a, b) => compareIds(a.entry[0], b.entry[0]) || (a.queue < b.queue ? -1 : a.queue > b.queue ? 1 : 0));
    const events: QueueEvent[] = [];
    const current: Positions = { ...positions };
    for (const { queue, entry } of merged.slice(0, limit)) {
      current[queue] = entry[0];
      events.push({ id: encodeCursor(current), ...eventOf(queue, entry) });
    }
    return { events, cursor: events.length > 0 ? events[events.length - 1]!.id : cursor };
  }

  async latestEventCursor(): Promise<string> {
    const queues = await this.store.queues();
    const last = await Promise.all(queues.map(async (queue) => [queue, await this.store.lastId(this.store.streamKey(queue))] as const));
    const positions: Positions = {};
    for (const [queue, id] of last) if (id !== null) positions[queue] = id;
    return encodeCursor(positions);
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
