/**
 * The production backend: PostgreSQL through node-postgres (`pg`).
 *
 * Every transition is one SQL statement (queries/*.sql, each with a header naming its parameters
 * and results), so each is atomic without an explicit transaction and costs one round trip:
 * claiming is `UPDATE … WHERE seq = ANY(… FOR UPDATE SKIP LOCKED LIMIT n) RETURNING …`, and
 * complete, fail, heartbeat and release take whole batches as parallel arrays (`unnest`) and are
 * fenced by the lease token in their WHERE clause. Times are bigint ms from the database clock,
 * or from the injected test clock passed as `$1` into every statement that reads "now".
 *
 * Wake-ups: statements that make jobs runnable send `pg_notify(channel, queue)`, which PostgreSQL
 * delivers at commit, once per queue per transaction; each backend instance LISTENs on one
 * connection (listener.ts) while anyone subscribes.
 */
import { WakeListeners } from "../listeners.js";
import { serializeError } from "../error-json.js";
import { storableError, storableText } from "./text.js";
import { checkedBackend, PRUNE_DEFAULTS, RESCUE_DEFAULTS } from "../checked.js";
import { boundLogLines, JOB_LOG_MAX_LINES, type JobLogLine } from "../../core/job-log.js";
import { badEventCursor, eventFromRow, eventPrunePolicy, type EventLogPage, type EventLogRow, type EventPrunePolicy } from "../../core/queue-events.js";
import { toError } from "../../core/checks.js";
import pg from "pg";
import type { CustomTypesConfig, Pool, PoolClient, QueryConfig, QueryResultRow } from "pg";
import type {
  HoldOptions,
  Backend,
  CancelResult,
  Capabilities,
  ClaimedJob,
  ClaimRequest,
  CompleteAndClaimResult,
  Completion,
  CompletionTransaction,
  EnqueueOptions,
  EnqueueResult,
  Failure,
  HeartbeatResult,
  IdempotencyStore,
  ListFilter,
  Page,
  PrunePolicy,
  PruneResult,
  QueueStats,
  RemoveResult,
  ReplayResult,
  RescuedJob,
  RescueOptions,
  SettleResult,
  SqlClient,
  WakeListener,
} from "../contract.js";
import { FULL_STORE_FEATURES } from "../contract.js";
import { allOrNothingOf, refusedBatch } from "../contract.js";
import { listArgsOf, staleCursor } from "../listing.js";
import type { FinishedWindow } from "../contract.js";
import { planDedupBatch } from "../dedup.js";
import { checkFlow, flowRefused } from "../flows.js";
import { systemClock, type Clock } from "../../core/clock.js";
import { ConveyorError, InvalidInputError, LeaseExpiredError, quarantineMessage, StoreUnavailableError, type LeaseLossReason } from "../../core/errors.js";
import type { Json } from "../../core/json.js";
import { isUnlimited, reportThrottle, type QueueFlow, type StoredQueueLimits } from "../../core/flow.js";
import { checkName } from "../../core/spec.js";
import {
  claimLanedOptimistically,
  claimUnderLimits,
  jobFlowColumns,
  limitsOf,
  NO_JOB_FLOW,
  OptimisticLanes,
  WindowForgets,
  retryInMsFromNow,
  type FlowQuery,
  type PgFlowRow,
} from "./flow.js";
import {
  effectiveState,
  type BackoffSpec,
  type ChildFailurePolicy,
  type ErrorInfo,
  type FlowInfo,
  type FlowNodeSpec,
  type JobRecord,
  type JobSpec,
  type JobState,
  type Lease,
} from "../../core/job.js";
import { consoleLogger, type Logger } from "../../core/logger.js";
import { integerArray, jsonTextArray, textArray } from "./arrays.js";
import { scheduleFromRow, type ScheduleRow } from "../schedule-rows.js";
import type { ScheduleFiring, ScheduleWrite, StoredSchedule } from "../../core/schedule.js";
import { asStoreError, errorCodes, SOCKET_ERROR_CODES } from "../store-errors.js";
import { LeaseHoldWatch } from "../lease-hold.js";
import { NotificationListener } from "./listener.js";
import { describeHosts, multiHostClient, parseMultiHostUrl } from "./multi-host.js";
import { conveyorPoolClient } from "./pool-client.js";
import { latestVersion, migrate, SchemaOutdatedError, SchemaTooNewError, schemaVersion } from "./migrate.js";
import { byClaimOrder, jobRecordFromRow, type SqlJobRow } from "../job-rows.js";
import { readQueryFiles } from "../query-files.js";
import { eventLogMismatchError, eventLogOffError, eventLogOption } from "../event-log-switch.js";
import { preparedFor } from "../checked-lists.js";
import { byteOrderRange } from "../named-range.js";
import { shown } from "../../core/checks.js";

/** Options of {@link PostgresBackend}. Give `connectionString` or `pool`. */
export interface PostgresBackendOptions {
  /**
   * `postgres://user:password@host:5432/database`: Conveyor creates, owns and closes a pool of
   * `poolSize + 1` connections (one is reserved for LISTEN while workers subscribe).
   */
  connectionString?: string;
  /**
   * Your own `pg.Pool` instead of a connection string. Conveyor never ends it; `close()` only
   * returns the connections it holds. While anything subscribes to wake-ups (every running
   * Worker does), one of its connections is held for LISTEN. Attach `pool.on("error", …)`:
   * node-postgres emits errors of idle connections there (a server restart, say), and an
   * EventEmitter error nobody listens to ends the process. Consider `jit = off` for its
   * connections (e.g. `options: "-c jit=off"` or `ALTER ROLE … SET jit = off`): with a million
   * jobs stored, PostgreSQL otherwise JIT-compiles every claim (pools Conveyor opens itself
   * turn it off, see pool-client.ts). Conveyor leaves your sessions' setting alone; where JIT is
   * on it runs its stats and lists in transactions of their own with `SET LOCAL jit = off`
   * (three more round trips each) and says so once in the log.
   */
  pool?: Pool;
  /**
   * Schema holding Conveyor's tables, created by `migrate()`: lower-case letters, digits and `_`,
   * not starting with a digit, at most 50 characters. Default `"conveyor"`.
   */
  schema?: string;
  /**
   * Source of "now" (ms since the epoch) for leases, run_at, created_at and retention.
   * Default: the database's clock (`statement_timestamp()`), the one clock every process shares.
   * Inject a `FakeClock` to test time-dependent behaviour.
   */
  clock?: Clock;
  /**
   * Connections of the pool created from `connectionString`, not counting the LISTEN one.
   * Ignored with `pool`. Default 10. A handler using `ctx.tx()` holds one connection for as long
   * as it runs: with such handlers, make this larger than the worker's concurrency, or claims
   * and heartbeats queue behind them.
   */
  poolSize?: number;
  /**
   * Send the hot statements (claim, settle, heartbeat, enqueue …) as named prepared statements,
   * parsed and planned once per connection. Default `true`. Set `false` behind a connection
   * pooler that does not keep prepared statements across transactions (PgBouncer in transaction
   * mode before 1.21).
   */
  preparedStatements?: boolean;
  /**
   * Where connection losses and reconnects are reported. Default JSON lines on stderr, warnings
   * and errors only.
   */
  logger?: Logger;
  /** `application_name` of the connections Conveyor opens, shown in pg_stat_activity. Default `"conveyor"`. */
  applicationName?: string;
  /**
   * Keep the durable event log (the `events` table, one row per statement, written by triggers
   * in the statement of each change; migration `event_batches`): what `queue.events()`,
   * `GET /v1/events` and the event-driven dashboard read. It costs about 2% of the WAL bytes and
   * 15% of the server's CPU per processed job (docs/performance-postgres.md, "Session 29"; 30%
   * of the WAL and 20% of the CPU when it was one row per event). With `false` the schema's
   * event triggers are dropped and nothing is written; `queue.events()` and `GET /v1/events`
   * refuse by name (`capabilities.eventLog` false) and the dashboard and job event streams poll
   * instead. One setting per schema (migration `event_log_switch`): the first process on a schema
   * records it, and a process configured otherwise refuses to start, so every process on one
   * schema agrees. In URLs: `?eventLog=off`. Default `true`.
   */
  eventLog?: boolean;
}

const DEFAULT_SCHEMA = "conveyor";
const SCHEMA_PATTERN = /^[a-z_][a-z0-9_]{0,49}$/;
const DEFAULT_POOL_SIZE = 10;
/** Due scheduled jobs relabelled per statement: one promote never holds many row locks for long. */
const PROMOTE_BATCH = 5_000;

/** How long a claim trusts its view of which queues have flow limits, in ms (see limitedQueues). */
const FLOW_QUEUES_TTL_MS = 1_000;

/** The rescue hold's one scope: every queue lives on the one server. */
const WHOLE_SERVER = "";

/** PostgreSQL's largest bigint. */
const MAX_BIGINT = 2n ** 63n - 1n;

const LEASE_EXPIRED_TEXT = serializeError({ name: "LeaseExpiredError", message: new LeaseExpiredError().message, stack: null });
const QUARANTINE_MESSAGE = quarantineMessage("{stalls}");

/**
 * The lease token a claim gives job row `j` (`{{next_lease_token}}` in the claim statements):
 * greater than its last, and at least the server's time in µs (`now()`: the transaction's start,
 * so every use in one statement agrees). A counter alone repeats after a failover to an
 * asynchronous standby that never received a claim (`pg-primary-switch-async`, docs/failover.md):
 * the next claim would hand out the lost claim's token again, and the lost holder's late
 * acknowledgement would pass under the new holder's lease. The same rule as Redis
 * (next_lease_token in redis/lua/_common.lua), with the same assumption on the clocks.
 */
const NEXT_LEASE_TOKEN = "GREATEST(j.lease_token + 1, floor(extract(epoch FROM now()) * 1000000)::bigint)";

/**
 * Columns every job-returning statement selects, by name rather than `*`: a prepared statement
 * whose result shape changed under it (a later migration adding a column while this process
 * runs) would fail with "cached plan must not change result type".
 */
const JOB_COLUMNS = [
  "seq",
  "id",
  "queue",
  "name",
  "payload",
  "meta",
  "state",
  "priority",
  "run_at",
  "created_at",
  "attempt",
  "max_attempts",
  "backoff",
  "timeout_ms",
  "lease_token",
  "lease_expires_at",
  "worker_id",
  "worker_host",
  "worker_pid",
  "started_at",
  "finished_at",
  "stalls",
  "replays",
  "progress",
  "result",
  "error",
  "history",
  "parent_id",
  "parent_queue",
]
  .map((c) => `j.${c}`)
  .join(", ");

/** The statements in queries/, by file name. */
/** One job parameter of enqueue.sql: how it is read from a spec, and sent for a batch (an array of them). */
interface EnqueueJobColumn {
  /** `backoff`: the spec's backoff as JSON, serialised once by the caller. */
  of(spec: JobSpec, backoff: string): string | number | null;
  array(values: ReadonlyArray<string | number | null>): string;
}

/**
 * enqueue.sql's job parameters $2 to $14, in order. One list for both ways of sending them:
 * batchValues (one array per column) and oneJobValues (one job's values, enqueue-one-fresh.sql).
 */
const ENQUEUE_JOB_COLUMNS: readonly EnqueueJobColumn[] = [
  { of: (spec) => spec.id, array: textArray },
  { of: (spec) => spec.queue, array: textArray },
  { of: (spec) => spec.name, array: textArray },
  { of: (spec) => spec.payload, array: jsonTextArray },
  { of: (spec) => spec.priority, array: integerArray },
  { of: (spec) => spec.runAt, array: integerArray },
  { of: (spec) => spec.delayMs, array: integerArray },
  { of: (spec) => spec.maxAttempts, array: integerArray },
  { of: (_spec, backoff) => backoff, array: jsonTextArray },
  { of: (spec) => spec.timeoutMs, array: integerArray },
  { of: (spec) => spec.retainCompletedMs, array: integerArray },
  { of: (spec) => spec.retainDeadMs, array: integerArray },
  { of: (spec) => spec.meta ?? null, array: jsonTextArray },
];

const QUERY_FILES = [
  "enqueue",
  "enqueue-fresh",
  "enqueue-one-fresh",
  "claim",
  "claim-one",
  "heartbeat",
  "complete",
  "fail",
  "release",
  "progress",
  "rescue",
  "promote",
  "prune",
  "get",
  "list",
  "stats",
  "cancel",
  "replay",
  "remove",
  "lease-state",
  "pause",
  "once",
  "now",
  "runnable-queues",
  "schedule-upsert",
  "schedule-remove",
  "schedule-list",
  "schedule-advance",
  "dedup",
  "prune-dedup",
  "flow-link",
  "flow",
  "append-logs",
  "logs",
  "read-events",
  "latest-event-cursor",
  "prune-events",
  // Flow control (flow.ts).
  "flow-lock",
  "flow-counts",
  "flow-record",
  "flow-set",
  "flow-get",
  "flow-hold",
  "flow-queues",
  "flow-read-lanes",
  "flow-claim-lanes",
  "flow-hold-key",
  "complete-and-claim",
  "finished-window",
  "list-waiting",
  "mark-buffered",
] as const;
type QueryFileName = (typeof QUERY_FILES)[number];
/** A statement built from others, with no file of its own: complete-and-claim.sql over claim-one.sql. */
type QueryName = QueryFileName | "complete-and-claim-one";

/**
 * Not prepared: their filters are optional parameters, and planned with the actual values
 * PostgreSQL folds the absent ones away and picks the index the others need; a generic plan
 * could not.
 */
const UNPREPARED = new Set<QueryName>(["list", "list-waiting", "stats"]);

/**
 * Whether a session compiles with JIT: its setting on and the server able to (built with LLVM).
 * Asked once of a caller's pool (callerPoolJits).
 */
const JIT_ON_SQL = "SELECT current_setting('jit') = 'on' AND pg_jit_available() AS jit_on";

/** bigint (int8) columns arrive as JS numbers: every one holds ms or a counter far below 2^53. */
const INT8_OID = 20;
const TYPES: CustomTypesConfig = {
  getTypeParser: (oid: number, format?: "text" | "binary"): unknown =>
    oid === INT8_OID && format !== "binary" ? parseInt8 : (pg.types.getTypeParser(oid, format) as unknown),
};

function parseInt8(value: string): number {
  return Number(value);
}

/** One row of read-events.sql: an event, the writing transaction's id and the event's place in its row's batch (0: a row of one event). */
interface EventRow extends EventLogRow {
  xid: string;
  i: number;
}

/** One row of the jobs table as the statements return it (pg parses the JSON columns). */
type JobRow = SqlJobRow & {
  /** claim.sql only: the claim recorded the job as buffered (ClaimRequest.startsAtOnce). */
  marked_buffered?: boolean;
};

interface ObservedJobRow extends JobRow {
  observed_at: number;
}

interface SettledRow {
  id: string;
  lease_token: number;
  /** Set by statements that made the job runnable again: the queue to wake. */
  queue?: string | null;
}

interface LostRow {
  id: string;
  token: number;
  state: JobState | null;
  current_token: number | null;
}

interface StatsRow {
  queue: string;
  paused: boolean;
  scheduled: number;
  waiting: number;
  active: number;
  waiting_children: number;
  completed: number;
  dead: number;
  cancelled: number;
  oldest_due_at: number | null;
  observed_at: number;
}

/** Something statements can run on: the pool, one of its clients, or the caller's transaction. */
interface Queryable {
  query<R extends QueryResultRow>(config: QueryConfig): Promise<{ rows: R[] }>;
}

let cachedQueryFiles: Record<QueryFileName, string> | null = null;

/** Reads queries/*.sql once per process (the build copies the folder next to backend.js). */
function queryFiles(): Record<QueryFileName, string> {
  cachedQueryFiles ??= readQueryFiles(new URL("./queries/", import.meta.url), QUERY_FILES, "PostgreSQL", "src/backend/postgres/queries");
  return cachedQueryFiles;
}

/**
 * Conveyor's PostgreSQL backend. Call `migrate()` once at startup (safe from every process at
 * once); until the schema is current every call fails with a message that says so.
 *
 * ```ts
 * const backend = new PostgresBackend({ connectionString: process.env.DATABASE_URL });
 * await backend.migrate();
 * ```
 */
export class PostgresBackend implements Backend {
  readonly description: string;
  readonly capabilities: Capabilities = Object.freeze({
    ...FULL_STORE_FEATURES,
    transactionalEnqueue: true,
    crossProcessWakeups: true,
    multiProcess: true,
    transactionalCompletion: true,
    claimAcrossQueues: "merged",
    flows: "across-queues",
    eventLog: true,
    jobFlowKeys: true,
    completeAndClaim: true,
    claimMarksBuffered: true,
  });
  readonly idempotency: IdempotencyStore;
  /** The schema holding Conveyor's tables. */
  readonly schema: string;

  private readonly pool: Pool;
  private readonly ownsPool: boolean;
  private readonly clock: Clock | null;
  /**
   * Whether the server failed lately: the rescue leaves every lease alone while it fails and for a
   * lease after it answers again (../lease-hold.ts; one scope, the server).
   */
  private readonly rescueHold = new LeaseHoldWatch(() => (this.clock === null ? Date.now() : this.clock.now()));
  private readonly logger: Logger;
  private readonly prepared: boolean;
  private readonly quotedSchema: string;
  private readonly channel: string;
  private readonly sql: Record<QueryName, string>;
  private readonly statementPrefix: string;
  /** PostgresBackendOptions.eventLog, checked against the schema's record (settleEventLog). */
  private readonly eventLogOn: boolean;
  private readonly listeners = new WakeListeners({ start: () => this.notifications.start(), stop: () => void this.notifications.stop() });
  private readonly notifications: NotificationListener;
  private schemaReady = false;
  private schemaCheck: Promise<void> | null = null;
  /** A caller's pool: whether its sessions JIT-compile (asked once, callerPoolJits); null until asked. */
  private callerJit: Promise<boolean> | null = null;
  private closed = false;

  constructor(options: PostgresBackendOptions) {
    const given = options ?? {};
    if ((given.connectionString === undefined) === (given.pool === undefined)) {
      throw new InvalidInputError("PostgresBackend needs exactly one of { connectionString } or { pool }");
    }
    const schema = given.schema ?? DEFAULT_SCHEMA;
    if (!SCHEMA_PATTERN.test(schema)) {
      throw new InvalidInputError(`schema must be 1-50 lower-case letters, digits and _, not starting with a digit; got ${shown(schema)}`);
    }
    const poolSize = given.poolSize ?? DEFAULT_POOL_SIZE;
    if (!Number.isInteger(poolSize) || poolSize < 1) {
      throw new InvalidInputError(`poolSize must be an integer >= 1; got ${shown(poolSize)}`);
    }
    this.schema = schema;
    this.quotedSchema = pg.escapeIdentifier(schema);
    this.channel = `${schema}_wake`;
    this.clock = given.clock ?? null;
    this.logger = given.logger ?? consoleLogger();
    this.prepared = given.preparedStatements ?? true;
    this.statementPrefix = `conveyor.${schema}.`;
    this.eventLogOn = eventLogOption(given.eventLog);
    if (!this.eventLogOn) this.capabilities = Object.freeze({ ...this.capabilities, eventLog: false });

    if (given.pool !== undefined) {
      this.pool = given.pool;
      this.ownsPool = false;
      this.description = `postgres:${describePool(given.pool)} schema=${schema}`;
    } else {
      const url = given.connectionString!;
      // Several hosts (or target_session_attrs): each connection picks its host (multi-host.ts).
      const multiHost = parseMultiHostUrl(url);
      const connectionString = multiHost ? multiHost.urlFor(multiHost.hosts[0]!) : url;
      this.description = `postgres:${multiHost ? describeHosts(multiHost) : describeUrl(connectionString)} schema=${schema}`;
      this.pool = new pg.Pool({
        connectionString,
        // Conveyor's own connections: no JIT (at a million jobs it cost every claim) and a dying
        // connection never ends the process (pool-client.ts).
        Client: conveyorPoolClient(multiHost ? multiHostClient(multiHost) : pg.Client, this.logger, this.description),
        max: poolSize + 1,
        // Notice a peer that vanished (network partition, failover) instead of waiting on its
        // socket for ever: TCP keepalive probes from 10 s of silence on.
        keepAlive: true,
        keepAliveInitialDelayMillis: 10_000,
        // A database that does not answer a connection attempt (or a pool exhausted for this
        // long) is an error the worker reports and retries, not a call that hangs.
        connectionTimeoutMillis: 30_000,
        idleTimeoutMillis: 30_000,
        application_name: given.applicationName ?? "conveyor",
      });
      this.ownsPool = true;
      // An idle connection dying (server restart, pg_terminate_backend) is routine: the pool
      // drops it and opens another on demand. Unhandled, the pool's "error" event would end the
      // process. After close() it is not even news: pg's Pool.end() resolves once its connections
      // are told to end, before their sockets close, and the server may end them first.
      this.pool.on("error", (error) => {
        if (this.closed) return;
        this.logger.warn({ backend: this.description, error: error.message }, "an idle PostgreSQL connection failed; the pool replaces it");
      });
    }

    const quotedChannel = pg.escapeLiteral(this.channel);
    const files = queryFiles();
    this.sql = {} as Record<QueryName, string>;
    for (const name of QUERY_FILES) {
      this.sql[name] = files[name]
        .replaceAll("{{schema}}", this.quotedSchema)
        .replaceAll("{{channel}}", quotedChannel)
        .replaceAll("{{job_columns}}", JOB_COLUMNS)
        .replaceAll("{{next_lease_token}}", NEXT_LEASE_TOKEN)
        .replaceAll("{{event_log}}", String(this.eventLogOn));
    }
    this.sql["enqueue-fresh"] = freshEnqueueText(this.sql["enqueue-fresh"], this.sql.enqueue);
    this.sql["enqueue-one-fresh"] = oneJobEnqueueText(this.sql["enqueue-one-fresh"], this.sql["enqueue-fresh"]);
    this.sql["claim-one"] = oneQueueClaimText(this.sql["claim-one"], this.sql.claim);
    this.sql["complete-and-claim-one"] = completeAndClaimText(this.sql["complete-and-claim"], this.sql.complete, this.sql["claim-one"]);
    this.sql["complete-and-claim"] = completeAndClaimText(this.sql["complete-and-claim"], this.sql.complete, this.sql.claim);
    this.notifications = new NotificationListener({
      pool: this.pool,
      channel: this.channel,
      description: this.description,
      logger: this.logger,
      onNotify: (queue) => this.wake(queue),
      onListening: () => void this.wakeRunnableQueues(),
    });
    this.idempotency = { once: (key, ttlMs) => this.once(key, ttlMs) };
    // Callers get the store behind the checking facade (../checked.ts): arguments checked once, for every store.
    return checkedBackend(this);
  }

  // ── lifecycle ────────────────────────────────────────────────────────────────────────────

  /** Creates or upgrades the schema; each migration once, however many processes call this at once. */
  async migrate(): Promise<void> {
    this.assertOpen();
    try {
      await migrate(this.pool, this.schema, this.quotedSchema);
      await this.settleEventLog();
    } catch (error) {
      throw asStoreError(error, this.description, isPostgresUnavailable);
    }
    this.schemaReady = true;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.listeners.clear();
    await this.notifications.stop();
    if (this.ownsPool) await this.pool.end();
  }

  /** `await using backend = new …Backend(…)`: `close()` when the scope ends. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  async now(): Promise<number> {
    if (this.clock !== null) return Math.floor(this.clock.now());
    const [row] = await this.query<{ now: number }>("now", []);
    return row!.now;
  }

  // ── producing and claiming ───────────────────────────────────────────────────────────────

  /**
   * With `{ tx }` the jobs are inserted through that client, inside the caller's open
   * transaction: they appear (and wake workers) when it commits, and vanish if it rolls back.
   */
  async enqueue(specs: readonly JobSpec[], options?: EnqueueOptions): Promise<EnqueueResult[]> {
    // A client with query(text, params): checked by the facade (../checked.ts).
    const tx = options?.tx as SqlClient | undefined;
    if (specs.length === 0) return [];
    if (specs.some((s) => s.dedup !== undefined)) return this.enqueueWithWindows(specs, options, tx);
    // Each id goes to the database once; a repeat within the batch is a duplicate of its first
    // occurrence, decided here. A batch whose ids grow has no repeat: the producer's own ids do
    // (newJobId), and comparing neighbours costs far less than a set of the batch's ids (measured:
    // 0.3 ms against 3-16 ms for 20,000 ids, and as much again for the answers below).
    const unique = idsGrow(specs);
    const batch = unique ? specs : firstOfEachId(specs);
    const keyed = jobFlowColumns(batch);
    const allOrNothing = allOrNothingOf(specs, options);
    // A single add of a producer-made id without flow keys, outside a caller's transaction: its
    // values as they are, for enqueue-one-fresh.sql (no array literals to build or to parse).
    const oneFresh = batch.length === 1 && keyed === null && tx === undefined && !allOrNothing && batch[0]!.idGenerated === true;
    const values = oneFresh ? this.oneJobValues(batch[0]!) : this.batchValues(batch, keyed);
    // All or nothing: the statement runs in a transaction (a savepoint in the caller's) that is
    // rolled back when a duplicate turns up. A concurrent batch with one of its ids waits on the
    // unique index until that batch commits or rolls back, so of two such batches exactly one
    // is stored, never a part of each.
    const keepAll = (found: Array<{ id: string | null }>) => !allOrNothing || (found.every((r) => r.id === null) && batch.length === specs.length);
    let rows: Array<{ id: string | null }>;
    if (tx !== undefined) {
      if (allOrNothing) await tx.query("SAVEPOINT conveyor_all_or_nothing");
      rows = await this.queryCallerTx<{ id: string | null }>(tx, "enqueue", values);
      if (allOrNothing) await tx.query(keepAll(rows) ? "RELEASE SAVEPOINT conveyor_all_or_nothing" : "ROLLBACK TO SAVEPOINT conveyor_all_or_nothing");
    } else if (allOrNothing) {
      rows = await this.inTransaction(async (client) => {
        const found = await this.query<{ id: string | null }>("enqueue", values, client);
        return { value: found, commit: keepAll(found) };
      });
    } else if (batch.every((spec) => spec.idGenerated === true)) {
      try {
        rows = await this.query<{ id: string | null }>(oneFresh ? "enqueue-one-fresh" : "enqueue-fresh", values);
      } catch (error) {
        // A generated id already stored (the batch sent again after a lost answer): the INSERT
        // stored nothing; the statement that looks for stored ids reports which.
        if (!isDuplicateJobId(error)) throw error;
        rows = await this.query<{ id: string | null }>("enqueue", oneFresh ? this.batchValues(batch, keyed) : values);
      }
    } else {
      rows = await this.query<{ id: string | null }>("enqueue", values);
    }
    // Jobs with a group or limiter key gave their queue a flow row (enqueue.sql): this process's
    // claims take the flow path for it at once, not after its view of limited queues next
    // expires. (In a caller's transaction the row exists only once the caller commits: left to
    // that expiry.)
    if (keyed !== null && tx === undefined && keepAll(rows)) for (const queue of keyed.queues) this.flowQueues?.names.add(queue);
    const existed = new Set<string>();
    for (const row of rows) if (row.id !== null) existed.add(row.id);
    // A repeat within the batch is a duplicate of its first occurrence; without repeats there is
    // nothing to remember.
    const stored = unique ? null : new Set<string>();
    const woken = new Set<string>();
    const results = specs.map((spec): EnqueueResult => {
      const fresh = !existed.has(spec.id) && !(stored?.has(spec.id) ?? false);
      if (fresh) {
        stored?.add(spec.id);
        // Only for the local fallback wake-up, a hint: the NOTIFY decides by the store's clock.
        if (spec.runAt === null ? spec.delayMs <= 0 : spec.runAt <= (this.clock ?? systemClock).now()) woken.add(spec.queue);
      }
      return { id: spec.id, duplicate: !fresh };
    });
    if (allOrNothing && refusedBatch(results)) return results;
    if (tx === undefined) this.wakeLocally(woken);
    return results;
  }

  /** enqueue.sql's parameters for `batch`: one array per column (and the flow columns, six NULLs for none). */
  private batchValues(batch: readonly JobSpec[], keyed: ReturnType<typeof jobFlowColumns>): unknown[] {
    const n = batch.length;
    const columns = ENQUEUE_JOB_COLUMNS.map(() => new Array<string | number | null>(n));
    // Specs built from one set of defaults share their backoff object: serialise it once.
    let lastBackoff: BackoffSpec | null = null;
    let lastBackoffText = "";
    for (let i = 0; i < n; i++) {
      const spec = batch[i]!;
      if (spec.backoff !== lastBackoff) {
        lastBackoff = spec.backoff;
        lastBackoffText = JSON.stringify(spec.backoff);
      }
      for (let c = 0; c < ENQUEUE_JOB_COLUMNS.length; c++) columns[c]![i] = ENQUEUE_JOB_COLUMNS[c]!.of(spec, lastBackoffText);
    }
    return [
      this.nowParam(),
      ...ENQUEUE_JOB_COLUMNS.map((column, c) => column.array(columns[c]!)),
      textArray([...new Set(batch.map((spec) => spec.queue))]),
      // Flow control: the lanes, groups and limiter keys of new jobs (six NULLs for none).
      ...(keyed?.columns ?? NO_JOB_FLOW),
    ];
  }

  /** enqueue-one-fresh.sql's parameters: enqueue.sql's for one job, each array's one element as it is. */
  private oneJobValues(spec: JobSpec): unknown[] {
    const backoffText = JSON.stringify(spec.backoff);
    return [
      this.nowParam(),
      ...ENQUEUE_JOB_COLUMNS.map((column) => column.of(spec, backoffText)),
      spec.queue,
      // No flow columns: a job with a group or limiter key takes the batch statement.
      ...NO_JOB_FLOW,
    ];
  }

  /**
   * A batch with dedup windows: dedup.sql decides the windows (locking their rows), then the jobs
   * let through are stored by the plain enqueue, in one transaction (the caller's, with `tx`).
   */
  private async enqueueWithWindows(specs: readonly JobSpec[], options: EnqueueOptions | undefined, tx: SqlClient | undefined): Promise<EnqueueResult[]> {
    const plan = planDedupBatch(specs, options);
    const windowed = plan.specs.map((spec, i) => ({ spec, i })).filter((w) => w.spec.dedup !== undefined);
    // One lock order for every producer (see dedup.sql).
    windowed.sort((a, b) => compareText(a.spec.queue, b.spec.queue) || compareText(a.spec.dedup!.key, b.spec.dedup!.key));
    const values = [
      this.nowParam(),
      textArray(windowed.map((w) => w.spec.queue)),
      textArray(windowed.map((w) => w.spec.dedup!.key)),
      textArray(windowed.map((w) => w.spec.id)),
      integerArray(windowed.map((w) => w.spec.dedup!.ttlMs)),
      textArray(windowed.map((w) => w.spec.dedup!.mode)),
      jsonTextArray(windowed.map((w) => w.spec.payload)),
      integerArray(windowed.map((w) => w.spec.runAt)),
      integerArray(windowed.map((w) => w.spec.delayMs)),
    ];
    const run = async (client: SqlClient): Promise<EnqueueResult[]> => {
      const decided = rowsOf<{ ord: number | string; outcome: string; window_job_id: string }>(await client.query(this.sql.dedup, values));
      const answers = new Array<EnqueueResult | null>(plan.specs.length).fill(null);
      for (const row of decided) {
        if (row.outcome === "opened") continue;
        answers[windowed[Number(row.ord) - 1]!.i] = { id: row.window_job_id, duplicate: true, dedup: row.outcome as "dropped" | "extended" | "replaced" };
      }
      const store = plan.specs.filter((_, i) => answers[i] === null).map(({ dedup: _window, ...spec }) => spec);
      const stored = store.length === 0 ? [] : await this.enqueue(store, { tx: client });
      let next = 0;
      return plan.answers(answers.map((a) => a ?? stored[next++]!));
    };
    if (tx !== undefined) return run(tx);
    return this.inTransaction(async (client) => ({ value: await run(client), commit: true }));
  }

  /**
   * A flow: its jobs through the plain enqueue, then flow-link.sql, in one transaction (a savepoint
   * in the caller's with `tx`), rolled back when any id existed already.
   */
  async enqueueFlow(nodes: readonly FlowNodeSpec[], options?: Pick<EnqueueOptions, "tx">): Promise<EnqueueResult[]> {
    const tx = options?.tx as SqlClient | undefined;
    const childCount = checkFlow(nodes, true);
    const links = [
      textArray(nodes.map((n) => n.spec.id)),
      integerArray(childCount),
      textArray(nodes.map((n) => n.onChildFailure)),
      textArray(nodes.map((n) => (n.parent === null ? null : nodes[n.parent]!.spec.id))),
      textArray(nodes.map((n) => (n.parent === null ? null : nodes[n.parent]!.spec.queue))),
      integerArray(nodes.map((_, i) => i)),
      textArray(nodes.map((n) => n.spec.queue)),
      textArray(nodes.map((n) => n.spec.name)),
    ];
    const run = async (client: SqlClient): Promise<{ value: EnqueueResult[]; commit: boolean }> => {
      const results = await this.enqueue(
        nodes.map((n) => n.spec),
        { tx: client },
      );
      if (flowRefused(results)) return { value: results, commit: false };
      await client.query(this.sql["flow-link"], links);
      return { value: results, commit: true };
    };
    if (tx === undefined) return this.inTransaction(run);
    await tx.query("SAVEPOINT conveyor_flow");
    const { value, commit } = await run(tx);
    await tx.query(commit ? "RELEASE SAVEPOINT conveyor_flow" : "ROLLBACK TO SAVEPOINT conveyor_flow");
    return value;
  }

  async flow(id: string, queue?: string): Promise<FlowInfo | null> {
    const rows = await this.query<{
      parent_id: string | null;
      parent_queue: string | null;
      on_child_failure: ChildFailurePolicy | null;
      pending_children: number;
      observed_at: number;
      child_id: string | null;
      child_queue: string;
      child_name: string;
      state: JobState | null;
      result: Json | null;
      error: ErrorInfo | null;
      live_state: JobState | null;
      run_at: number | null;
    }>("flow", [this.nowParam(), id, queue ?? null]);
    const first = rows[0];
    if (first === undefined) return null;
    return {
      parent: first.parent_id === null ? null : { id: first.parent_id, queue: first.parent_queue! },
      onChildFailure: first.on_child_failure,
      pendingChildren: first.pending_children,
      children: rows
        .filter((c) => c.child_id !== null)
        .map((c) => ({
          id: c.child_id!,
          queue: c.child_queue,
          name: c.child_name,
          state: c.state ?? (c.live_state === null ? "cancelled" : effectiveState(c.live_state, c.run_at!, c.observed_at)),
          settled: c.state !== null,
          result: c.result,
          error: c.error,
        })),
    };
  }

  /** Runs `work` in a transaction on one pooled client; commits when it says so, else rolls back. */
  private async inTransaction<T>(work: (client: PoolClient) => Promise<{ value: T; commit: boolean }>): Promise<T> {
    this.assertOpen();
    if (!this.schemaReady) await this.checkSchema();
    const client = await this.connect();
    // The connection dying between two queries (a given pool's clients have no listener of
    // Conveyor's, pool-client.ts) must not end the process: the next query fails and says so.
    const onError = () => undefined;
    client.on("error", onError);
    try {
      await client.query("BEGIN");
      const { value, commit } = await work(client);
      await client.query(commit ? "COMMIT" : "ROLLBACK");
      client.off("error", onError);
      client.release();
      return value;
    } catch (error) {
      // Released with the error, the connection is discarded and the server rolls back.
      client.off("error", onError);
      client.release(toError(error));
      throw asStoreError(error, this.description, isPostgresUnavailable);
    }
  }

  async claim(request: ClaimRequest): Promise<ClaimedJob[]> {
    const { limit } = request;
    if (request.queues.length === 0 || request.names.length === 0) return [];
    this.rescueHold.noteLease(request.leaseMs);
    const limited = await this.limitedQueues();
    // The facade's frozen list itself when none of it is limited: its prepared form (claimParams) is kept.
    const plainQueues = !request.queues.some((q) => limited.has(q)) ? request.queues : request.queues.filter((q) => !limited.has(q));
    const rows =
      plainQueues.length === 0
        ? []
        : await this.query<JobRow>(claimStatementFor(plainQueues).claim, [this.nowParam(), ...this.claimParams({ ...request, queues: plainQueues }, limit)]);
    if (plainQueues.length < request.queues.length && rows.length < limit) {
      rows.push(
        ...(await this.claimUnderLimits(
          request.queues.filter((q) => limited.has(q)),
          request,
          limit - rows.length,
          request.leaseMs,
        )),
      );
    }
    return toClaimed(rows);
  }

  /**
   * claim.sql's parameters after `now` ($2..$9), for claim and complete-and-claim: the plain
   * statement, which skips queues under flow limits (flow_checked false; those take claimUnderLimits).
   */
  private claimParams(request: ClaimRequest, limit: number): unknown[] {
    const { id, host, pid } = request.worker;
    // The queue list's literal and range, made once per list (checked-lists.ts), not per claim.
    const queues = preparedFor(request.queues, "postgres-claim-queues", claimQueuesParam);
    return [queues.text, textArray(request.names), limit, request.leaseMs, id, host, pid, false, request.startsAtOnce ?? null, queues.first, queues.last];
  }

  /**
   * complete() and claim() in one statement (complete-and-claim.sql): one round trip and one
   * commit where the worker would send two. Each half behaves exactly as its own call. A claim
   * that touches a queue under flow limits needs its own transaction (claimUnderLimits), so it
   * goes as two calls.
   */
  async completeAndClaim(items: readonly Completion[], request: ClaimRequest): Promise<CompleteAndClaimResult> {
    const { limit } = request;
    if (request.queues.length === 0 || request.names.length === 0) return { settled: await this.complete(items), claimed: [] };
    if (items.length === 0) return { settled: [], claimed: await this.claim(request) };
    this.rescueHold.noteLease(request.leaseMs);
    const limited = await this.limitedQueues();
    if (request.queues.some((q) => limited.has(q))) return { settled: await this.complete(items), claimed: await this.claim(request) };
    const rows = await this.query<JobRow & { settled_ids: string[] | null; settled_tokens: string[] | null }>(
      claimStatementFor(request.queues).completeAndClaim,
      [
        this.nowParam(),
        textArray(items.map((i) => i.lease.jobId)),
        integerArray(items.map((i) => i.lease.token)),
        jsonTextArray(items.map((i) => JSON.stringify(i.result ?? null))),
        ...this.claimParams(request, limit),
      ],
    );
    const settled: SettledRow[] = [];
    const claimed: JobRow[] = [];
    for (const row of rows) {
      if (row.settled_ids === null) claimed.push(row);
      // The one row of completions: bigint[] arrives as strings (only bigint itself is parsed to a number, TYPES).
      else row.settled_ids.forEach((id, i) => settled.push({ id, lease_token: Number(row.settled_tokens![i]) }));
    }
    return {
      settled: settleResults(
        items.map((i) => i.lease),
        settled,
      ),
      claimed: toClaimed(claimed),
    };
  }

  // ── settling (fenced by lease token) ─────────────────────────────────────────────────────

  async markBuffered(leases: readonly Lease[], buffered: boolean): Promise<void> {
    if (leases.length === 0) return;
    await this.query("mark-buffered", [textArray(leases.map((l) => l.jobId)), integerArray(leases.map((l) => l.token)), buffered]);
  }

  async heartbeat(leases: readonly Lease[], leaseMs: number): Promise<HeartbeatResult> {
    if (leases.length === 0) return { lost: [] };
    this.rescueHold.noteLease(leaseMs);
    const rows = await this.query<LostRow>("heartbeat", [
      this.nowParam(),
      textArray(leases.map((l) => l.jobId)),
      integerArray(leases.map((l) => l.token)),
      leaseMs,
    ]);
    // A lease still "active under its token" in the statement's own snapshot was changed by a
    // transaction that committed while the heartbeat ran (see lease-state.sql): look again.
    const stale = rows.filter((r) => r.state === "active" && String(r.current_token) === String(r.token));
    if (stale.length > 0) {
      const fresh = new Map((await this.query<Omit<LostRow, "token">>("lease-state", [textArray(stale.map((r) => r.id))])).map((r) => [r.id, r]));
      for (const row of stale) {
        const now = fresh.get(row.id);
        row.state = now?.state ?? null;
        row.current_token = now?.current_token ?? null;
      }
    }
    const lost = new Map<string, LeaseLossReason>();
    for (const row of rows) {
      const reason: LeaseLossReason = row.state === null ? "gone" : row.state === "cancelled" && row.current_token === row.token ? "cancelled" : "expired";
      lost.set(leaseKey(row.id, row.token), reason);
    }
    const result: HeartbeatResult["lost"] = [];
    for (const lease of leases) {
      const reason = lost.get(leaseKey(lease.jobId, lease.token));
      if (reason !== undefined) result.push({ lease, reason });
    }
    return { lost: result };
  }

  async complete(items: readonly Completion[]): Promise<SettleResult[]> {
    if (items.length === 0) return [];
    const rows = await this.query<SettledRow>("complete", [
      this.nowParam(),
      textArray(items.map((i) => i.lease.jobId)),
      integerArray(items.map((i) => i.lease.token)),
      jsonTextArray(items.map((i) => JSON.stringify(i.result ?? null))),
    ]);
    return settleResults(
      items.map((i) => i.lease),
      rows,
    );
  }

  async fail(items: readonly Failure[]): Promise<SettleResult[]> {
    if (items.length === 0) return [];
    const delays = items.map((i) => i.retryDelayMs);
    const rows = await this.query<SettledRow>("fail", [
      this.nowParam(),
      textArray(items.map((i) => i.lease.jobId)),
      integerArray(items.map((i) => i.lease.token)),
      jsonTextArray(items.map((i) => storableError(i.error))),
      integerArray(delays),
    ]);
    this.wakeLocally(queuesOf(rows));
    return settleResults(
      items.map((i) => i.lease),
      rows,
    );
  }

  async release(leases: readonly Lease[]): Promise<SettleResult[]> {
    if (leases.length === 0) return [];
    const rows = await this.query<SettledRow>("release", [this.nowParam(), textArray(leases.map((l) => l.jobId)), integerArray(leases.map((l) => l.token))]);
    this.wakeLocally(queuesOf(rows));
    return settleResults(leases, rows);
  }

  async progress(lease: Lease, progress: Json): Promise<SettleResult> {
    const rows = await this.query("progress", [lease.jobId, lease.token, JSON.stringify(progress ?? null)]);
    return rows.length === 1 ? "applied" : "stale";
  }

  async appendLogs(lease: Lease, lines: readonly string[]): Promise<SettleResult> {
    const bounded = boundLogLines(lines);
    const rows = await this.query("append-logs", [
      this.nowParam(),
      lease.jobId,
      lease.token,
      textArray(bounded.map(storableText)),
      Math.max(0, JOB_LOG_MAX_LINES - bounded.length),
    ]);
    return rows.length === 1 ? "applied" : "stale";
  }

  async logs(id: string, queue?: string): Promise<JobLogLine[]> {
    const rows = await this.query<JobLogLine>("logs", [id, queue ?? null]);
    return rows.map((row) => ({ at: Number(row.at), attempt: row.attempt, line: row.line }));
  }

  /**
   * Cursors are "<xid>-<seq>-<i>" for an event of a row holding a statement's batch (its place i
   * in the batch, from 1) and "<xid>-<seq>" for a row of one event (i = 0): the log is read in
   * (xid, seq, i) order (migrations 0004 and 0017), and ids handed out before batches existed
   * keep their form.
   */
  async readEvents(cursor: string, limit: number): Promise<EventLogPage> {
    if (!this.eventLogOn) throw eventLogOffError(this.description, "read the event log", "schema");
    const m = /^(\d{1,19})-(\d{1,19})(?:-(\d{1,19}))?$/.exec(cursor);
    // The seq and i are bigints (a 19-digit one may not fit: the server's "out of range" was a 500); the xid an xid8, which holds any.
    if (!m || BigInt(m[2]!) > MAX_BIGINT || (m[3] !== undefined && BigInt(m[3]) > MAX_BIGINT)) throw badEventCursor(cursor);
    const rows = await this.query<EventRow>("read-events", [m[1], m[2], m[3] ?? "0", limit]);
    const events = rows.map((row) => eventFromRow(row.i === 0 ? `${row.xid}-${row.seq}` : `${row.xid}-${row.seq}-${row.i}`, row));
    return { events, cursor: events.length > 0 ? events[events.length - 1]!.id : cursor };
  }

  async latestEventCursor(): Promise<string> {
    if (!this.eventLogOn) throw eventLogOffError(this.description, "read the event log", "schema");
    const [row] = await this.query<{ xid: string }>("latest-event-cursor", []);
    return `${row!.xid}-0`;
  }

  async pruneEvents(policy?: EventPrunePolicy): Promise<number> {
    if (!this.eventLogOn) throw eventLogOffError(this.description, "prune the event log", "schema");
    const p = eventPrunePolicy(policy);
    const [row] = await this.query<{ deleted: number }>("prune-events", [this.nowParam(), p.maxEvents, p.limit, p.maxAgeMs]);
    return row?.deleted ?? 0;
  }

  /**
   * Opens a transaction on a connection of its own for a running job. The handler writes through
   * `client`; `commit(result)` adds the fenced completion to the same transaction and commits
   * when the lease still holds, or rolls everything back and answers "stale". The job row is not
   * locked meanwhile (heartbeats must go on), so keep these transactions short: an open
   * transaction that has written holds back VACUUM for the whole database.
   */
  async beginCompletion(lease: Lease): Promise<CompletionTransaction> {
    this.assertOpen();
    if (!this.schemaReady) await this.checkSchema();
    const client = await this.connect();
    let released = false;
    // A connection dying while the handler holds it must not crash the process; the next query
    // on it fails and says so.
    const onError = () => {};
    client.on("error", onError);
    const release = (error?: Error) => {
      if (released) return;
      released = true;
      client.off("error", onError);
      // Released with an error, the pool discards the connection, and with it whatever
      // transaction state it was in (the server rolls back an open transaction on disconnect).
      client.release(error);
    };
    try {
      await client.query("BEGIN");
    } catch (error) {
      release(toError(error));
      throw error;
    }
    let finished = false;
    const finish = (what: string) => {
      if (finished) throw new ConveyorError(`the transaction of job ${lease.jobId} is already finished; ${what} came too late`);
      finished = true;
    };
    const guarded: SqlClient = {
      query: (text: string, params?: unknown[]) => {
        if (finished) {
          return Promise.reject(
            new ConveyorError(
              `the transaction of job ${lease.jobId} is already finished (committed with the job, or rolled back); ` +
                `do every write of ctx.tx() before the handler returns`,
            ),
          );
        }
        return client.query(text, params);
      },
    };
    return {
      client: guarded,
      commit: async (result: Json): Promise<SettleResult> => {
        finish("commit()");
        try {
          const rows = await this.query<SettledRow>(
            "complete",
            [this.nowParam(), textArray([lease.jobId]), integerArray([lease.token]), jsonTextArray([JSON.stringify(result ?? null)])],
            client,
          );
          const applied = rows.length === 1;
          await client.query(applied ? "COMMIT" : "ROLLBACK");
          release();
          return applied ? "applied" : "stale";
        } catch (error) {
          release(toError(error));
          throw error;
        }
      },
      rollback: async (): Promise<void> => {
        if (finished) return;
        finished = true;
        try {
          await client.query("ROLLBACK");
          release();
        } catch (error) {
          release(toError(error));
          throw error;
        }
      },
    };
  }

  // ── maintenance ──────────────────────────────────────────────────────────────────────────

  async rescueExpired(options: RescueOptions = {}): Promise<RescuedJob[]> {
    // Checked by the facade (../checked.ts); defaults from its one table when called bare.
    const { maxStalls, limit } = { ...RESCUE_DEFAULTS, ...options };
    if (this.rescueHold.isHeld(WHOLE_SERVER)) {
      // The server failed a moment ago: its holders could not renew, give them time to. A
      // process that only rescues learns here that the server answers again.
      await this.query("now", []);
      return [];
    }
    const rows = await this.query<{
      id: string;
      queue: string;
      name: string;
      state: "waiting" | "dead";
      attempt: number;
      worker_id: string | null;
    }>("rescue", [this.nowParam(), maxStalls, limit, LEASE_EXPIRED_TEXT, QUARANTINE_MESSAGE]);
    this.wakeLocally(new Set(rows.filter((r) => r.state === "waiting").map((r) => r.queue)));
    return rows.map((r) => ({ id: r.id, queue: r.queue, name: r.name, state: r.state, attempt: r.attempt, workerId: r.worker_id }));
  }

  async promoteDue(): Promise<number> {
    let total = 0;
    for (;;) {
      const [row] = await this.query<{ promoted: number; queues: string[] }>("promote", [this.nowParam(), PROMOTE_BATCH]);
      const promoted = row?.promoted ?? 0;
      total += promoted;
      this.wakeLocally(new Set(row?.queues ?? []));
      if (promoted < PROMOTE_BATCH) break;
    }
    return total;
  }

  async prune(given: PrunePolicy = {}): Promise<PruneResult> {
    const policy = { ...PRUNE_DEFAULTS, ...given };
    const [row] = await this.query<{ jobs: number; idempotency_keys: number }>("prune", [
      this.nowParam(),
      policy.maxCompletedPerQueue,
      policy.maxDeadPerQueue,
      policy.limit,
    ]);
    await this.query("prune-dedup", [this.nowParam(), policy.limit]);
    return { jobs: row?.jobs ?? 0, idempotencyKeys: row?.idempotency_keys ?? 0 };
  }

  // ── inspection ───────────────────────────────────────────────────────────────────────────

  async get(id: string, queue?: string): Promise<JobRecord | null> {
    const [row] = await this.query<ObservedJobRow>("get", [this.nowParam(), id, queue ?? null]);
    return row === undefined ? null : toRecord(row, row.observed_at);
  }

  async list(filter: ListFilter = {}, page: Page = {}): Promise<JobRecord[]> {
    const args = listArgsOf(filter, page);
    let beforeSeq: number | null = null;
    if (args.after !== null) {
      const [cursor] = await this.query<ObservedJobRow>("get", [this.nowParam(), args.after, filter.queue ?? null]);
      if (cursor === undefined || cursor.queue !== filter.queue) throw staleCursor(args.after, filter.queue!);
      beforeSeq = Number(cursor.seq);
    }
    // The reverse cursor: the rows just above it, read upwards and turned back to newest first.
    const newer = args.before !== null;
    if (args.before !== null) {
      const [cursor] = await this.query<ObservedJobRow>("get", [this.nowParam(), args.before, filter.queue ?? null]);
      if (cursor === undefined || cursor.queue !== filter.queue) throw staleCursor(args.before, filter.queue!, "before");
      beforeSeq = Number(cursor.seq);
    }
    const rows =
      filter.state === "waiting" && filter.queue !== undefined
        ? await this.query<ObservedJobRow>("list-waiting", [
            this.nowParam(),
            filter.queue,
            filter.name ?? null,
            args.limit,
            args.offset,
            beforeSeq,
            newer,
            args.createdFrom,
            args.createdUntil,
          ])
        : await this.query<ObservedJobRow>("list", [
            this.nowParam(),
            filter.queue ?? null,
            filter.name ?? null,
            filter.state ?? null,
            args.limit,
            args.offset,
            beforeSeq,
            args.createdFrom,
            args.createdUntil,
            newer,
          ]);
    if (newer) rows.reverse();
    return rows.map((row) => toRecord(row, row.observed_at));
  }

  async finishedWindow(queue: string, fromMs: number, untilMs: number, sampleLimit: number): Promise<FinishedWindow> {
    const args = { queue, fromMs, untilMs, sampleLimit }; // checked by the facade (../checked.ts)
    type Row = { state: "completed" | "dead"; n: number | null; run_at: number | null; started_at: number | null; finished_at: number | null };
    const rows = await this.query<Row>("finished-window", [args.queue, args.fromMs, args.untilMs, args.sampleLimit]);
    const out: FinishedWindow = { completed: 0, dead: 0, samples: [] };
    for (const r of rows) {
      if (r.n !== null) out[r.state] = r.n;
      else out.samples.push({ state: r.state, runAt: r.run_at!, startedAt: r.started_at, finishedAt: r.finished_at! });
    }
    return out;
  }

  async stats(queue?: string): Promise<QueueStats[]> {
    const rows = await this.query<StatsRow>("stats", [this.nowParam(), queue ?? null]);
    if (queue !== undefined && rows.length === 0) {
      return [{ queue, paused: false, counts: zeroCounts(), oldestWaitingAgeMs: null }];
    }
    return rows.map((r) => ({
      queue: r.queue,
      paused: r.paused,
      counts: {
        scheduled: r.scheduled,
        waiting: r.waiting,
        "waiting-children": r.waiting_children,
        active: r.active,
        completed: r.completed,
        dead: r.dead,
        cancelled: r.cancelled,
      },
      oldestWaitingAgeMs: r.oldest_due_at === null ? null : Math.max(0, r.observed_at - r.oldest_due_at),
    }));
  }

  // ── administration ───────────────────────────────────────────────────────────────────────

  async cancel(id: string, queue?: string): Promise<CancelResult> {
    const [row] = await this.query<{ state: JobState }>("cancel", [this.nowParam(), id, queue ?? null]);
    if (row === undefined) return "not-found";
    return row.state === "completed" || row.state === "dead" || row.state === "cancelled" ? "already-finished" : "cancelled";
  }

  async replay(id: string, queue?: string): Promise<ReplayResult> {
    const [row] = await this.query<{ queue: string | null; found: boolean }>("replay", [this.nowParam(), id, queue ?? null]);
    if (row?.queue) {
      this.wakeLocally(new Set([row.queue]));
      return "replayed";
    }
    return row?.found ? "not-dead" : "not-found";
  }

  async remove(id: string, queue?: string): Promise<RemoveResult> {
    const [row] = await this.query<{ removed: boolean }>("remove", [id, queue ?? null]);
    if (row === undefined) return "not-found";
    return row.removed ? "removed" : "not-finished";
  }

  async pause(queue: string): Promise<void> {
    await this.query("pause", [queue, true]);
  }

  async resume(queue: string): Promise<void> {
    await this.query("pause", [queue, false]);
    this.wakeLocally(new Set([queue]));
  }

  // ── flow control (src/core/flow.ts, ./flow.ts) ───────────────────────────────────────────

  /**
   * Queues with a flow row, as last read (at most FLOW_QUEUES_TTL_MS ago). Claims on the queues
   * in it take the flow path; a queue that gained limits elsewhere meanwhile is skipped by the
   * plain claim statement itself (flow_checked false), so a stale view only delays its jobs.
   */
  private flowQueues: { names: Set<string>; readAt: number } | null = null;

  private async limitedQueues(): Promise<ReadonlySet<string>> {
    const at = performance.now();
    if (this.flowQueues === null || at - this.flowQueues.readAt > FLOW_QUEUES_TTL_MS) {
      const rows = await this.query<{ queue: string }>("flow-queues", []);
      this.flowQueues = { names: new Set(rows.map((r) => r.queue)), readAt: at };
    }
    return this.flowQueues.names;
  }

  /** Laned queues this backend claims without the flow row lock first (flow.ts, claimLanedOptimistically). */
  private readonly optimisticLanes = new OptimisticLanes();
  /** When this backend's laned claims last forgot each rate window's expired starts (flow.ts). */
  private readonly windowForgets = new WindowForgets();

  private async claimUnderLimits(queues: readonly string[], request: ClaimRequest, limit: number, leaseMs: number): Promise<JobRow[]> {
    // One laned queue: two statements, no transaction, when no other claimer comes between.
    const optimistic =
      queues.length === 1 && this.optimisticLanes.tries(queues[0]!)
        ? await claimLanedOptimistically<JobRow>(
            <R extends object>(name: FlowQuery, values: unknown[]) => this.query<R & QueryResultRow>(name, values),
            this.optimisticLanes,
            this.windowForgets,
            queues[0]!,
            request,
            limit,
            leaseMs,
            this.nowParam(),
          )
        : null;
    const { rows, throttles, clockReadAt } =
      optimistic ??
      (await this.inTransaction(async (client) => ({
        value: await claimUnderLimits<JobRow>(
          <R extends object>(name: FlowQuery, values: unknown[]) => this.query<R & QueryResultRow>(name, values, client),
          queues,
          request,
          limit,
          leaseMs,
          this.nowParam(),
          this.optimisticLanes,
          this.windowForgets,
        ),
        commit: true,
      })));
    for (const t of throttles) reportThrottle(request.onThrottle, t.queue, retryInMsFromNow(t.retryInMs, clockReadAt));
    return rows;
  }

  async setQueueLimits(queue: string, limits: StoredQueueLimits): Promise<void> {
    checkName("queue", queue);
    const rate = limits.rate;
    await this.query("flow-set", [
      queue,
      rate?.max ?? null,
      rate?.durationMs ?? null,
      limits.maxRunning,
      JSON.stringify(limits.maxRunningPerName),
      isUnlimited(limits),
    ]);
    this.flowQueues = null;
  }

  async getQueueFlow(queue: string): Promise<QueueFlow | null> {
    const [row] = await this.query<PgFlowRow>("flow-get", [queue]);
    return row === undefined ? null : { limits: limitsOf(row), heldUntil: row.held_until };
  }

  async holdQueue(queue: string, forMs: number, options: HoldOptions = {}): Promise<void> {
    checkName("queue", queue);
    const ms = forMs;
    if (options.keyOfJob !== undefined) {
      await this.query("flow-hold-key", [this.nowParam(), queue, ms, options.keyOfJob]);
      return;
    }
    await this.query("flow-hold", [this.nowParam(), queue, ms]);
    this.flowQueues?.names.add(queue);
  }

  // ── schedules (rules in src/core/schedule.ts) ────────────────────────────────────────────

  async scheduleUpsert(write: ScheduleWrite): Promise<{ created: boolean; schedule: StoredSchedule }> {
    const [row] = await this.query<ScheduleRow & { inserted: boolean }>("schedule-upsert", [
      this.nowParam(),
      write.queue,
      write.id,
      write.definition,
      write.timing,
    ]);
    return { created: row!.inserted, schedule: scheduleFromRow(row!) };
  }

  async scheduleRemove(queue: string, id: string): Promise<boolean> {
    return (await this.query("schedule-remove", [queue, id])).length > 0;
  }

  async scheduleList(queue?: string): Promise<StoredSchedule[]> {
    return (await this.query<ScheduleRow>("schedule-list", [queue ?? null])).map(scheduleFromRow);
  }

  /** The compare-and-set and the enqueue in one transaction: both commit, or neither. */
  async scheduleFire(firing: ScheduleFiring): Promise<{ fired: boolean; jobs: EnqueueResult[] }> {
    return this.inTransaction<{ fired: boolean; jobs: EnqueueResult[] }>(async (client) => {
      const applied = await this.query("schedule-advance", [firing.tickAt, firing.queue, firing.id, firing.version, firing.expectedTickAt], client);
      if (applied.length === 0) return { value: { fired: false, jobs: [] }, commit: false };
      const jobs = firing.jobs.length === 0 ? [] : await this.enqueue(firing.jobs, { tx: client });
      return { value: { fired: true, jobs }, commit: true };
    });
  }

  private async once(key: string, ttlMs: number): Promise<boolean> {
    const rows = await this.query("once", [this.nowParam(), key, ttlMs]);
    return rows.length === 1;
  }

  // ── wake-ups ─────────────────────────────────────────────────────────────────────────────

  /**
   * The first subscriber starts the LISTEN connection, the last one to leave stops it. Listeners
   * hear the queue of every notification, from this process and every other.
   */
  subscribe(listener: WakeListener): () => void {
    this.assertOpen();
    return this.listeners.add(listener);
  }

  /** Calls every listener; a throwing listener must not break the caller or the others. */
  private wake(queue: string): void {
    this.listeners.wake(queue);
  }

  /**
   * Wakes this process's listeners directly, but only while the LISTEN connection is down:
   * while it is up, the NOTIFY sent by the same statement reaches them anyway (and usually no
   * later than this would), and waking twice would cost every worker a second, empty claim.
   */
  private wakeLocally(queues: ReadonlySet<string>): void {
    if (queues.size === 0 || this.listeners.size === 0 || this.notifications.listening) return;
    for (const queue of queues) this.wake(queue);
  }

  /** After LISTEN (re)connects: wake the queues that have work, since their NOTIFYs may be lost. */
  private async wakeRunnableQueues(): Promise<void> {
    try {
      const rows = await this.query<{ name: string }>("runnable-queues", [this.nowParam()]);
      for (const row of rows) this.wake(row.name);
    } catch (error) {
      if (this.closed) return;
      this.logger.warn(
        { backend: this.description, error: toError(error).message },
        "could not look for runnable queues after (re)connecting LISTEN; workers will find them by polling",
      );
    }
  }

  // ── plumbing ─────────────────────────────────────────────────────────────────────────────

  /** The `$1` of every statement that reads "now": the injected clock's value, or NULL for the database's. */
  private nowParam(): number | null {
    return this.clock === null ? null : Math.floor(this.clock.now());
  }

  private assertOpen(): void {
    if (this.closed) throw new ConveyorError(`${this.description} is closed; create a new PostgresBackend`);
  }

  /** Runs one of the statements in queries/ on the pool (or on `on`) and returns its rows. */
  private async query<R extends QueryResultRow>(name: QueryName, values: unknown[], on?: Queryable): Promise<R[]> {
    this.assertOpen();
    try {
      if (!this.schemaReady) await this.checkSchema();
      const config: QueryConfig = { text: this.sql[name], values, types: TYPES };
      if (this.prepared && !UNPREPARED.has(name)) config.name = this.statementPrefix + name;
      const withoutJit = !this.ownsPool && on === undefined && UNPREPARED.has(name) && (await this.callerPoolJits());
      const rows = withoutJit ? await this.queryWithoutJit<R>(config) : (await (on ?? this.pool).query<R>(config)).rows;
      if (this.rescueHold.watching) this.rescueHold.noteAnswer(WHOLE_SERVER);
      return rows;
    } catch (error) {
      // inTransaction (queryWithoutJit) answers an unreachable server as a StoreUnavailableError already.
      if (error instanceof StoreUnavailableError || isPostgresUnavailable(error)) this.rescueHold.noteFailure(WHOLE_SERVER);
      throw asStoreError(error, this.description, isPostgresUnavailable);
    }
  }

  /**
   * Whether a caller's pool (PostgresBackendOptions.pool) compiles with JIT, asked once; said once
   * in the log when it does. Conveyor's own pools turn JIT off (pool-client.ts); a caller's keeps
   * its sessions' setting, which Conveyor does not change.
   */
  private callerPoolJits(): Promise<boolean> {
    this.callerJit ??= this.pool.query<{ jit_on: boolean }>(JIT_ON_SQL).then(
      ({ rows }) => {
        const on = rows[0]?.jit_on === true;
        if (on) {
          this.logger.warn(
            { backend: this.description },
            "the pool given to PostgresBackend compiles with JIT: Conveyor turns it off for its stats and lists, but its claims and completions over about a million stored jobs would compile on every call; set jit = off for this pool's connections (e.g. options: '-c jit=off')",
          );
        }
        return on;
      },
      (error: unknown) => {
        // Asked again next time: the server may be down now.
        this.callerJit = null;
        throw error;
      },
    );
    return this.callerJit;
  }

  /**
   * An unprepared statement (a stats or list read) on a caller's pool whose sessions compile with
   * JIT: in a transaction of its own with `SET LOCAL jit = off`, so the caller's session keeps its
   * setting. Planned with its parameters' values on every call, such a statement is estimated per
   * queue or per page before the tables are analyzed (queues: 1,330 rows assumed), and its cost
   * passed `jit_above_cost`: stats() took 470 ms on such a pool against 2.5 ms without JIT
   * (docs/performance-postgres.md, "Session 30"). Three more round trips per call (BEGIN, the
   * SET, COMMIT), on such pools only.
   */
  private queryWithoutJit<R extends QueryResultRow>(config: QueryConfig): Promise<R[]> {
    return this.inTransaction(async (client) => {
      await client.query("SET LOCAL jit = off");
      return { value: (await client.query<R>(config)).rows, commit: true };
    });
  }

  /** A pooled connection; a server that cannot be reached is a StoreUnavailableError. */
  private async connect(): Promise<PoolClient> {
    try {
      return await this.pool.connect();
    } catch (error) {
      throw asStoreError(error, this.description, isPostgresUnavailable);
    }
  }

  /** Runs a statement on the caller's own client (`{ tx }`): plain text and parameters only. */
  private async queryCallerTx<R extends QueryResultRow>(tx: SqlClient, name: QueryName, values: unknown[]): Promise<R[]> {
    this.assertOpen();
    if (!this.schemaReady) await this.checkSchema();
    return rowsOf<R>(await tx.query(this.sql[name], values));
  }

  /**
   * Records this process's event log setting for the schema unless one is recorded, and refuses
   * to run with a different one (settle_event_log, migration `event_log_switch`; with 'off' recorded it drops
   * the event triggers). On the pool directly: `query()` would wait for the schema check.
   */
  private async settleEventLog(): Promise<void> {
    const wanted = this.eventLogOn ? "on" : "off";
    const { rows } = await this.pool.query<{ stored: string }>(`SELECT ${this.quotedSchema}.settle_event_log($1) AS stored`, [wanted]);
    const stored = rows[0]?.stored;
    if (stored !== wanted) throw eventLogMismatchError(`schema "${this.schema}"`, "schema", stored === "on", this.eventLogOn);
  }

  /** Refuses, once per backend, to run against a schema that is missing, older or newer than this code, or that keeps the other event log setting. */
  private checkSchema(): Promise<void> {
    this.schemaCheck ??= (async () => {
      const current = await schemaVersion(this.pool, this.quotedSchema).catch((error: unknown) => {
        throw asStoreError(error, this.description, isPostgresUnavailable);
      });
      const latest = latestVersion();
      if (current > latest) throw new SchemaTooNewError(this.schema, current, latest);
      if (current < latest) throw new SchemaOutdatedError(this.schema, current, latest);
      await this.settleEventLog().catch((error: unknown) => {
        throw asStoreError(error, this.description, isPostgresUnavailable);
      });
      this.schemaReady = true;
    })().finally(() => {
      // Check again next time unless it passed (the schema may be migrated meanwhile).
      this.schemaCheck = null;
    });
    return this.schemaCheck;
  }
}

// ── helpers ──────────────────────────────────────────────────────────────────────────────────

/**
 * SQLSTATEs that mean "not now" rather than "wrong": connection exceptions (class 08) except a
 * protocol violation (08P01: the client sent something malformed, and a retry would send it
 * again), the server shutting down or starting up (57P01-57P03), too many connections (53300).
 */
const UNAVAILABLE_SQLSTATES = new Set(["57P01", "57P02", "57P03", "53300"]);
const PROTOCOL_VIOLATION = "08P01";
/** pg's own errors about a lost or unobtainable connection carry no code, only these messages. */
const PG_CONNECTION_MESSAGES = ["Connection terminated", "timeout exceeded when trying to connect", "Client has encountered a connection error"];

/** Whether a driver error means "the store is unreachable or busy, retry" (exported for its tests). */
export function isPostgresUnavailable(error: unknown): boolean {
  const connectionClass = (code: string) => code.startsWith("08") && code !== PROTOCOL_VIOLATION;
  if (errorCodes(error).some((code) => SOCKET_ERROR_CODES.has(code) || connectionClass(code) || UNAVAILABLE_SQLSTATES.has(code))) return true;
  return error instanceof Error && PG_CONNECTION_MESSAGES.some((m) => error.message.startsWith(m));
}

function toRecord(row: JobRow, now: number): JobRecord {
  return jobRecordFromRow(row, now);
}

/** Claimed rows as the contract answers them: in claim order (RETURNING yields no particular order). */
function toClaimed(rows: JobRow[]): ClaimedJob[] {
  rows.sort(byClaimOrder);
  return rows.map((row) => ({
    job: toRecord(row, row.started_at!),
    lease: { jobId: row.id, token: row.lease_token },
    leaseExpiresAt: row.lease_expires_at!,
    ...(row.marked_buffered === true ? { markedBuffered: true } : {}),
  }));
}

/** Fills each placeholder of `template`, which must hold each exactly once (`file` names the template in the error). */
function filled(template: string, file: string, values: Record<string, string>): string {
  let out = template;
  for (const [name, value] of Object.entries(values)) {
    const placeholder = `{{${name}}}`;
    if (template.split(placeholder).length !== 2) throw new ConveyorError(`${file} must hold ${placeholder} exactly once`);
    out = out.replace(placeholder, () => value);
  }
  return out;
}

/** enqueue-fresh.sql: enqueue.sql without its duplicate check (see that file for why and when). */
function freshEnqueueText(template: string, enqueue: string): string {
  const skipExisting = "\n  ON CONFLICT (id) DO NOTHING\n";
  if (enqueue.split(skipExisting).length !== 2) {
    throw new ConveyorError(`enqueue.sql must hold the line "  ON CONFLICT (id) DO NOTHING" once (enqueue-fresh.sql builds on it)`);
  }
  return filled(template, "enqueue-fresh.sql", { enqueue: enqueue.replace(skipExisting, "\n") });
}

/** An array parameter with its cast, `$n::type[]`. */
const ARRAY_PARAMETER = /(\$\d+::\w+)\[\]/g;

/**
 * enqueue-one-fresh.sql: enqueue-fresh.sql with every array parameter passed as its one element
 * (see that file): `unnest(a[], b[], …)` becomes `(VALUES (a, b, …))`, `cardinality(a[])` 1, any
 * other `a[]` a. Checked: no array parameter, unnest or cardinality may be left.
 */
export function oneJobEnqueueText(template: string, fresh: string): string {
  const one = fresh
    .replace(/unnest\(((?:\s*\$\d+::\w+\[\],?)+)\)/g, (_whole, list: string) => `(VALUES (${list.replace(ARRAY_PARAMETER, "$1").trim()}))`)
    .replace(/cardinality\(\$\d+::\w+\[\]\)/g, "1")
    .replace(ARRAY_PARAMETER, "$1");
  if (/\[\]|unnest|cardinality/.test(one.replace(/--.*$/gm, ""))) {
    throw new ConveyorError("enqueue.sql holds an array use enqueue-one-fresh.sql cannot turn into one job's values (backend.ts, oneJobEnqueueText)");
  }
  return filled(template, "enqueue-one-fresh.sql", { enqueue: one });
}

/**
 * The statements that claim from `queues` (all without flow limits): claim-one.sql and its
 * complete-and-claim for one queue, which its search of the named queues would only slow
 * (docs/performance-postgres.md, "Session 32"), claim.sql's for several. claim-one.sql walks the
 * one queue its $11 names, so it must never get a longer list.
 */
function claimStatementFor(queues: readonly string[]): { claim: QueryName; completeAndClaim: QueryName } {
  return queues.length === 1 ? { claim: "claim-one", completeAndClaim: "complete-and-claim-one" } : { claim: "claim", completeAndClaim: "complete-and-claim" };
}

/** claim.sql's lines that begin and end its search of the named queues, which claim-one.sql replaces. */
const MANY_QUEUES_START = "-- ── the named queues' waiting jobs";
const MANY_QUEUES_END = "-- ── end of the named queues' waiting jobs ──";

/**
 * claim-one.sql's template filled with the rendered claim.sql's part before its search of the
 * named queues (its params CTE) and its part after (the due walk, the buffered mark, the UPDATE).
 * Checked: each line occurs once, in that order.
 */
export function oneQueueClaimText(template: string, claim: string): string {
  const start = claim.split(MANY_QUEUES_START);
  const end = claim.split(MANY_QUEUES_END);
  if (start.length !== 2 || end.length !== 2 || start[0]!.length > end[0]!.length) {
    throw new ConveyorError(
      `claim.sql must hold a line starting "${MANY_QUEUES_START}" and, after it, the line "${MANY_QUEUES_END}", once each (claim-one.sql builds on them)`,
    );
  }
  return filled(template, "claim-one.sql", { claim_head: start[0]!.trimEnd(), claim_tail: end[1]!.replace(/^\n/, "") });
}

/**
 * complete-and-claim.sql's template filled with the rendered complete.sql (without its last line,
 * the final SELECT), claim.sql (its parameters after $1 moved up by three, behind complete's) and
 * a NULL for each column claim.sql returns (the settled rows' side of the UNION), counted from its
 * RETURNING list so a column added there needs nothing here.
 */
function completeAndClaimText(template: string, complete: string, claim: string): string {
  const lines = complete.trimEnd().split("\n");
  const last = lines.pop();
  if (last !== "SELECT id, lease_token FROM settled") {
    throw new ConveyorError(
      `complete.sql must end with "SELECT id, lease_token FROM settled" (complete-and-claim.sql builds on it); it ends with ${JSON.stringify(last)}`,
    );
  }
  const shifted = claim.replace(/\$(\d+)/g, (whole, n: string) => (n === "1" ? whole : `$${Number(n) + 3}`));
  const returning = claim.replace(/--.*$/gm, "").split(/\bRETURNING\b/);
  const list = returning.length === 2 ? returning[1]!.trim() : "";
  if (list === "" || /[()]/.test(list)) {
    throw new ConveyorError("claim.sql must end with one RETURNING list of plain columns (complete-and-claim.sql counts them)");
  }
  const nulls = Array.from({ length: list.split(",").length }, () => "NULL").join(", ");
  return filled(template, "complete-and-claim.sql", { complete: `${lines.join("\n")}\n`, claim: shifted, claimed_nulls: nulls });
}

/** Whether every id is greater than the one before it (so none repeats). */
function idsGrow(specs: readonly JobSpec[]): boolean {
  for (let i = 1; i < specs.length; i++) if (!(specs[i]!.id > specs[i - 1]!.id)) return false;
  return true;
}

/** The specs without the repeats of an id: its first occurrence is the one kept. */
function firstOfEachId(specs: readonly JobSpec[]): readonly JobSpec[] {
  const batch: JobSpec[] = [];
  const seen = new Set<string>();
  for (const spec of specs) {
    if (seen.has(spec.id)) continue;
    seen.add(spec.id);
    batch.push(spec);
  }
  return batch;
}

/** A unique violation of jobs' primary key: a job of that id is stored already. */
function isDuplicateJobId(error: unknown): boolean {
  const e = error as { code?: unknown; constraint?: unknown } | null;
  return typeof e === "object" && e !== null && e.code === "23505" && e.constraint === "jobs_pkey";
}

/** Byte-wise order, as COLLATE "C" sorts: the order dedup windows are locked in. */
function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function leaseKey(jobId: string, token: number): string {
  return `${token}:${jobId}`;
}

/**
 * One answer per lease, in input order, from the (id, token) pairs a statement applied. A lease
 * repeated within one batch is applied once: its first occurrence gets "applied".
 */
function settleResults(leases: readonly Lease[], applied: readonly SettledRow[]): SettleResult[] {
  const remaining = new Set(applied.map((r) => leaseKey(r.id, r.lease_token)));
  return leases.map((lease) => (remaining.delete(leaseKey(lease.jobId, lease.token)) ? "applied" : "stale"));
}

/** claim.sql's $2 (the queues as an array literal) and $11/$12 (their first and last name, byte-wise). */
function claimQueuesParam(queues: readonly string[]): { text: string; first: string | null; last: string | null } {
  const range = byteOrderRange(queues);
  return { text: textArray(queues), first: range?.first ?? null, last: range?.last ?? null };
}

function queuesOf(rows: readonly SettledRow[]): Set<string> {
  const queues = new Set<string>();
  for (const row of rows) if (row.queue) queues.add(row.queue);
  return queues;
}

function zeroCounts(): Record<JobState, number> {
  return { scheduled: 0, waiting: 0, "waiting-children": 0, active: 0, completed: 0, dead: 0, cancelled: 0 };
}

/** pg, and most drivers, answer `{ rows }`; some adapters answer the row array itself. */
function rowsOf<R>(result: unknown): R[] {
  if (Array.isArray(result)) return result as R[];
  const rows = typeof result === "object" && result !== null ? (result as { rows?: unknown }).rows : undefined;
  if (Array.isArray(rows)) return rows as R[];
  throw new InvalidInputError(
    "the { tx } client's query(text, params) resolved to neither an array of rows nor an object with a `rows` array; " +
      "wrap your driver so it returns one of them",
  );
}

/** `host:port/database`, never the password. */
function describeUrl(connectionString: string): string {
  try {
    const url = new URL(connectionString);
    return `//${url.username ? `${decodeURIComponent(url.username)}@` : ""}${url.host}${url.pathname}`;
  } catch {
    return "(connection string)";
  }
}

function describePool(pool: Pool): string {
  const o = (pool as { options?: { host?: unknown; port?: unknown; database?: unknown; connectionString?: unknown } }).options ?? {};
  if (typeof o.connectionString === "string") return describeUrl(o.connectionString);
  const host = typeof o.host === "string" ? o.host : "";
  const port = typeof o.port === "number" || typeof o.port === "string" ? `:${o.port}` : "";
  const database = typeof o.database === "string" ? `/${o.database}` : "";
  return host || database ? `//${host}${port}${database}` : "(your pool)";
}
