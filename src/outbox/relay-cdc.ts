/**
 * cdc mode: the relay reads committed outbox inserts from PostgreSQL's write-ahead log through
 * logical replication with the built-in `pgoutput` plugin — a publication on the outbox table
 * (inserts only) and a named replication slot. No polling query touches the table.
 *
 * The WAL delivers transactions in commit order, so one key's events arrive in commit order.
 * The relay confirms a commit's LSN to PostgreSQL (the slot's `confirmed_flush_lsn`) only after
 * the target confirmed every event of that transaction and of every transaction before it (and
 * set-aside events are stored in `outbox_dead`): a relay that dies, or a PostgreSQL restart,
 * resumes from the slot with nothing lost; events published but not yet confirmed to PostgreSQL
 * are published again (the redelivery). Published rows are deleted from the table just before
 * their LSN is confirmed.
 *
 * A slot holds back WAL until it is confirmed: an abandoned slot fills the disk. lag() reports
 * the retained WAL, and the relay warns once it passes `maxRetainedWalBytes`; `teardown` (or
 * `conveyor relay --mode cdc --teardown`) drops the slot and publication of a relay that is gone.
 */
import pg from "pg";
import type { Pool } from "pg";
import type { Pgoutput } from "pg-logical-replication";

type Message = Pgoutput.Message;
type MessageInsert = Pgoutput.MessageInsert;
import { toError } from "../core/checks.js";
import { ConveyorError, InvalidInputError } from "../core/errors.js";
import { parseHeaders, type OutboxEvent } from "./event.js";
import { checkSchema, quoteIdent } from "./names.js";
import { setAsideReason, type ClaimedBatch, type OutboxSource, type RejectedEvent, type SourceHooks, type SourceLag } from "./relay.js";
import { storableText } from "../backend/postgres/text.js";
import { shown } from "../core/checks.js";

/** Options of {@link CdcSource}. */
export interface CdcSourceOptions {
  /** The database (the role needs REPLICATION, or to own the slot). */
  connectionString: string;
  /** Schema of Conveyor's tables. Default `"conveyor"`. */
  schema?: string;
  /** Replication slot name. Default `conveyor_outbox_<schema>`. */
  slot?: string;
  /** Publication name. Default `conveyor_outbox_<schema>`. */
  publication?: string;
  /** Relay only these topics (others are confirmed and dropped from the table by their own relay). Default every topic. */
  topics?: readonly string[];
  /** Warn when the slot holds back more WAL than this, in bytes. Default 1073741824 (1 GiB). */
  maxRetainedWalBytes?: number;
  /** Events decoded but not yet published that the relay buffers before pausing the stream. Default 10000. */
  maxBufferedEvents?: number;
  /** How often retained WAL is checked for the warning, in ms. Default 30000. */
  walCheckIntervalMs?: number;
}

const NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/** An LSN `X/Y` as a number of bytes (WAL positions stay far below 2^53 in practice). */
export function lsnToBigInt(lsn: string): bigint {
  const [hi, lo] = lsn.split("/");
  return (BigInt(`0x${hi}`) << 32n) + BigInt(`0x${lo}`);
}

function bigIntToLsn(value: bigint): string {
  return `${(value >> 32n).toString(16).toUpperCase()}/${(value & 0xffffffffn).toString(16).toUpperCase()}`;
}

interface PendingEvent {
  event: OutboxEvent;
  commit: CommitRecord;
  inFlight: boolean;
}

interface CommitRecord {
  endLsn: bigint;
  /** The transaction's id (32 bits, as pgoutput sends it). */
  xid: number;
  outstanding: number;
}

/** How long published rows may stay invisible to the relay's deletes before it warns, in ms. */
const INVISIBLE_WARN_MS = 2_000;

/** The wal_level is not logical: say what to change. */
export class WalLevelError extends ConveyorError {
  override name = "WalLevelError";
}

export class CdcSource implements OutboxSource {
  readonly description: string;
  readonly defaultPollIntervalMs = 1_000;
  readonly schema: string;
  readonly slot: string;
  readonly publication: string;
  private readonly connectionString: string;
  private readonly topics: Set<string> | null;
  private readonly maxRetainedWalBytes: number;
  private readonly maxBufferedEvents: number;
  private readonly walCheckIntervalMs: number;
  private readonly pool: Pool;
  private hooks: SourceHooks | null = null;
  private service: import("pg-logical-replication").LogicalReplicationService | null = null;
  private running = false;
  /** Bumped on every (re)connect: batches of an older stream are not confirmed. */
  private generation = 0;
  private pending: PendingEvent[] = [];
  private commits: CommitRecord[] = [];
  private current: { xid: number; events: OutboxEvent[] } | null = null;
  private confirmedLsn = 0n;
  private drainWaiters: Array<() => void> = [];
  /** The batch being recorded in the background (rows deleted, LSN confirmed); never rejects. */
  private recording: Promise<void> = Promise.resolve();
  private walTimer: NodeJS.Timeout | null = null;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private reconnectFailures = 0;
  private lastWarnedRetained = 0;

  constructor(options: CdcSourceOptions) {
    if (typeof options?.connectionString !== "string" || options.connectionString === "") {
      throw new InvalidInputError("CdcSource needs { connectionString }");
    }
    this.schema = checkSchema(options.schema ?? "conveyor");
    this.slot = options.slot ?? `conveyor_outbox_${this.schema}`;
    this.publication = options.publication ?? `conveyor_outbox_${this.schema}`;
    for (const [field, value] of [
      ["slot", this.slot],
      ["publication", this.publication],
    ] as const) {
      if (!NAME.test(value))
        throw new InvalidInputError(`${field} must be lower-case letters, digits and _ (at most 63), not starting with a digit; got ${shown(value)}`);
    }
    this.connectionString = options.connectionString;
    this.topics = options.topics && options.topics.length > 0 ? new Set(options.topics) : null;
    this.maxRetainedWalBytes = options.maxRetainedWalBytes ?? 1024 * 1024 * 1024;
    this.maxBufferedEvents = options.maxBufferedEvents ?? 10_000;
    this.walCheckIntervalMs = options.walCheckIntervalMs ?? 30_000;
    this.pool = new pg.Pool({ connectionString: this.connectionString, max: 2, application_name: "conveyor-relay-cdc" });
    this.pool.on("error", () => undefined);
    const u = new URL(this.connectionString);
    this.description = `postgres-cdc:${u.hostname}:${u.port || 5432}${u.pathname}/${this.slot}`;
  }

  /** Creates the publication and the slot (idempotent). Checks wal_level first. */
  async setup(): Promise<{ created: string[] }> {
    await this.checkWalLevel();
    const created: string[] = [];
    const pub = await this.pool.query("SELECT 1 FROM pg_publication WHERE pubname = $1", [this.publication]);
    if (pub.rowCount === 0) {
      await this.pool.query(`CREATE PUBLICATION ${quoteIdent(this.publication)} FOR TABLE ${quoteIdent(this.schema)}.outbox WITH (publish = 'insert')`);
      created.push(`publication ${this.publication}`);
    }
    const slot = await this.pool.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = $1", [this.slot]);
    if (slot.rowCount === 0) {
      await this.pool.query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", [this.slot]);
      created.push(`slot ${this.slot}`);
    }
    return { created };
  }

  /** Drops the slot and the publication (frees the WAL the slot holds). The relay must be stopped. */
  async teardown(): Promise<{ dropped: string[] }> {
    const dropped: string[] = [];
    const slot = await this.pool.query<{ active: boolean }>("SELECT active FROM pg_replication_slots WHERE slot_name = $1", [this.slot]);
    if (slot.rows[0]) {
      if (slot.rows[0].active) throw new ConveyorError(`replication slot ${this.slot} is in use by a running relay; stop it first`);
      await this.pool.query("SELECT pg_drop_replication_slot($1)", [this.slot]);
      dropped.push(`slot ${this.slot}`);
    }
    const pub = await this.pool.query("SELECT 1 FROM pg_publication WHERE pubname = $1", [this.publication]);
    if (pub.rowCount !== 0) {
      await this.pool.query(`DROP PUBLICATION ${quoteIdent(this.publication)}`);
      dropped.push(`publication ${this.publication}`);
    }
    return { dropped };
  }

  private async checkWalLevel(): Promise<void> {
    const { rows } = await this.pool.query<{ wal_level: string }>("SHOW wal_level");
    const level = rows[0]?.wal_level;
    if (level !== "logical") {
      throw new WalLevelError(
        `cdc mode needs wal_level = logical, and this server runs wal_level = ${level}: set it in postgresql.conf ` +
          `(or ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL; max_replication_slots and max_wal_senders ` +
          `must be at least 1 (the defaults are 10). Or relay with --mode poll, which needs none of this`,
      );
    }
  }

  async start(hooks: SourceHooks): Promise<void> {
    await this.checkWalLevel();
    const { rows } = await this.pool.query<{ confirmed: string | null }>(
      "SELECT confirmed_flush_lsn::text AS confirmed FROM pg_replication_slots WHERE slot_name = $1 AND plugin = 'pgoutput'",
      [this.slot],
    );
    if (rows.length === 0) {
      throw new ConveyorError(
        `replication slot ${this.slot} does not exist: create it with \`conveyor relay --mode cdc --setup --db …\` (or CdcSource.setup())`,
      );
    }
    const pub = await this.pool.query("SELECT 1 FROM pg_publication WHERE pubname = $1", [this.publication]);
    if (pub.rowCount === 0) throw new ConveyorError(`publication ${this.publication} does not exist: run \`conveyor relay --mode cdc --setup --db …\``);
    this.confirmedLsn = rows[0]?.confirmed ? lsnToBigInt(rows[0].confirmed) : 0n;
    this.hooks = hooks;
    this.running = true;
    await this.connect();
    this.walTimer = setInterval(() => void this.checkRetainedWal(), this.walCheckIntervalMs);
    this.walTimer.unref();
  }

  private async connect(): Promise<void> {
    const { LogicalReplicationService, PgoutputPlugin } = await import("pg-logical-replication");
    const generation = ++this.generation;
    // Whatever was decoded but not confirmed comes again from the slot.
    this.pending = [];
    this.commits = [];
    this.current = null;
    for (const wake of this.drainWaiters.splice(0)) wake();
    const service = new LogicalReplicationService(
      { connectionString: this.connectionString, application_name: "conveyor-relay-cdc" },
      { acknowledge: { auto: false, timeoutSeconds: 0 }, flowControl: { enabled: true } },
    );
    this.service = service;
    service.on("data", (lsn: string, message: Message) => this.onMessage(generation, lsn, message));
    service.on("heartbeat", (lsn: string, _time: number, shouldRespond: boolean) => {
      if (this.generation !== generation) return;
      // With nothing decoded and unconfirmed (no open transaction, no pending commit, nothing
      // queued in the library), everything up to the keepalive's WAL end is handled: confirm it.
      // Otherwise the slot would keep WAL of other tables' traffic forever, and a fast shutdown
      // would wait for us: the walsender exits only once its client flushed all it was sent.
      if (this.commits.length === 0 && this.current === null && this.libraryIdle(service)) {
        const end = lsnToBigInt(lsn);
        if (end > this.confirmedLsn) this.confirmedLsn = end;
      }
      // Answer keepalives with what is confirmed, never more: wal_sender_timeout would drop us.
      if (shouldRespond) void this.acknowledge();
    });
    service.on("error", (error: Error) => {
      if (this.generation !== generation || !this.running) return;
      this.scheduleReconnect(error);
    });
    const plugin = new (keepJsonText(PgoutputPlugin))({ protoVersion: 1, publicationNames: [this.publication] });
    const started = new Promise<void>((resolve) => service.once("start", () => resolve()));
    const streaming = service.subscribe(plugin, this.slot, bigIntToLsn(this.confirmedLsn));
    streaming.then(
      () => {
        if (this.generation === generation && this.running) this.scheduleReconnect(new Error("the replication stream ended"));
      },
      (error: unknown) => {
        if (this.generation === generation && this.running) this.scheduleReconnect(toError(error));
      },
    );
    await Promise.race([
      started,
      streaming.then(() => {
        throw new ConveyorError("the replication stream ended before it started");
      }),
    ]);
    this.reconnectFailures = 0;
  }

  /** True when pg-logical-replication holds no decoded message we have not seen yet. */
  private libraryIdle(service: object): boolean {
    // Its flow-control queue is private; keepalives bypass it, so check it is empty before
    // treating a keepalive's position as handled.
    const internal = service as { _messageQueue?: unknown[]; _processing?: boolean };
    return (internal._messageQueue?.length ?? 0) === 0 && internal._processing !== true;
  }

  private scheduleReconnect(error: Error, message = "cdc: the replication connection was lost; reconnecting"): void {
    if (this.reconnectTimer !== null || !this.running) return;
    this.generation++;
    const old = this.service;
    this.service = null;
    void old?.destroy().catch(() => undefined);
    this.reconnectFailures++;
    const delay = Math.floor(Math.random() * Math.min(10_000, 100 * 2 ** Math.min(this.reconnectFailures, 10))) + 50;
    this.hooks?.warn(message, { error: error.message, delayMs: delay });
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      if (!this.running) return;
      this.connect().catch((e: unknown) => this.scheduleReconnect(toError(e)));
    }, delay);
  }

  private async onMessage(generation: number, _lsn: string, message: Message): Promise<void> {
    if (generation !== this.generation) return;
    switch (message.tag) {
      case "begin":
        this.current = { xid: message.xid, events: [] };
        return;
      case "insert": {
        if (this.current === null || message.relation.schema !== this.schema || message.relation.name !== "outbox") return;
        const event = toEvent(message);
        if (this.topics === null || this.topics.has(event.topic)) this.current.events.push(event);
        return;
      }
      case "commit": {
        const endLsn = lsnToBigInt(message.commitEndLsn ?? "0/0");
        const events = this.current?.events ?? [];
        const xid = this.current?.xid ?? 0;
        this.current = null;
        const commit: CommitRecord = { endLsn, xid, outstanding: events.length };
        this.commits.push(commit);
        for (const event of events) this.pending.push({ event, commit, inFlight: false });
        if (events.length === 0) await this.advance();
        else this.hooks?.wake();
        // Backpressure: the stream pauses while this handler waits (flow control).
        if (this.pending.length >= this.maxBufferedEvents) {
          await new Promise<void>((resolve) => this.drainWaiters.push(resolve));
        }
        return;
      }
      default:
        return;
    }
  }

  async claim(limit: number): Promise<ClaimedBatch | null> {
    const taken: PendingEvent[] = [];
    for (const p of this.pending) {
      if (taken.length >= limit) break;
      if (!p.inFlight) taken.push(p);
    }
    if (taken.length === 0) return null;
    for (const p of taken) p.inFlight = true;
    const generation = this.generation;
    return {
      events: taken.map((p) => p.event),
      settle: async (published, rejected, target) => {
        if (generation !== this.generation) return; // the stream restarted: these come again
        const byId = new Map(taken.map((p) => [p.event.id, p]));
        const handled = [...published, ...rejected.map((r) => r.event)].map((e) => byId.get(e.id)).filter((p) => p !== undefined);
        const done = new Set(handled);
        for (const p of taken) p.inFlight = false;
        this.pending = this.pending.filter((p) => !done.has(p));
        if (this.pending.length < this.maxBufferedEvents) for (const wake of this.drainWaiters.splice(0)) wake();
        // The batch is recorded (rows deleted, LSN confirmed) in the background while the relay
        // publishes the next one: the two take about as long on a PostgreSQL queue target, and
        // order is kept because the next batch is published only after this one was confirmed.
        // One batch is recorded at a time: wait for the previous one first.
        await this.recording;
        if (generation !== this.generation) return;
        this.recording = this.record(handled, rejected, target, generation);
      },
      abandon: async () => {
        for (const p of taken) p.inFlight = false;
      },
    };
  }

  /**
   * The database first: set-aside rows stored, published rows deleted; only then are their
   * commits done and the LSN confirmed, so rows are never left behind an LSN already confirmed,
   * where nothing would read them. A failure restarts the stream from the confirmed LSN: these
   * events and every later one are decoded and published again, in order (a redelivery).
   */
  private async record(handled: readonly PendingEvent[], rejected: readonly RejectedEvent[], target: string, generation: number): Promise<void> {
    try {
      if (rejected.length > 0) await this.setAside(rejected, target);
      await this.deleteRows(handled, generation);
    } catch (error) {
      if (generation === this.generation && this.running) {
        this.scheduleReconnect(toError(error), "cdc: recording published events in the outbox failed; replaying from the slot");
      }
      return;
    }
    if (generation !== this.generation) return;
    for (const p of handled) p.commit.outstanding--;
    await this.advance();
  }

  private async setAside(rejected: readonly RejectedEvent[], target: string): Promise<void> {
    const s = quoteIdent(this.schema);
    await this.pool.query(
      `INSERT INTO ${s}.outbox_dead (id, topic, key, payload, headers, created_at, failed_at, target, error)
       SELECT r.id, r.topic, r.key, r.payload::json, r.headers::json, r.created_at,
              floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint, $7, r.error
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $8::text[])
            AS r (id, topic, key, payload, headers, created_at, error)
       ON CONFLICT (id) DO UPDATE SET failed_at = excluded.failed_at, target = excluded.target, error = excluded.error`,
      [
        rejected.map((r) => r.event.id),
        rejected.map((r) => r.event.topic),
        rejected.map((r) => r.event.key),
        rejected.map((r) => r.event.payloadText),
        rejected.map((r) => (Object.keys(r.event.headers).length ? JSON.stringify(r.event.headers) : null)),
        rejected.map((r) => r.event.createdAt),
        target,
        // PostgreSQL refuses U+0000 in text: a reason holding one failed the whole settle, round after round.
        rejected.map((r) => storableText(setAsideReason(r))),
      ],
    );
  }

  /**
   * Deletes the rows of handled events (published, or stored in outbox_dead). The WAL sender
   * sends a transaction once its commit record is flushed, which is before the committing
   * backend leaves the proc array: for that moment — longer while its commit waits for a
   * synchronous standby, or its backend for a CPU — no other session sees the rows, and a
   * DELETE finds nothing to delete. Confirming the LSN then would leave the rows in the table
   * for good (no restarted relay decodes them again), counted as backlog and lag forever. So the
   * rows a DELETE missed are deleted again once their transactions are visible; any still
   * missing then were deleted already, by a relay that died before confirming (a redelivery).
   */
  private async deleteRows(events: readonly PendingEvent[], generation: number): Promise<void> {
    if (events.length === 0) return;
    // By seq, the primary key: a cheaper probe than the text id. The range too, so the plan
    // walks the key even on a table never analyzed (see poll-settle.sql).
    const sql = `DELETE FROM ${quoteIdent(this.schema)}.outbox WHERE seq = ANY ($1::bigint[]) AND seq BETWEEN $2 AND $3 RETURNING seq::text AS seq`;
    const params = (list: readonly PendingEvent[]) => {
      const seqs = list.map((p) => p.event.seq);
      return [seqs, Math.min(...seqs), Math.max(...seqs)];
    };
    const { rows } = await this.pool.query<{ seq: string }>(sql, params(events));
    if (rows.length === events.length) return;
    const deleted = new Set(rows.map((r) => Number(r.seq)));
    const missed = events.filter((p) => !deleted.has(p.event.seq));
    await this.awaitVisible(new Set(missed.map((p) => p.commit.xid)), generation);
    await this.pool.query(sql, params(missed));
  }

  /** Waits until no transaction of `xids` is still in progress for a new snapshot (the proc array). */
  private async awaitVisible(xids: ReadonlySet<number>, generation: number): Promise<void> {
    const started = Date.now();
    let warned = false;
    for (let attempt = 0; ; attempt++) {
      // pgoutput sends 32-bit xids, snapshots take 64-bit ones (epoch << 32 | xid): widen each
      // by its signed 32-bit distance from the snapshot's xmax (transactions in progress are
      // far closer than 2^31). An xid at or past xmax is not visible either, though not listed.
      const { rows } = await this.pool.query<{ xid: string }>(
        `WITH snapshot AS (SELECT s, pg_snapshot_xmax(s)::text::bigint AS xmax FROM pg_current_snapshot() AS s)
         SELECT x::text AS xid FROM snapshot, unnest($1::bigint[]) AS x
          WHERE NOT pg_visible_in_snapshot(
                  (xmax + (x - xmax % 4294967296 + 6442450944) % 4294967296 - 2147483648)::text::xid8, s)`,
        [[...xids]],
      );
      if (rows.length === 0) return;
      if (!this.running || generation !== this.generation) {
        throw new ConveyorError("cdc: the relay stopped or reconnected while waiting for published rows to become visible; they come again from the slot");
      }
      const waitedMs = Date.now() - started;
      if (!warned && waitedMs >= INVISIBLE_WARN_MS) {
        warned = true;
        this.hooks?.warn(
          `cdc: transactions decoded from the WAL are not visible yet to other sessions after ${waitedMs} ms; the relay deletes ` +
            `their published rows, and confirms their LSN, once they are (a commit waiting for a synchronous standby holds them)`,
          { xids: rows.map((r) => Number(r.xid)) },
        );
      }
      await new Promise((resolve) => setTimeout(resolve, Math.min(100, 2 ** attempt)));
    }
  }

  /** Confirms every commit whose events are all done, in order, to PostgreSQL. */
  private async advance(): Promise<void> {
    let moved = false;
    while (this.commits.length > 0 && this.commits[0]!.outstanding === 0) {
      this.confirmedLsn = this.commits.shift()!.endLsn;
      moved = true;
    }
    if (moved) await this.acknowledge();
  }

  private async acknowledge(): Promise<void> {
    if (this.confirmedLsn === 0n || this.service === null) return;
    // The library reports lsn + 1 as flushed; the slot's confirmed_flush_lsn becomes the commit's end.
    await this.service.acknowledge(bigIntToLsn(this.confirmedLsn - 1n)).catch(() => undefined);
  }

  private async checkRetainedWal(): Promise<void> {
    try {
      const lag = await this.lag();
      const retained = lag.slotLagBytes ?? 0;
      if (retained > this.maxRetainedWalBytes && retained > this.lastWarnedRetained * 1.5) {
        this.lastWarnedRetained = retained;
        this.hooks?.warn(
          `cdc: replication slot ${this.slot} holds back ${retained} bytes of WAL, over maxRetainedWalBytes ` +
            `(${this.maxRetainedWalBytes}); the target is failing or the relay is too slow — if this relay is gone for good, ` +
            `drop the slot (conveyor relay --mode cdc --teardown) before the disk fills`,
          { retainedBytes: retained, slot: this.slot },
        );
      } else if (retained <= this.maxRetainedWalBytes) {
        this.lastWarnedRetained = 0;
      }
    } catch {
      // The database is unreachable; the reconnect loop reports that.
    }
  }

  async lag(): Promise<SourceLag> {
    const s = quoteIdent(this.schema);
    const { rows } = await this.pool.query<{ retained: string | null; age_ms: string | null; backlog: string }>(
      `SELECT (SELECT (pg_current_wal_lsn() - restart_lsn)::text FROM pg_replication_slots WHERE slot_name = $1) AS retained,
              (SELECT (floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint - created_at)::text
                 FROM ${s}.outbox ORDER BY seq LIMIT 1) AS age_ms,
              (SELECT count(*)::text FROM ${s}.outbox) AS backlog`,
      [this.slot],
    );
    const row = rows[0];
    return {
      oldestUnpublishedAgeMs: row?.age_ms == null ? null : Math.max(0, Number(row.age_ms)),
      backlog: row ? Number(row.backlog) : null,
      slotLagBytes: row?.retained == null ? null : Number(row.retained),
    };
  }

  /** LSN confirmed to PostgreSQL so far (for tests and stats). */
  get confirmed(): string {
    return bigIntToLsn(this.confirmedLsn);
  }

  async close(): Promise<void> {
    this.running = false;
    // A clean stop records the last published batch (no redelivery after a restart).
    await this.recording;
    this.generation++;
    if (this.walTimer) clearInterval(this.walTimer);
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    for (const wake of this.drainWaiters.splice(0)) wake();
    const streamed = this.service !== null;
    await this.service?.destroy().catch(() => undefined);
    this.service = null;
    if (streamed) await this.awaitSlotReleased();
    await this.pool.end();
  }

  /**
   * Waits (up to 5 s) until PostgreSQL marks the slot inactive: its WAL sender exits a moment
   * after the connection closes, and until then a teardown or the next relay finds the slot in use.
   */
  private async awaitSlotReleased(): Promise<void> {
    const deadline = Date.now() + 5_000;
    for (let attempt = 0; Date.now() < deadline; attempt++) {
      const active = await this.pool
        .query<{ active: boolean }>("SELECT active FROM pg_replication_slots WHERE slot_name = $1", [this.slot])
        .then((r) => r.rows[0]?.active === true)
        .catch(() => false); // the database is gone: nothing to wait for
      if (!active) return;
      await new Promise((resolve) => setTimeout(resolve, Math.min(100, 5 * 2 ** attempt)));
    }
  }
}

/** PostgreSQL's type oids of json and jsonb. */
const JSON_TYPE_OIDS = new Set([114, 3802]);
const asText = (text: string): string => text;

/**
 * pgoutput with json columns left as the text PostgreSQL sent: pg-logical-replication parses
 * every column with pg's type parsers, and a JSON.parse/JSON.stringify round trip changes a
 * payload (integers past 2^53 rounded, "1.0" → "1", integer-like keys reordered, duplicate keys
 * merged, whitespace dropped). A relation message's columns carry the parser its later inserts
 * use, and the library parses a message synchronously in parse(), before the next one: swapping
 * the parser of json columns there makes every insert of the table arrive as its committed text.
 */
function keepJsonText(Base: typeof import("pg-logical-replication").PgoutputPlugin) {
  return class JsonTextPgoutputPlugin extends Base {
    override parse(buffer: Buffer): Message {
      const message = super.parse(buffer);
      if (message.tag === "relation") {
        for (const column of message.columns) if (JSON_TYPE_OIDS.has(column.typeOid)) column.parser = asText;
      }
      return message;
    }
  };
}

function jsonColumnText(value: unknown, column: string): string {
  if (typeof value !== "string") throw new ConveyorError(`cdc: the outbox ${column} column was decoded as ${typeof value}, not as its JSON text`);
  return value;
}

function toEvent(message: MessageInsert): OutboxEvent {
  const row = message.new as Record<string, unknown>;
  const payload = row.payload;
  const headers = row.headers;
  return {
    id: row.id as string,
    seq: Number(row.seq),
    topic: row.topic as string,
    key: (row.key as string | null) ?? null,
    // Text as committed (see keepJsonText); anything else means the parser swap failed, and
    // re-serialising would silently change the payload.
    payloadText: jsonColumnText(payload, "payload"),
    headers: headers == null ? {} : parseHeaders(jsonColumnText(headers, "headers")),
    createdAt: Number(row.created_at),
  };
}
