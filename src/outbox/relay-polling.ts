/**
 * Poll mode: the relay reads committed events from the outbox table.
 *
 * PostgreSQL: each round is one transaction. The claim statement locks a batch with
 * `FOR UPDATE SKIP LOCKED`, taking for each key only its HEAD (no earlier event of the key is
 * still in the table) and then the events behind heads it locked. A second relay therefore skips
 * a key whose head another relay holds (its head is locked, the rest are not heads), so relays
 * running side by side never reorder a key and never take one event twice. After the target
 * confirmed, one statement deletes the published rows and moves the refused ones to
 * `outbox_dead`, and COMMIT releases the locks. A relay that dies mid-round leaves nothing
 * behind: its transaction aborts and the rows are claimable again (published again, the one
 * redelivery). Idle relays sleep on LISTEN; publish() NOTIFYs at commit. The relay overlaps two
 * rounds (the next claim runs while the target confirms the current batch): the source passes
 * its own open batches' seqs to the claim, which counts them as held by this relay.
 *
 * SQLite: one writer at a time, and a publish cannot run inside a write transaction without
 * stopping every writer for its duration. So one relay per database publishes, holding a lease
 * row in `outbox_relay` (renewed every round); others wait as standbys and take over once it
 * expires. Rows are deleted after the target confirmed, in one short transaction; a claim made
 * while a batch is open skips that batch's rows.
 */
import { readFileSync } from "node:fs";
import type Database from "better-sqlite3";
import pg from "pg";
import type { Pool, PoolClient } from "pg";
import { ConveyorError, InvalidInputError } from "../core/errors.js";
import { newWorkerId } from "../core/ids.js";
import { consoleLogger, silentLogger, type Logger } from "../core/logger.js";
import { NotificationListener } from "../backend/postgres/listener.js";
import { planOnce } from "../backend/sqlite/stable-plans.js";
import { parseHeaders, type OutboxEvent } from "./event.js";
import { checkPrefix, checkSchema, outboxChannel, quoteIdent } from "./names.js";
import { setAsideReason, type ClaimedBatch, type OutboxSource, type RejectedEvent, type SourceHooks, type SourceLag } from "./relay.js";
import { storableText } from "../backend/postgres/text.js";
import { explainMissingTable } from "./writer.js";
import { shown } from "../core/checks.js";

/** Options of {@link PostgresPollSource}. Give `connectionString` or `pool`. */
export interface PostgresPollSourceOptions {
  connectionString?: string;
  /**
   * Your own pool (never ended by the relay); it needs 3 free connections (LISTEN, and two rounds'
   * transactions: the relay claims the next batch while the previous one is recorded).
   */
  pool?: Pool;
  /** Schema of Conveyor's tables. Default `"conveyor"`. */
  schema?: string;
  /** Relay only these topics (and order keys among them only). Default: every topic. */
  topics?: readonly string[];
  logger?: Logger;
}

/** One row as the claim statement returns it. */
interface OutboxRow {
  seq: string;
  id: string;
  topic: string;
  key: string | null;
  payload: string;
  headers: string | null;
  created_at: string;
}

const statements = new Map<string, string>();
function sqlFile(name: string): string {
  let text = statements.get(name);
  if (text === undefined) {
    text = readFileSync(new URL(`./queries/${name}.sql`, import.meta.url), "utf8");
    statements.set(name, text);
  }
  return text;
}

function toEvent(row: OutboxRow): OutboxEvent {
  return {
    id: row.id,
    seq: Number(row.seq),
    topic: row.topic,
    key: row.key,
    payloadText: row.payload,
    headers: parseHeaders(row.headers),
    createdAt: Number(row.created_at),
  };
}

export class PostgresPollSource implements OutboxSource {
  readonly description: string;
  readonly defaultPollIntervalMs = 1_000;
  readonly schema: string;
  private readonly pool: Pool;
  private readonly ownsPool: boolean;
  private readonly topics: string[] | null;
  private readonly logger: Logger;
  private readonly claimSql: string;
  private readonly settleSql: string;
  private readonly lagSql: string;
  private listener: NotificationListener | null = null;
  /** seq of the events of this source's open batches (claimed, not yet settled or abandoned). */
  private readonly held = new Set<number>();

  constructor(options: PostgresPollSourceOptions) {
    this.schema = checkSchema(options.schema ?? "conveyor");
    if (options.pool) {
      this.pool = options.pool;
      this.ownsPool = false;
    } else if (options.connectionString) {
      // LISTEN holds one connection; the relay's rounds overlap, so two batches' transactions are open at once.
      this.pool = new pg.Pool({ connectionString: options.connectionString, max: 4, application_name: "conveyor-relay" });
      // Errors of idle connections (a server restart) surface here; the next round reconnects.
      this.pool.on("error", () => undefined);
      this.ownsPool = true;
    } else {
      throw new InvalidInputError("PostgresPollSource needs { connectionString } or { pool }");
    }
    this.topics = options.topics && options.topics.length > 0 ? [...options.topics] : null;
    this.logger = options.logger ?? consoleLogger();
    const s = quoteIdent(this.schema);
    this.claimSql = sqlFile("poll-claim").replaceAll("{{schema}}", s);
    this.settleSql = sqlFile("poll-settle").replaceAll("{{schema}}", s);
    this.lagSql = sqlFile("poll-lag").replaceAll("{{schema}}", s);
    this.description = `postgres:${describe(this.pool)}/${this.schema}.outbox`;
  }

  async start(hooks: SourceHooks): Promise<void> {
    // Fail fast on a missing table rather than in the loop.
    await this.pool.query(`SELECT 1 FROM ${quoteIdent(this.schema)}.outbox LIMIT 0`).catch((error: unknown) => {
      throw explainMissingTable(error, `${this.schema}.outbox`);
    });
    this.listener = new NotificationListener({
      pool: this.pool,
      channel: outboxChannel(this.schema),
      onNotify: () => hooks.wake(),
      onListening: () => hooks.wake(),
      logger: this.logger === silentLogger ? silentLogger : this.logger,
      description: this.description,
    });
    this.listener.start();
  }

  async claim(limit: number): Promise<ClaimedBatch | null> {
    const client = await this.pool.connect();
    let open = false;
    try {
      await client.query("BEGIN");
      open = true;
      const { rows } = await client.query<OutboxRow>(this.claimSql, [limit, this.topics, [...this.held]]);
      if (rows.length === 0) {
        await client.query("COMMIT");
        client.release();
        return null;
      }
      const events = rows.map(toEvent);
      for (const e of events) this.held.add(e.seq);
      return new PostgresBatch(client, events, this.settleSql, () => {
        for (const e of events) this.held.delete(e.seq);
      });
    } catch (error) {
      if (open) await client.query("ROLLBACK").catch(() => undefined);
      client.release(error instanceof Error ? error : true);
      throw error;
    }
  }

  async lag(): Promise<SourceLag> {
    const { rows } = await this.pool.query<{ age_ms: string | null; backlog: string }>(this.lagSql, [this.topics]);
    const row = rows[0];
    return {
      oldestUnpublishedAgeMs: row?.age_ms == null ? null : Math.max(0, Number(row.age_ms)),
      backlog: row ? Number(row.backlog) : 0,
      slotLagBytes: null,
    };
  }

  async close(): Promise<void> {
    await this.listener?.stop();
    this.listener = null;
    if (this.ownsPool) await this.pool.end();
  }
}

class PostgresBatch implements ClaimedBatch {
  private done = false;
  constructor(
    private readonly client: PoolClient,
    readonly events: readonly OutboxEvent[],
    private readonly settleSql: string,
    /** Called once the batch's transaction is over (its events no longer held). */
    private readonly onClosed: () => void,
  ) {}

  async settle(published: readonly OutboxEvent[], rejected: readonly RejectedEvent[], target: string): Promise<void> {
    if (this.done) throw new ConveyorError("outbox batch settled twice");
    this.done = true;
    try {
      await this.client.query(this.settleSql, [
        published.map((e) => e.seq),
        rejected.map((r) => r.event.seq),
        // PostgreSQL refuses U+0000 in text: a reason holding one failed the whole settle, round after round.
        rejected.map((r) => storableText(setAsideReason(r))),
        target,
      ]);
      await this.client.query("COMMIT");
      this.client.release();
    } catch (error) {
      await this.client.query("ROLLBACK").catch(() => undefined);
      this.client.release(error instanceof Error ? error : true);
      throw error;
    } finally {
      this.onClosed();
    }
  }

  async abandon(): Promise<void> {
    if (this.done) return;
    this.done = true;
    try {
      await this.client.query("ROLLBACK");
      this.client.release();
    } catch (error) {
      this.client.release(error instanceof Error ? error : true);
    } finally {
      this.onClosed();
    }
  }
}

/** Options of {@link SqlitePollSource}. */
export interface SqlitePollSourceOptions {
  /** The database file (the SqliteBackend's `path`). */
  path: string;
  /** Table prefix of Conveyor's tables. Default `"conveyor_"`. */
  tablePrefix?: string;
  /** Relay only these topics. Default: every topic. */
  topics?: readonly string[];
  /**
   * How long a relay's turn lasts without renewal, in ms. Default 30000. A standby takes over
   * once it passes; a round (claim, publish, delete) must finish well within it.
   */
  leaseMs?: number;
  /** Name of the relay role, so independent relays (say, one per topic set) do not exclude each other. Default `"default"`. */
  relayName?: string;
  /** How long to wait for SQLite's write lock, in ms. Default 5000. */
  busyTimeoutMs?: number;
}

interface SqliteRow {
  seq: number;
  id: string;
  topic: string;
  key: string | null;
  payload: string;
  headers: string | null;
  created_at: number;
}

export class SqlitePollSource implements OutboxSource {
  readonly description: string;
  readonly defaultPollIntervalMs = 100;
  private readonly path: string;
  private readonly prefix: string;
  private readonly topics: string[] | null;
  private readonly leaseMs: number;
  private readonly relayName: string;
  private readonly busyTimeoutMs: number;
  private readonly holder = newWorkerId();
  private db: Database.Database | null = null;
  /** seq of the events of this relay's open batches (claimed, not yet settled or abandoned). */
  private readonly held = new Set<number>();

  constructor(options: SqlitePollSourceOptions) {
    if (typeof options?.path !== "string" || options.path === "" || options.path === ":memory:") {
      throw new InvalidInputError("SqlitePollSource needs { path }: the database file your application writes (not :memory:)");
    }
    this.path = options.path;
    this.prefix = checkPrefix(options.tablePrefix ?? "conveyor_");
    this.topics = options.topics && options.topics.length > 0 ? [...options.topics] : null;
    this.leaseMs = options.leaseMs ?? 30_000;
    if (!Number.isInteger(this.leaseMs) || this.leaseMs < 1_000)
      throw new InvalidInputError(`leaseMs must be an integer >= 1000; got ${shown(options.leaseMs)}`);
    this.relayName = options.relayName ?? "default";
    this.busyTimeoutMs = options.busyTimeoutMs ?? 5_000;
    this.description = `sqlite:${options.path}`;
  }

  async start(): Promise<void> {
    const { default: DatabaseCtor } = await import("better-sqlite3");
    // Its batch read takes its LIMIT from a parameter: planned once (stable-plans.ts).
    const db = planOnce(new DatabaseCtor(this.path, { timeout: this.busyTimeoutMs, fileMustExist: true }));
    db.pragma("journal_mode = WAL");
    try {
      db.prepare(`SELECT 1 FROM ${this.prefix}outbox LIMIT 0`).all();
    } catch (error) {
      db.close();
      throw explainMissingTable(error, `${this.prefix}outbox`);
    }
    this.db = db;
  }

  private database(): Database.Database {
    if (this.db === null) throw new ConveyorError("the SQLite outbox source is not started");
    return this.db;
  }

  /** Takes or renews this relay's turn; false while another relay holds it. */
  private holdTurn(db: Database.Database): boolean {
    const now = Date.now();
    const row = db
      .prepare(
        `INSERT INTO ${this.prefix}outbox_relay (name, holder, expires_at) VALUES (?, ?, ?)
         ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
           WHERE ${this.prefix}outbox_relay.holder = excluded.holder OR ${this.prefix}outbox_relay.expires_at < ?
         RETURNING holder`,
      )
      .get(this.relayName, this.holder, now + this.leaseMs, now) as { holder: string } | undefined;
    return row?.holder === this.holder;
  }

  async claim(limit: number): Promise<ClaimedBatch | null> {
    const db = this.database();
    if (!this.holdTurn(db)) return null;
    const topicFilter = this.topics === null ? "" : `WHERE topic IN (SELECT value FROM json_each(?))`;
    // Rows of this relay's open batch (claimed ahead of its settle) are still in the table: skip them.
    const held = this.held;
    const params: unknown[] = this.topics === null ? [limit + held.size] : [JSON.stringify(this.topics), limit + held.size];
    const rows = (
      db
        .prepare(`SELECT seq, id, topic, key, payload, headers, created_at FROM ${this.prefix}outbox ${topicFilter} ORDER BY seq LIMIT ?`)
        .all(...params) as SqliteRow[]
    )
      .filter((r) => !held.has(r.seq))
      .slice(0, limit);
    if (rows.length === 0) return null;
    const events = rows.map((r) => toEvent({ ...r, seq: String(r.seq), created_at: String(r.created_at) }));
    for (const e of events) held.add(e.seq);
    const release = () => {
      for (const e of events) held.delete(e.seq);
    };
    const prefix = this.prefix;
    return {
      events,
      abandon: async () => release(),
      settle: async (published, rejected, target) => {
        const del = db.prepare(`DELETE FROM ${prefix}outbox WHERE seq = ?`);
        const dead = db.prepare(
          `INSERT OR REPLACE INTO ${prefix}outbox_dead (id, topic, key, payload, headers, created_at, failed_at, target, error)
           SELECT id, topic, key, payload, headers, created_at, ?, ?, ? FROM ${prefix}outbox WHERE seq = ?`,
        );
        try {
          db.transaction(() => {
            const now = Date.now();
            for (const r of rejected) dead.run(now, target, setAsideReason(r), r.event.seq);
            for (const e of published) del.run(e.seq);
            for (const r of rejected) del.run(r.event.seq);
          }).immediate();
        } finally {
          release();
        }
      },
    };
  }

  async lag(): Promise<SourceLag> {
    const db = this.database();
    const topicFilter = this.topics === null ? "" : `WHERE topic IN (SELECT value FROM json_each(?))`;
    const params = this.topics === null ? [] : [JSON.stringify(this.topics)];
    const row = db.prepare(`SELECT min(created_at) AS oldest, count(*) AS backlog FROM ${this.prefix}outbox ${topicFilter}`).get(...params) as {
      oldest: number | null;
      backlog: number;
    };
    return { oldestUnpublishedAgeMs: row.oldest === null ? null : Math.max(0, Date.now() - row.oldest), backlog: row.backlog, slotLagBytes: null };
  }

  async close(): Promise<void> {
    const db = this.db;
    this.db = null;
    if (db === null) return;
    // Hand the turn over at once instead of making a standby wait out the lease.
    try {
      db.prepare(`DELETE FROM ${this.prefix}outbox_relay WHERE name = ? AND holder = ?`).run(this.relayName, this.holder);
    } finally {
      db.close();
    }
  }
}

/** `host:port/database` of a pool, never its password. */
function describe(pool: Pool): string {
  const o = pool.options as { host?: string; port?: number; database?: string; connectionString?: string };
  if (o.connectionString) {
    try {
      const u = new URL(o.connectionString);
      return `${u.hostname}:${u.port || 5432}${u.pathname}`;
    } catch {
      return "(connection string)";
    }
  }
  return `${o.host ?? "localhost"}:${o.port ?? 5432}/${o.database ?? ""}`;
}
