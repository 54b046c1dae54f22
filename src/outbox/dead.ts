/**
 * The outbox's set-aside events (its dead letters): events a target refused for good, kept with
 * the refusal until an operator replays them (back into the outbox, behind the events of their key
 * that are waiting) or deletes them. `conveyor relay dead …` and the HTTP API use this.
 */
import type Database from "better-sqlite3";
import { InvalidInputError } from "../core/errors.js";
import { parseHeaders, type DeadOutboxEvent } from "./event.js";
import { checkPrefix, checkSchema, outboxChannel, quoteIdent } from "./names.js";
import type { SqlExecutor } from "./writer.js";
import { shown } from "../core/checks.js";

interface DeadRow {
  id: string;
  topic: string;
  key: string | null;
  payload: string;
  headers: string | null;
  created_at: string | number;
  failed_at: string | number;
  target: string;
  error: string;
}

function toDead(row: DeadRow): DeadOutboxEvent {
  return {
    id: row.id,
    topic: row.topic,
    key: row.key,
    payloadText: row.payload,
    headers: parseHeaders(row.headers),
    createdAt: Number(row.created_at),
    failedAt: Number(row.failed_at),
    target: row.target,
    error: row.error,
  };
}

/** Page through set-aside events, newest first. */
export interface DeadListOptions {
  /** At most this many. Default 50, at most 1000. */
  limit?: number;
}

function checkLimit(limit: number | undefined): number {
  const value = limit ?? 50;
  if (!Number.isInteger(value) || value < 1 || value > 1000) throw new InvalidInputError(`limit must be an integer from 1 to 1000; got ${shown(limit)}`);
  return value;
}

function checkIds(ids: readonly string[]): string[] {
  if (!isList(ids) || ids.length === 0 || ids.length > 1000 || ids.some((id) => typeof id !== "string" || id.length === 0 || id.length > 255)) {
    throw new InvalidInputError("give 1 to 1000 outbox event ids (non-empty strings)");
  }
  return ids.slice();
}

/** Array.isArray without narrowing a typed list to any[] (ids may come from an HTTP body). */
function isList(value: unknown): value is readonly string[] {
  return Array.isArray(value);
}

/** Set-aside events of one outbox. Build it with `OutboxDeadLetters.postgres` or `.sqlite`. */
export interface OutboxDeadLetters {
  readonly description: string;
  list(options?: DeadListOptions): Promise<DeadOutboxEvent[]>;
  get(id: string): Promise<DeadOutboxEvent | null>;
  count(): Promise<number>;
  /** Moves the events back into the outbox (new position: behind what waits for their key). Returns the ids moved. */
  replay(ids: readonly string[]): Promise<string[]>;
  /** Deletes them for good. Returns the ids deleted. */
  remove(ids: readonly string[]): Promise<string[]>;
}

export const OutboxDeadLetters = {
  /** `db`: a pg Pool or Client (each call is one statement, atomic on its own). */
  postgres(db: SqlExecutor, options: { schema?: string } = {}): OutboxDeadLetters {
    const schema = checkSchema(options.schema ?? "conveyor");
    const s = quoteIdent(schema);
    const rows = async <R>(text: string, params: unknown[]) => ((await db.query(text, params)) as { rows: R[] }).rows;
    const columns = `id, topic, key, payload::text AS payload, headers::text AS headers, created_at, failed_at, target, error`;
    return {
      description: `postgres ${schema}.outbox_dead`,
      list: async (o = {}) =>
        (await rows<DeadRow>(`SELECT ${columns} FROM ${s}.outbox_dead ORDER BY failed_at DESC, id DESC LIMIT $1`, [checkLimit(o.limit)])).map(toDead),
      get: async (id) => {
        const found = await rows<DeadRow>(`SELECT ${columns} FROM ${s}.outbox_dead WHERE id = $1`, [id]);
        return found[0] ? toDead(found[0]) : null;
      },
      count: async () => Number((await rows<{ n: string }>(`SELECT count(*)::text AS n FROM ${s}.outbox_dead`, []))[0]?.n ?? 0),
      replay: async (ids) =>
        (
          await rows<{ id: string }>(
            `WITH moved AS (DELETE FROM ${s}.outbox_dead WHERE id = ANY ($1::text[]) RETURNING id, topic, key, payload, headers, created_at),
                  back AS (INSERT INTO ${s}.outbox (id, topic, key, payload, headers, created_at)
                           SELECT id, topic, key, payload, headers, created_at FROM moved ORDER BY created_at, id RETURNING id)
             SELECT id, pg_notify(${`'${outboxChannel(schema)}'`}, 'outbox') AS notified FROM back`,
            [checkIds(ids)],
          )
        ).map((r) => r.id),
      remove: async (ids) =>
        (await rows<{ id: string }>(`DELETE FROM ${s}.outbox_dead WHERE id = ANY ($1::text[]) RETURNING id`, [checkIds(ids)])).map((r) => r.id),
    };
  },

  /** `db`: a better-sqlite3 handle on the application's database. */
  sqlite(db: Database.Database, options: { tablePrefix?: string } = {}): OutboxDeadLetters {
    const p = checkPrefix(options.tablePrefix ?? "conveyor_");
    const columns = `id, topic, key, payload, headers, created_at, failed_at, target, error`;
    const inList = (ids: string[]) => `(${ids.map(() => "?").join(", ")})`;
    return {
      description: `sqlite ${p}outbox_dead`,
      list: async (o = {}) =>
        (db.prepare(`SELECT ${columns} FROM ${p}outbox_dead ORDER BY failed_at DESC, id DESC LIMIT ?`).all(checkLimit(o.limit)) as DeadRow[]).map(toDead),
      get: async (id) => {
        const row = db.prepare(`SELECT ${columns} FROM ${p}outbox_dead WHERE id = ?`).get(id) as DeadRow | undefined;
        return row ? toDead(row) : null;
      },
      count: async () => (db.prepare(`SELECT count(*) AS n FROM ${p}outbox_dead`).get() as { n: number }).n,
      replay: async (given) => {
        const ids = checkIds(given);
        return db
          .transaction(() => {
            const found = db.prepare(`SELECT id FROM ${p}outbox_dead WHERE id IN ${inList(ids)} ORDER BY created_at, id`).all(...ids) as Array<{ id: string }>;
            const moved = found.map((r) => r.id);
            if (moved.length === 0) return moved;
            db.prepare(
              `INSERT INTO ${p}outbox (id, topic, key, payload, headers, created_at)
             SELECT id, topic, key, payload, headers, created_at FROM ${p}outbox_dead WHERE id IN ${inList(moved)} ORDER BY created_at, id`,
            ).run(...moved);
            db.prepare(`DELETE FROM ${p}outbox_dead WHERE id IN ${inList(moved)}`).run(...moved);
            return moved;
          })
          .immediate();
      },
      remove: async (given) => {
        const ids = checkIds(given);
        return (db.prepare(`DELETE FROM ${p}outbox_dead WHERE id IN ${inList(ids)} RETURNING id`).all(...ids) as Array<{ id: string }>).map((r) => r.id);
      },
    };
  },
};
