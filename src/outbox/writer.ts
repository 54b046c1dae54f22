/**
 * Writing events into the outbox, inside the caller's own transaction: the event commits or rolls
 * back with the business change it describes, so no commit can leave it unsent and no rollback can
 * send it (the seed's dual-write hazard). A relay (Relay, `conveyor relay`) publishes it afterwards.
 *
 * The table is created by the backend's migrations (`backend.migrate()` or `conveyor migrate`),
 * in the backend's schema (PostgreSQL) or with its table prefix (SQLite).
 */
import type Database from "better-sqlite3";
import { ConveyorError, InvalidInputError } from "../core/errors.js";
import { newJobId } from "../core/ids.js";
import { DEFAULT_MAX_PAYLOAD_BYTES, validateEvent, type OutboxEventInput } from "./event.js";
import { checkPrefix, checkSchema, outboxChannel, quoteIdent } from "./names.js";
import { shown } from "../core/checks.js";

/** Anything that runs a statement on the caller's open transaction: a pg PoolClient, or an adapter. */
export interface SqlExecutor {
  query(text: string, params?: unknown[]): Promise<unknown>;
}

/** Options of {@link PostgresOutbox}. */
export interface PostgresOutboxOptions {
  /** Schema holding Conveyor's tables (the PostgresBackend's `schema`). Default `"conveyor"`. */
  schema?: string;
  /** Largest payload accepted, in bytes of its JSON text. Default 262144 (256 KiB). */
  maxPayloadBytes?: number;
}

/**
 * The outbox of a PostgreSQL database. `publish(tx, event)` inserts the event through `tx`, the
 * client your transaction runs on, and returns its id.
 *
 * Per-key commit order: publish() takes a transaction-scoped advisory lock on the event's key
 * before it inserts, so two transactions writing events of one key commit one after the other and
 * the later commit always gets the larger position. A transaction therefore holds its keys until
 * it ends: write an aggregate's events from one transaction at a time (you usually already lock the
 * aggregate's row). Events without a key take no lock.
 */
export class PostgresOutbox {
  readonly schema: string;
  readonly maxPayloadBytes: number;
  private readonly insertSql: string;

  constructor(options: PostgresOutboxOptions = {}) {
    this.schema = checkSchema(options.schema ?? "conveyor");
    this.maxPayloadBytes = checkMaxPayload(options.maxPayloadBytes);
    const s = quoteIdent(this.schema);
    // One statement: the key's lock first (the CTE the INSERT reads from is evaluated before it),
    // then the row, then the wake-up NOTIFY, which PostgreSQL delivers only at commit and folds
    // into one per channel and transaction.
    this.insertSql =
      `WITH key_lock AS (SELECT CASE WHEN $3::text IS NULL THEN NULL ELSE ` +
      `pg_advisory_xact_lock(hashtextextended(${literal(`${this.schema}:outbox:`)} || $3::text, 0)) END AS locked), ` +
      `inserted AS (INSERT INTO ${s}.outbox (id, topic, key, payload, headers) ` +
      `SELECT $1, $2, $3, $4::json, $5::json FROM key_lock RETURNING id) ` +
      `SELECT id, pg_notify(${literal(outboxChannel(this.schema))}, 'outbox') AS notified FROM inserted`;
  }

  /**
   * Writes `event` through `tx` (a client inside your open transaction) and returns its id. Bad
   * input throws InvalidInputError before anything reaches the database.
   */
  async publish(tx: SqlExecutor, event: OutboxEventInput): Promise<string> {
    if (typeof tx !== "object" || tx === null || typeof (tx as { query?: unknown }).query !== "function") {
      throw new InvalidInputError(
        "outbox.publish(tx, event): tx must be the client your transaction runs on (a pg PoolClient after BEGIN, " +
          "or any object with query(text, params) on that connection)",
      );
    }
    const valid = validateEvent(event, this.maxPayloadBytes);
    const id = newJobId();
    try {
      await tx.query(this.insertSql, [id, valid.topic, valid.key, valid.payloadText, valid.headersText]);
    } catch (error) {
      throw explainMissingTable(error, `${this.schema}.outbox`);
    }
    return id;
  }
}

/** Options of {@link SqliteOutbox}. */
export interface SqliteOutboxOptions {
  /** Table prefix of Conveyor's tables (the SqliteBackend's `tablePrefix`). Default `"conveyor_"`. */
  tablePrefix?: string;
  /** Largest payload accepted, in bytes of its JSON text. Default 262144 (256 KiB). */
  maxPayloadBytes?: number;
}

/**
 * The outbox of an SQLite database. `publish(db, event)` inserts through your better-sqlite3
 * handle, and must run inside your `db.transaction(…)` (better-sqlite3 transactions are
 * synchronous, so this is too). SQLite has one writer at a time: commit order is insert order.
 */
export class SqliteOutbox {
  readonly tablePrefix: string;
  readonly maxPayloadBytes: number;
  private readonly statements = new WeakMap<Database.Database, Database.Statement>();

  constructor(options: SqliteOutboxOptions = {}) {
    this.tablePrefix = checkPrefix(options.tablePrefix ?? "conveyor_");
    this.maxPayloadBytes = checkMaxPayload(options.maxPayloadBytes);
  }

  /** Writes `event` inside the transaction open on `db` and returns its id. */
  publish(db: Database.Database, event: OutboxEventInput): string {
    if (typeof db !== "object" || db === null || typeof (db as { prepare?: unknown }).prepare !== "function") {
      throw new InvalidInputError("outbox.publish(db, event): db must be your better-sqlite3 Database handle");
    }
    if (!db.inTransaction) {
      throw new InvalidInputError(
        "outbox.publish(db, event) must run inside your db.transaction(() => { … }) together with the business " +
          "write it describes; outside one, a crash between the two writes loses or invents the event",
      );
    }
    const valid = validateEvent(event, this.maxPayloadBytes);
    const id = newJobId();
    this.statement(db).run(id, valid.topic, valid.key, valid.payloadText, valid.headersText, Date.now());
    return id;
  }

  private statement(db: Database.Database): Database.Statement {
    let statement = this.statements.get(db);
    if (statement === undefined) {
      try {
        statement = db.prepare(`INSERT INTO ${this.tablePrefix}outbox (id, topic, key, payload, headers, created_at) VALUES (?, ?, ?, ?, ?, ?)`);
      } catch (error) {
        throw explainMissingTable(error, `${this.tablePrefix}outbox`);
      }
      this.statements.set(db, statement);
    }
    return statement;
  }
}

function checkMaxPayload(value: number | undefined): number {
  const bytes = value ?? DEFAULT_MAX_PAYLOAD_BYTES;
  if (!Number.isInteger(bytes) || bytes < 1 || bytes > 64 * 1024 * 1024) {
    throw new InvalidInputError(`maxPayloadBytes must be an integer from 1 to 67108864 (64 MiB); got ${shown(value)}`);
  }
  return bytes;
}

function literal(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}

/** A missing table means the migrations have not run: say so instead of a bare driver error. */
export function explainMissingTable(error: unknown, table: string): Error {
  const message = error instanceof Error ? error.message : String(error);
  // PostgreSQL: undefined_table (42P01) or invalid_schema_name (3F000). SQLite reports a missing
  // table only in its message (code SQLITE_ERROR, shared by every prepare failure).
  const code = (error as { code?: unknown } | null)?.code;
  const missing = code === "42P01" || code === "3F000" || (code === "SQLITE_ERROR" && message.startsWith("no such table"));
  if (missing) {
    return new ConveyorError(
      `the outbox table ${table} does not exist: run the Conveyor migrations first (\`await backend.migrate()\` ` +
        `or \`conveyor migrate --db …\`) with the same schema / table prefix`,
      { cause: error },
    );
  }
  return error instanceof Error ? error : new Error(message);
}
