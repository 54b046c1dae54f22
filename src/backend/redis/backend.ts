/**
 * The Redis backend: every transition of a job is one Lua script (lua/*.lua), run atomically by
 * Redis on the keys of one queue. See keys.ts for the data layout and README.md for memory,
 * durability and cluster notes.
 *
 * Round trips decide throughput, so every call is one round trip where it can be: a batch
 * (enqueue, heartbeat, complete, fail, release) is one script call per queue it touches, and the
 * calls for several queues go out together (ioredis writes commands without waiting for earlier
 * replies, so N concurrent calls cost one round trip of latency). One script per batch rather
 * than one per job: Redis parses one command instead of N, the script's setup runs once, and the
 * batch is atomic as a whole, which is stronger than the contract asks. Batches are bounded by a
 * worker's concurrency, so no script holds Redis for long.
 */
import { positiveInt } from "../../core/checks.js";
import { WakeListeners } from "../listeners.js";
import { checkedBackend, PRUNE_DEFAULTS, RESCUE_DEFAULTS } from "../checked.js";
import { boundLogLines, JOB_LOG_MAX_LINES, type JobLogLine } from "../../core/job-log.js";

import { randomBytes } from "node:crypto";
import type {
  Backend,
  HoldOptions,
  CancelResult,
  Capabilities,
  ClaimedJob,
  ClaimRequest,
  Completion,
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
  WakeListener,
} from "../contract.js";
import { FULL_STORE_FEATURES } from "../contract.js";
import { allOrNothingOf } from "../contract.js";
import type { Clock } from "../../core/clock.js";
import { asStoreError, errorCodes, SOCKET_ERROR_CODES } from "../store-errors.js";
import {
  AmbiguousJobIdError,
  ConveyorError,
  InvalidInputError,
  LeaseExpiredError,
  quarantineMessage,
  StoreUnavailableError,
  type LeaseLossReason,
} from "../../core/errors.js";
import {
  type ChildFailurePolicy,
  type ErrorInfo,
  type FlowInfo,
  type FlowNodeSpec,
  type JobRecord,
  type JobSpec,
  type JobState,
  type Lease,
} from "../../core/job.js";
import { listArgsOf, staleCursor } from "../listing.js";
import type { FinishedTiming, FinishedWindow } from "../contract.js";
import { planDedupBatch } from "../dedup.js";
import { checkFlow } from "../flows.js";
import type { Json } from "../../core/json.js";
import { consoleLogger, type Logger } from "../../core/logger.js";
import { checkName } from "../../core/spec.js";
import { reportThrottle, type QueueFlow, type StoredQueueLimits } from "../../core/flow.js";
import { laneOf } from "../../core/job-flow.js";
import { encodeError, encodeOptions, encodeWorker, fieldsFromPacked, jobIdFromStored, storedJobId, toRecord, workerIdOf, type JobFields } from "./codec.js";
import {
  CONNECTION_DROPPED,
  connect,
  describe,
  GAVE_UP_MESSAGES,
  gaveUpConnecting,
  InFlight,
  isCluster,
  keepConnecting,
  quit,
  type Client,
  type ConnectionOption,
} from "./connection.js";
import type { RedisOptions } from "ioredis";
import { scheduleFromRow } from "../schedule-rows.js";
import type { ScheduleFiring, ScheduleWrite, StoredSchedule } from "../../core/schedule.js";
import { checkWaitForReplicas, ReplicaWaiter, type WaitForReplicas } from "./replica-wait.js";
import { LAYOUT_VERSION, PrefixKeys, QueueKeys } from "./keys.js";
import { RedisLayoutTooNewError } from "./layout-error.js";
import { loadScripts, ScriptRunner, type ScriptArg } from "./scripts.js";
import { RedisRescueHold } from "./rescue-hold.js";
import { ReadyTurns } from "./ready-index.js";
import { RedisEventLog, type StreamEntry } from "./event-log.js";
import { eventLogMismatchError, eventLogOffError, eventLogOption } from "../event-log-switch.js";
import type { EventLogPage, EventPrunePolicy } from "../../core/queue-events.js";
import { shown } from "../../core/checks.js";

/** Options of {@link RedisBackend}. */
export interface RedisBackendOptions {
  /**
   * Which Redis: a URL (`redis://[user:password@]host[:port][/db]`, `rediss://` for TLS), ioredis
   * options, or an ioredis client (`Redis`, or `Cluster` for Redis Cluster). A client you pass in
   * stays yours: `close()` leaves it connected. Required.
   */
  connection: ConnectionOption;
  /**
   * First segment of every key and of the wake-up channel, so several applications (or test runs)
   * can share one Redis. Letters, digits and `_ - . :`. Default `"conveyor"`.
   */
  prefix?: string;
  /**
   * Source of "now" (ms since the epoch) for leases, run_at and retention. Default: Redis' own
   * clock (`TIME`, read inside each script), so workers on machines with skewed clocks still agree.
   * Inject a `FakeClock` to test time-dependent behaviour.
   */
  clock?: Clock;
  /**
   * Refuse to work with a Redis whose `maxmemory-policy` is not `noeviction`: any other policy lets
   * Redis silently delete job data when memory runs short. Default `true`; set `false` only when
   * the risk is understood (e.g. a Redis with no maxmemory at all that reports another policy).
   */
  checkEvictionPolicy?: boolean;
  /**
   * Most due scheduled jobs one claim moves into the waiting lanes (earliest first), bounding how
   * long one claim can hold Redis after a large batch of delayed jobs comes due. Default 1000.
   */
  promoteBatch?: number;
  /** Where connection loss and recovery are reported. Default: JSON lines on stderr (warnings and errors). */
  logger?: Logger;
  /**
   * ioredis options for the connection Conveyor opens from `connection` (a URL or options; not a
   * client you pass in), under Conveyor's own (`connectionName`, `autoResendUnfulfilledCommands`).
   * On a Cluster URL they are each node's (`redisOptions`). E.g. `{ maxRetriesPerRequest: 1 }`:
   * on a single server a call fails after one reconnect attempt (about 50 ms) while Redis cannot
   * be reached, instead of ioredis' default 20 (about 10 s of reconnects); `failFast` does that on
   * every topology. Default: none (ioredis' defaults).
   */
  clientOptions?: RedisOptions;
  /**
   * For one call and done (the CLI's one-shot commands): when the store cannot be reached, a call
   * fails after one reconnect attempt with StoreUnavailableError saying what could not be reached,
   * on a single server (`maxRetriesPerRequest: 1`), through Sentinel (the sentinels tried twice)
   * and on a Cluster (its startup nodes tried twice; the cluster client then stays closed, and
   * later calls fail at once). Only for the connection Conveyor opens from `connection` (a URL or
   * options), over `clientOptions`. Default `false`: calls wait through an outage, on a single
   * server for ioredis' 20 reconnects (about 10 s), on a Cluster and through Sentinel until the
   * store is back.
   */
  failFast?: boolean;
  /**
   * Send `WAIT replicas timeoutMs` after every script, in the same round trip, and answer only
   * once that many replicas have the write: an asynchronous replica promoted after a primary's
   * crash then has every write Conveyor acknowledged (docs/failover.md measures the window this
   * closes, and the cost). Fewer acknowledgements within the timeout fail the call with
   * ReplicaWaitError (the write did happen on the primary). `timeoutMs` defaults to 1000 ms.
   * Default: off (replies as soon as the primary has the write). Known issue: calls in flight
   * across a Sentinel failover may never settle with this on (docs/failover.md).
   */
  waitForReplicas?: WaitForReplicas;
  /**
   * Keep the durable event log (one stream per queue, written by the same script as each change):
   * what `queue.events()`, `GET /v1/events` and the event-driven dashboard read. It costs about
   * 1.7 times the Redis CPU per job (docs/events.md has the measurement). With `false` no stream is
   * written, `queue.events()` and `GET /v1/events` refuse by name (`capabilities.eventLog` false)
   * and the dashboard and job event streams poll instead. One setting per prefix: the first
   * process on a prefix records it, and a process configured otherwise refuses to start, so every
   * process on one prefix agrees. In URLs: `?eventLog=off`. Default `true`.
   */
  eventLog?: boolean;
}

const DEFAULT_PREFIX = "conveyor";
const PREFIX_PATTERN = /^[A-Za-z0-9_.:-]{1,64}$/;
const DEFAULT_PROMOTE_BATCH = 1_000;
/**
 * A read-streams call (lua/read-streams-1.lua) reads no further stream once it has this many
 * entries: a script holds Redis until it ends, so a reader catching up on many queues' backlogs
 * takes several calls of a few ms each (about 5,000 entries of XRANGE), while an idle read of
 * hundreds of queues takes one.
 */
export const STREAM_ENTRIES_PER_CALL = 5_000;

/** The most streams one read-streams call names (its keys and as many arguments). */
const STREAMS_PER_CALL = 1_000;

/** Redis' TIME reply (seconds, microseconds) in ms. */
function redisTimeMs(seconds: string | number, micros: string | number): number {
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

/** Oldest Redis with script effects replication (TIME before writes), which every script needs. */
const MIN_REDIS_VERSION = [5, 0] as const;
/** Longest a due-time wake-up timer is set for; the claim it triggers arms the next one. */
const MAX_WAKE_TIMER_MS = 60_000;
/** Lease-to-queue entries kept before claims sweep ones whose lease is long over (at most once a minute). */
const LEASE_CACHE_SWEEP_AT = 10_000;
const LEASE_SWEEP_INTERVAL_MS = 60_000;
/** A lost connection is reported at most this often per connection, in ms. */
const ERROR_LOG_INTERVAL_MS = 10_000;

const LEASE_EXPIRED_ERROR = encodeError({ name: "LeaseExpiredError", message: new LeaseExpiredError().message, stack: null });
const QUARANTINE_ERROR = encodeError({
  name: "LeaseExpiredError",
  message: quarantineMessage("__STALLS__"),
  stack: null,
});

/** Where a lease issued by this backend lives, so settles need no lookup. */
interface LeaseHome {
  queue: string;
  token: number;
  /** Local estimate of the lease expiry (ms since epoch), for sweeping forgotten entries. */
  expiresAt: number;
}

/** Added to the finish-time score of a job kept forever (KEPT in lua/_common.lua). */
const FINISHED_KEPT_OFFSET = 2 ** 50;
/** A job read for list(): its record and its insertion number within its queue. */
interface Listed {
  record: JobRecord;
  seq: number;
}

/**
 * Conveyor's Redis backend.
 *
 * ```ts
 * const backend = new RedisBackend({ connection: "redis://localhost:6379" });
 * ```
 *
 * The constructor does no I/O; the first call checks the server (version, eviction policy, data
 * layout) and loads the scripts, and rejects with the reason if the server does not qualify.
 * `await backend.migrate()` runs those checks up front.
 */
export class RedisBackend implements Backend {
  readonly description: string;
  readonly capabilities: Capabilities = Object.freeze({
    ...FULL_STORE_FEATURES,
    transactionalEnqueue: false,
    crossProcessWakeups: true,
    multiProcess: true,
    transactionalCompletion: false,
    claimAcrossQueues: "turns",
    flows: "across-queues",
    jobFlowKeys: true,
    jobIdsPerQueue: true,
    eventLog: true,
  });
  readonly idempotency: IdempotencyStore;

  private readonly client: Client;
  private readonly ownsClient: boolean;
  private readonly inFlight: InFlight;
  private readonly scripts: ScriptRunner;
  private readonly keys: PrefixKeys;
  /** RedisBackendOptions.eventLog: which script set runs, checked against the prefix's record. */
  private readonly eventLogOn: boolean;
  private readonly clock: Clock | null;
  /** WAIT after each script (option waitForReplicas), or null. */
  private readonly replicaWait: ReplicaWaiter | null;
  /** Queues whose store failed lately: their leases are left alone by the rescue (rescue-hold.ts). */
  private readonly rescueHold: RedisRescueHold;
  private readonly checkEvictionPolicy: boolean;
  private readonly promoteBatch: number;
  private readonly logger: Logger;
  private readonly queueKeys = new Map<string, QueueKeys>();
  /** Queues this process has put in the registry since its connection (re)opened. */
  private readonly registered = new Set<string>();
  private readonly leases = new Map<string, LeaseHome>();
  private readonly listeners = new WakeListeners({ start: () => this.startSubscriber(), stop: () => void this.stopSubscriber() });
  private readonly wakeTimers = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  private subscriber: Client | null = null;
  private readonly onReconnect = () => this.registered.clear();
  private readonly onConnectionLost = () => this.rescueHold.noteConnectionLost();
  private preparing: Promise<void> | null = null;
  private claimRotation = 0;
  /** Which named queues a claim over several visits (ready-index.ts). */
  private readonly readyTurns: ReadyTurns;
  /** The options text enqueueArgs encoded last, with the fields it was encoded from. */
  private lastEncodedOptions: (OptionFields & { text: string }) | null = null;
  private lastSweepAt = 0;
  /** The last connection error ioredis reported, for a clearer message when Redis is unreachable. */
  private lastConnectionError = "";
  private closed = false;

  constructor(options: RedisBackendOptions) {
    if (options?.connection === undefined || options.connection === null) {
      throw new InvalidInputError(`RedisBackend needs { connection }: a redis:// URL, ioredis options or an ioredis client`);
    }
    const prefix = options.prefix ?? DEFAULT_PREFIX;
    if (!PREFIX_PATTERN.test(prefix)) {
      throw new InvalidInputError(
        `prefix must be 1-64 letters, digits and _ - . : (no braces: they would break the cluster hash tags); ` + `got ${shown(prefix)}`,
      );
    }
    this.keys = new PrefixKeys(prefix);
    this.eventLogOn = eventLogOption(options.eventLog);
    this.clock = options.clock ?? null;
    this.checkEvictionPolicy = options.checkEvictionPolicy ?? true;
    this.promoteBatch = positiveInt("promoteBatch", options.promoteBatch ?? DEFAULT_PROMOTE_BATCH);
    this.logger = options.logger ?? consoleLogger();
    this.idempotency = { once: (key, ttlMs) => this.once(key, ttlMs) };

    const { client, owned } = connect(options.connection, prefix, options.clientOptions, options.failFast === true);
    this.client = client;
    this.ownsClient = owned;
    if (owned) this.reportConnection(client, "commands");
    this.inFlight = new InFlight(client);
    // After a reconnect Redis may be a different server (a restart, a failover): register the
    // queues again on next use instead of trusting what this process wrote before.
    this.client.on("ready", this.onReconnect);
    this.description = `${describe(options.connection)} (prefix ${prefix})`;
    const replicaWait = options.waitForReplicas ? new ReplicaWaiter(client, checkWaitForReplicas(options.waitForReplicas)) : null;
    this.replicaWait = replicaWait;
    this.rescueHold = new RedisRescueHold(() => (this.clock === null ? Date.now() : this.clock.now()), isCluster(client), isRedisUnavailable);
    // A lost connection to the one server holds every queue's rescue, in-flight calls or not.
    this.client.on("close", this.onConnectionLost);
    this.scripts = new ScriptRunner(
      (command, args) => this.send((c) => (replicaWait && command !== "SCRIPT" ? replicaWait.call(command, args) : c.call(command, args))),
      isCluster(client),
      loadScripts(this.eventLogOn, isCluster(client)),
      (keys, error) => this.rescueHold.noteFailure(keys, error),
      (keys) => this.rescueHold.noteAnswer(keys),
      this.keys.ready,
    );
    this.readyTurns = new ReadyTurns(!isCluster(client), async () => (await this.scripts.run("ready", [this.keys.ready], [this.nowArg()])) as string[]);
    if (!this.eventLogOn) this.capabilities = Object.freeze({ ...this.capabilities, eventLog: false });
    // A child's settle and its parent's release are one script, which on a cluster cannot reach
    // another queue's slot.
    if (isCluster(client)) this.capabilities = Object.freeze({ ...this.capabilities, flows: "within-queue" });
    // Callers get the store behind the checking facade (../checked.ts): arguments checked once, for every store.
    return checkedBackend(this);
  }

  // ── lifecycle ────────────────────────────────────────────────────────────────────────────

  /**
   * Checks the server and the stored data layout (upgrading an older layout in place: see
   * LAYOUT_VERSION in keys.ts) and loads the scripts. Nothing to create: Redis keys come into being
   * with their first job. Safe to call many times and from many processes.
   */
  async migrate(): Promise<void> {
    this.preparing = null;
    await this.ready();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.listeners.clear();
    for (const { timer } of this.wakeTimers.values()) clearTimeout(timer);
    this.wakeTimers.clear();
    await this.stopSubscriber();
    // A client passed in may serve many backends over its life: leave no listener behind.
    this.client.off("ready", this.onReconnect);
    this.client.off("close", this.onConnectionLost);
    this.inFlight.detach();
    this.replicaWait?.detach();
    if (this.ownsClient) await quit(this.client);
  }

  /** `await using backend = new …Backend(…)`: `close()` when the scope ends. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  async now(): Promise<number> {
    if (this.clock !== null) return Math.floor(this.clock.now());
    const [seconds, micros] = await this.send((c) => c.time());
    return redisTimeMs(seconds!, micros!);
  }

  // ── producing and claiming ───────────────────────────────────────────────────────────────

  async enqueue(given: readonly JobSpec[], options?: EnqueueOptions): Promise<EnqueueResult[]> {
    if (given.length === 0) return [];
    const plan = planDedupBatch(given, options);
    const specs = plan.specs;
    if (specs.length === 0) return [];
    const allOrNothing = allOrNothingOf(specs, options);
    await this.ready();
    const now = this.nowArg();
    if (inOneQueue(specs)) return plan.answers(await this.enqueueOneQueue(now, specs, allOrNothing));
    const byQueue = new Map<string, number[]>();
    specs.forEach((spec, i) => {
      const positions = byQueue.get(spec.queue);
      if (positions === undefined) byQueue.set(spec.queue, [i]);
      else positions.push(i);
    });
    const results = new Array<EnqueueResult>(specs.length);
    // Before any event of theirs (see enqueueOneQueue).
    const registering = this.register([...byQueue.keys()]);
    if (registering !== null) await registering;
    await Promise.all(
      [...byQueue].map(async ([queue, positions]) => {
        const k = this.queue(queue);
        const args = this.enqueueArgs(
          now,
          queue,
          positions.map((i) => specs[i]!),
          allOrNothing,
        );
        const keys = [k.meta, k.sched, k.idx, k.names, ...this.addAttemptKey(k)];
        const duplicates = (await this.scripts.run("enqueue", keys, args)) as Array<number | string>;
        positions.forEach((i, j) => {
          results[i] = enqueueAnswer(specs[i]!.id, duplicates[j]!);
        });
      }),
    );
    return plan.answers(results);
  }

  async enqueueFlow(nodes: readonly FlowNodeSpec[], _options?: Pick<EnqueueOptions, "tx">): Promise<EnqueueResult[]> {
    const childCount = checkFlow(nodes, this.capabilities.flows === "across-queues");
    await this.ready();
    const args: ScriptArg[] = [this.nowArg()];
    nodes.forEach((node, i) => {
      const { spec } = node;
      args.push(
        this.queue(spec.queue).base,
        spec.queue,
        spec.id,
        spec.name,
        spec.payload,
        spec.priority,
        spec.runAt ?? "",
        spec.delayMs,
        encodeOptions(spec),
        spec.meta ?? "",
        childCount[i]!,
        node.onChildFailure,
        node.parent === null ? 0 : node.parent + 1,
        flowFieldsArg(spec),
      );
    });
    await this.register([...new Set(nodes.map((n) => n.spec.queue))]);
    const root = this.queue(nodes[0]!.spec.queue);
    const flags = (await this.scripts.run("flow", [root.meta, ...this.addAttemptKey(root)], args)) as number[];
    return nodes.map((node, i) => ({ id: node.spec.id, duplicate: flags[i] === 1 }));
  }

  /** Reads the job, then its children's outcome records (and the live state of the unsettled ones). */
  async flow(id: string, queue?: string): Promise<FlowInfo | null> {
    await this.ready();
    const found = await this.find(id, queue);
    if (found === null) return null;
    const f = found.fields;
    const info: FlowInfo = {
      parent: f.pi === undefined ? null : { id: f.pi, queue: f.pq ?? "" },
      onChildFailure: f.pf === undefined ? null : (f.pf as ChildFailurePolicy),
      pendingChildren: Number(f.pc ?? 0),
      children: [],
    };
    if (f.pf === undefined) return info;
    const entries = await this.send((c) => c.hgetall(`${this.queue(found.queue).base}fc:${id}`));
    const positions = Object.keys(entries)
      .filter((k) => !k.startsWith("o"))
      .sort((a, b) => Number(a) - Number(b));
    const now = await this.now();
    info.children = await Promise.all(
      positions.map(async (pos) => {
        const [childQueue = "", childId = "", name = ""] = entries[pos]!.split("\n");
        const outcome = entries[`o${pos}`];
        if (outcome !== undefined) {
          const o = JSON.parse(outcome) as { s: JobState; r: Json | null; e: ErrorInfo | null };
          return { id: childId, queue: childQueue, name, state: o.s, settled: true, result: o.r, error: o.e };
        }
        const [live] = await this.read(childQueue, [childId]);
        const state: JobState = live ? toRecord(childId, childQueue, live, now).state : "cancelled";
        return { id: childId, queue: childQueue, name, state, settled: false, result: null, error: null };
      }),
    );
    return info;
  }

  /**
   * enqueue's common case, every job in one queue (each Queue.add and addBulk): one script call
   * and nothing else once the queue is registered. Kept lean, as a single add is mostly this
   * process's and Redis' fixed cost per call (docs/performance-redis.md).
   */
  private async enqueueOneQueue(now: string, specs: readonly JobSpec[], allOrNothing: boolean): Promise<EnqueueResult[]> {
    const queue = specs[0]!.queue;
    const k = this.queue(queue);
    const keys = [k.meta, k.sched, k.idx, k.names];
    keys.push(...this.addAttemptKey(k));
    // Registered before its first event is written: a reader of the event log takes a queue it
    // does not find in the registry to have no event before the time it read it (event-log.ts).
    // Once registered, the script goes out in this same turn (awaiting register's null would
    // still wait one): a close begun right after the call then fails it as closed, as before.
    const registering = this.register([queue]);
    if (registering !== null) await registering;
    const flags = (await this.scripts.run("enqueue", keys, this.enqueueArgs(now, queue, specs, allOrNothing))) as Array<number | string>;
    const results = new Array<EnqueueResult>(specs.length);
    for (let i = 0; i < specs.length; i++) results[i] = enqueueAnswer(specs[i]!.id, flags[i]!);
    return results;
  }

  /** The ARGV of enqueue-4.lua for jobs of one queue (also the tail of schedule-fire-5.lua's). */
  private enqueueArgs(now: string, queue: string, specs: readonly JobSpec[], allOrNothing: boolean): ScriptArg[] {
    const args: ScriptArg[] = [
      now,
      this.keys.channel,
      queue,
      allOrNothing ? "1" : "",
      ...dedupArgs(
        specs,
        specs.map((_, i) => i),
      ),
    ];
    // Options text is the same for every job built from one set of defaults: encode it once, and
    // keep it for the next call (a run of single adds shares it too).
    let last = this.lastEncodedOptions;
    for (const spec of specs) {
      if (last === null || !sameOptions(last, spec)) last = { ...optionFieldsOf(spec), text: encodeOptions(spec) };
      args.push(
        spec.id,
        spec.name,
        spec.payload,
        spec.priority,
        spec.runAt ?? "",
        spec.delayMs,
        last.text,
        spec.meta ?? "",
        flowFieldsArg(spec),
        storedJobId(spec.id),
      );
    }
    this.lastEncodedOptions = last;
    return args;
  }

  // ── schedules (rules in src/core/schedule.ts) ────────────────────────────────────────────

  async scheduleUpsert(write: ScheduleWrite): Promise<{ created: boolean; schedule: StoredSchedule }> {
    await this.ready();
    await this.register([write.queue]);
    const reply = (await this.scripts.run("schedule-upsert", [this.queue(write.queue).crons], [this.nowArg(), write.id, write.definition, write.timing])) as [
      number,
      string,
      string,
      string,
      string,
      string,
    ];
    const [created, anchorAt, lastTickAt, version, createdAt, updatedAt] = reply;
    return {
      created: created === 1,
      schedule: scheduleFromRow({
        queue: write.queue,
        id: write.id,
        definition: write.definition,
        anchor_at: Number(anchorAt),
        last_tick_at: lastTickAt === "" ? null : Number(lastTickAt),
        version: Number(version),
        created_at: Number(createdAt),
        updated_at: Number(updatedAt),
      }),
    };
  }

  async scheduleRemove(queue: string, id: string): Promise<boolean> {
    await this.ready();
    return (await this.scripts.run("schedule-remove", [this.queue(queue).crons], [id])) === 1;
  }

  async scheduleList(queue?: string): Promise<StoredSchedule[]> {
    await this.ready();
    const queues = queue === undefined ? await this.knownQueues() : [queue];
    const perQueue = await Promise.all(
      queues.map(async (name) => {
        const flat = (await this.scripts.run("schedule-list", [this.queue(name).crons], [])) as string[];
        const found: StoredSchedule[] = [];
        for (let i = 0; i < flat.length; i += 7) {
          found.push(
            scheduleFromRow({
              queue: name,
              id: flat[i]!,
              definition: flat[i + 1]!,
              anchor_at: Number(flat[i + 2]),
              last_tick_at: flat[i + 3] === "" ? null : Number(flat[i + 3]),
              version: Number(flat[i + 4]),
              created_at: Number(flat[i + 5]),
              updated_at: Number(flat[i + 6]),
            }),
          );
        }
        return found.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
      }),
    );
    return perQueue.flat();
  }

  async scheduleFire(firing: ScheduleFiring): Promise<{ fired: boolean; jobs: EnqueueResult[] }> {
    for (const spec of firing.jobs) {
      if (spec.queue !== firing.queue) throw new InvalidInputError(`a firing of schedule ${firing.id} enqueues jobs of its queue ${firing.queue} only`);
    }
    await this.ready();
    const k = this.queue(firing.queue);
    const args: ScriptArg[] = [
      firing.id,
      String(firing.version),
      firing.expectedTickAt === null ? "" : String(firing.expectedTickAt),
      String(firing.tickAt),
      // No enqueue arguments at all when the firing enqueues nothing (misfire "skip" dropped the ticks).
      ...(firing.jobs.length === 0 ? [] : this.enqueueArgs(this.nowArg(), firing.queue, firing.jobs, false)),
    ];
    const [fired, ...flags] = (await this.scripts.run("schedule-fire", [k.meta, k.sched, k.idx, k.names, k.crons], args)) as Array<number | string>;
    if (fired !== 1) return { fired: false, jobs: [] };
    return { fired: true, jobs: firing.jobs.map((spec, i) => enqueueAnswer(spec.id, flags[i]!)) };
  }

  async claim(request: ClaimRequest): Promise<ClaimedJob[]> {
    const { limit } = request;
    if (request.queues.length === 0 || request.names.length === 0) return [];
    const { leaseMs, names, queues } = request;
    this.rescueHold.noteLease(leaseMs);
    const worker = encodeWorker(request.worker);
    await this.ready();
    // Queues are tried in turn, each claim starting after the last queue the one before took
    // from, so a busy queue cannot starve the ones after it: round-robin over the queues with
    // work (a start moved one further per call instead made a queue named just after a busy one
    // wait until the start came round, about as many claims as queues are named). Claim order
    // (priority, run_at, insertion) holds within each queue. With many queues named, only those
    // the ready index lists, in the same order.
    const start = this.claimRotation++ % queues.length;
    let lastTakenFrom = -1;
    const turns = await this.readyTurns.turns(queues, start);
    // Each claim script of a claim by the index also returns the index as it leaves it: the next
    // claim's hint. Not in a pass over every queue (a dense list, the full pass): its 1,000 replies would carry it.
    const hint = turns?.wantsHint === true ? "1" : "";
    const claimed: ClaimedJob[] = [];
    let emptyVisits = 0;
    const visit = async (at: number): Promise<void> => {
      const queue = queues[at]!;
      const before = claimed.length;
      const k = this.queue(queue);
      const now = this.nowArg();
      const reply = (await this.scripts.run(
        "claim",
        [k.meta, k.sched, k.active, k.idx],
        [now, leaseMs, limit - claimed.length, worker, this.promoteBatch, hint, ...names],
      )) as unknown[];
      if (hint !== "") this.readyTurns.keepHint(queues, reply.pop() as string[]);
      if (Array.isArray(reply[0])) {
        // Flow control let none start (claim-4.lua): when a slot opens, or -1 for "when one finishes".
        const retryIn = Number(reply[0][0]);
        reportThrottle(request.onThrottle, queue, retryIn < 0 ? null : retryIn);
        emptyVisits++;
        return;
      }
      if (reply[0] !== null && reply[0] !== undefined) this.wakeAfter(queue, Number(reply[0]));
      // A claim that took the rate's last open slot ends with { ms until the next one }.
      const rateFull = reply.length % 2 === 0 && Array.isArray(reply[reply.length - 1]) ? (reply.pop() as unknown[]) : null;
      if (rateFull !== null) reportThrottle(request.onThrottle, queue, Number(rateFull[0]));
      for (let i = 1; i + 1 < reply.length; i += 2) {
        const id = String(reply[i]);
        const fields = fieldsFromPacked(String(reply[i + 1]));
        // `now` only decides whether a scheduled job reads as waiting; a claimed job is active.
        const job = toRecord(id, queue, fields, 0);
        const lease = job.lease!;
        claimed.push({ job, lease: { jobId: id, token: lease.token }, leaseExpiresAt: lease.expiresAt });
        this.leases.set(id, { queue, token: lease.token, expiresAt: Date.now() + leaseMs });
      }
      if (claimed.length === before) emptyVisits++;
      else lastTakenFrom = at;
    };
    if (turns === null) {
      for (let n = 0; n < queues.length && claimed.length < limit; n++) await visit((start + n) % queues.length);
    } else {
      for (let n = 0; n < turns.positions.length && claimed.length < limit; n++) await visit(turns.positions[n]!);
      // The hint is the index as the last claim left it: a queue that became ready since is only in the index.
      if (turns.fromHint && claimed.length < limit) {
        const rest = await this.readyTurns.rest(queues, start, new Set(turns.positions));
        for (let n = 0; n < rest.length && claimed.length < limit; n++) await visit(rest[n]!);
      }
    }
    if (turns === null) this.readyTurns.visitedInTurn(queues, emptyVisits);
    // Nothing taken: the next claim starts one further all the same (counted when this one started,
    // so claims running at once start at different queues).
    if (lastTakenFrom >= 0) this.claimRotation = lastTakenFrom + 1;
    if (this.leases.size > LEASE_CACHE_SWEEP_AT && Date.now() - this.lastSweepAt > LEASE_SWEEP_INTERVAL_MS) this.sweepLeases();
    return claimed;
  }

  // ── settling (fenced by lease token) ─────────────────────────────────────────────────────

  async markBuffered(leases: readonly Lease[], buffered: boolean): Promise<void> {
    if (leases.length === 0) return;
    await this.ready();
    const { byQueue } = await this.groupByQueue(leases);
    await Promise.all(
      [...byQueue].map(([queue, positions]) =>
        this.scripts.run("mark-buffered", [this.queue(queue).meta], [buffered ? "1" : "0", ...positions.flatMap((i) => [leases[i]!.jobId, leases[i]!.token])]),
      ),
    );
  }

  async heartbeat(leases: readonly Lease[], leaseMs: number): Promise<HeartbeatResult> {
    if (leases.length === 0) return { lost: [] };
    const ms = leaseMs;
    this.rescueHold.noteLease(ms);
    await this.ready();
    const reasons = new Array<LeaseLossReason | null>(leases.length).fill(null);
    const { byQueue, unknown } = await this.groupByQueue(leases);
    for (const i of unknown) reasons[i] = "gone";
    const now = this.nowArg();
    await Promise.all(
      [...byQueue].map(async ([queue, positions]) => {
        const k = this.queue(queue);
        const reply = (await this.scripts.run(
          "heartbeat",
          [k.meta, k.active],
          [now, ms, ...positions.flatMap((i) => [leases[i]!.jobId, leases[i]!.token])],
        )) as unknown[];
        for (let j = 0; j + 1 < reply.length; j += 2) reasons[positions[Number(reply[j]) - 1]!] = String(reply[j + 1]) as LeaseLossReason;
        for (const i of positions) {
          if (reasons[i] === null) this.touchLease(leases[i]!, ms);
          else this.forgetLease(leases[i]!);
        }
      }),
    );
    const lost: HeartbeatResult["lost"] = [];
    reasons.forEach((reason, i) => {
      if (reason !== null) lost.push({ lease: leases[i]!, reason });
    });
    return { lost };
  }

  async complete(items: readonly Completion[]): Promise<SettleResult[]> {
    if (items.length === 0) return [];
    return this.settle("complete", items, (item) => [item.lease.jobId, item.lease.token, JSON.stringify(item.result ?? null)]);
  }

  async fail(items: readonly Failure[]): Promise<SettleResult[]> {
    if (items.length === 0) return [];
    const delays = new Map(items.map((item) => [item, item.retryDelayMs]));
    return this.settle("fail", items, (item) => [item.lease.jobId, item.lease.token, encodeError(item.error), delays.get(item) ?? ""]);
  }

  async release(leases: readonly Lease[]): Promise<SettleResult[]> {
    if (leases.length === 0) return [];
    return this.settle(
      "release",
      leases.map((lease) => ({ lease })),
      (item) => [item.lease.jobId, item.lease.token],
    );
  }

  async progress(lease: Lease, progress: Json): Promise<SettleResult> {
    await this.ready();
    const [queue] = (await this.groupByQueue([lease])).byQueue.keys();
    if (queue === undefined) return "stale";
    const applied = await this.scripts.run(
      "progress",
      [this.queue(queue).job(lease.jobId)],
      [lease.token, JSON.stringify(progress ?? null), this.nowArg(), lease.jobId],
    );
    return applied === 1 ? "applied" : "stale";
  }

  async appendLogs(lease: Lease, lines: readonly string[]): Promise<SettleResult> {
    await this.ready();
    const [queue] = (await this.groupByQueue([lease])).byQueue.keys();
    if (queue === undefined) return "stale";
    const k = this.queue(queue);
    const applied = await this.scripts.run(
      "append-logs",
      [k.job(lease.jobId), k.log(lease.jobId)],
      [this.nowArg(), lease.token, JOB_LOG_MAX_LINES, ...boundLogLines(lines)],
    );
    return applied === 1 ? "applied" : "stale";
  }

  async logs(id: string, queue?: string): Promise<JobLogLine[]> {
    await this.ready();
    const found = await this.find(id, queue);
    if (found === null) return [];
    const entries = await this.send((c) => c.lrange(this.queue(found.queue).log(id), 0, -1));
    return entries.map(parseLogEntry);
  }

  /** complete, fail and release: one script call per queue, results back in input order. */
  private async settle<T extends { lease: Lease }>(
    kind: "complete" | "fail" | "release",
    items: readonly T[],
    encode: (item: T) => ScriptArg[],
  ): Promise<SettleResult[]> {
    await this.ready();
    const results = new Array<SettleResult>(items.length).fill("stale");
    const { byQueue } = await this.groupByQueue(items.map((item) => item.lease));
    const now = this.nowArg();
    await Promise.all(
      [...byQueue].map(async ([queue, positions]) => {
        const k = this.queue(queue);
        const args = positions.flatMap((i) => encode(items[i]!));
        let flags: unknown[];
        if (kind === "complete") {
          flags = (await this.scripts.run("complete", [k.meta, k.active, k.completed, k.expiry], [now, ...args])) as unknown[];
        } else if (kind === "release") {
          flags = (await this.scripts.run("release", [k.meta, k.active], [now, this.keys.channel, queue, ...args])) as unknown[];
        } else {
          const reply = (await this.scripts.run("fail", [k.meta, k.active, k.sched, k.dead, k.expiry], [now, this.keys.channel, queue, ...args])) as unknown[];
          flags = reply[0] as unknown[];
          if (reply[1] !== null && reply[1] !== undefined) this.wakeAfter(queue, Number(reply[1]));
        }
        positions.forEach((i, j) => {
          results[i] = flags[j] === 1 ? "applied" : "stale";
          // Settled or refused, this lease is over either way.
          this.forgetLease(items[i]!.lease);
        });
      }),
    );
    return results;
  }

  // ── maintenance ──────────────────────────────────────────────────────────────────────────

  async rescueExpired(options: RescueOptions = {}): Promise<RescuedJob[]> {
    // Checked by the facade (../checked.ts); defaults from its one table when called bare.
    const { maxStalls, limit } = { ...RESCUE_DEFAULTS, ...options };
    await this.ready();
    const [queues, now] = await Promise.all([this.knownQueues(), this.now()]);
    // One cheap read per queue first, so the scripts run only where a lease has expired.
    const earliest = await Promise.all(queues.map((queue) => this.earliestLease(queue)));
    const rescued: RescuedJob[] = [];
    for (const [i, queue] of queues.entries()) {
      const first = earliest[i]!;
      if (rescued.length >= limit) break;
      if (first.length < 2 || Number(first[1]) > now) continue;
      const k = this.queue(queue);
      // Its store failed (its slot was moving) a moment ago: the holders could not renew, give them time to.
      if (this.rescueHold.isHeld(k.meta)) continue;
      const reply = (await this.scripts.run(
        "rescue",
        [k.meta, k.active, k.dead, k.expiry, k.idx],
        [this.nowArg(), this.keys.channel, queue, maxStalls, limit - rescued.length, LEASE_EXPIRED_ERROR, QUARANTINE_ERROR],
      )) as unknown[];
      for (let j = 0; j + 4 < reply.length; j += 5) {
        rescued.push({
          id: String(reply[j]),
          queue,
          name: String(reply[j + 1]),
          state: String(reply[j + 2]) === "dead" ? "dead" : "waiting",
          attempt: Number(reply[j + 3]),
          workerId: workerIdOf(reply[j + 4] as string | null),
        });
      }
    }
    return rescued;
  }

  /** The queue's earliest lease expiry (member, score), its failure or answer noted for the rescue hold. */
  private async earliestLease(queue: string): Promise<string[]> {
    const keys = [this.queue(queue).active];
    try {
      const first = await this.send((c) => c.zrange(keys[0]!, 0, 0, "WITHSCORES"));
      this.rescueHold.noteAnswer(keys);
      return first;
    } catch (error) {
      this.rescueHold.noteFailure(keys, error);
      throw error;
    }
  }

  async promoteDue(): Promise<number> {
    await this.ready();
    const queues = await this.knownQueues();
    const counts = await Promise.all(
      queues.map(async (queue) => {
        const k = this.queue(queue);
        let total = 0;
        for (;;) {
          const moved = Number(await this.scripts.run("promote", [k.meta, k.sched], [this.nowArg(), this.promoteBatch, this.keys.channel, queue]));
          total += moved;
          if (moved < this.promoteBatch) return total;
        }
      }),
    );
    return counts.reduce((a, b) => a + b, 0);
  }

  async prune(policy: PrunePolicy = {}): Promise<PruneResult> {
    const { maxCompletedPerQueue: maxCompleted, maxDeadPerQueue: maxDead, limit } = { ...PRUNE_DEFAULTS, ...policy };
    await this.ready();
    let jobs = 0;
    for (const queue of await this.knownQueues()) {
      if (jobs >= limit) break;
      const k = this.queue(queue);
      jobs += Number(
        await this.scripts.run("prune", [k.meta, k.completed, k.cancelled, k.dead, k.expiry, k.idx], [this.nowArg(), maxCompleted, maxDead, limit - jobs]),
      );
    }
    // On Redis' clock idempotency keys carry a TTL and Redis deletes them itself.
    const idempotencyKeys = this.clock === null ? 0 : Number(await this.scripts.run("prune-keys", [this.keys.onceIndex], [this.nowArg(), limit]));
    return { jobs, idempotencyKeys };
  }

  // ── event log (event-log.ts) ─────────────────────────────────────────────────────────────

  async readEvents(cursor: string, limit: number): Promise<EventLogPage> {
    this.requireEventLog("read the event log");
    await this.ready();
    return this.eventLog.readEvents(cursor, limit);
  }

  async latestEventCursor(): Promise<string> {
    this.requireEventLog("read the event log");
    await this.ready();
    return this.eventLog.latestEventCursor();
  }

  async pruneEvents(policy?: EventPrunePolicy): Promise<number> {
    this.requireEventLog("prune the event log");
    await this.ready();
    return this.eventLog.pruneEvents(policy);
  }

  private requireEventLog(what: string): void {
    if (!this.eventLogOn) throw eventLogOffError(this.description, what, "prefix");
  }

  private readonly eventLog = new RedisEventLog({
    queues: () => this.knownQueues(),
    streamKey: (queue) => this.queue(queue).events,
    queuesAt: async () => {
      const [s, us, queues] = (await this.scripts.run("queues-at", [this.keys.queues], [])) as [string, string, string[]];
      return { queues: queues.sort(), timeMs: redisTimeMs(s, us) };
    },
    readStreams: async (reads, count) => {
      // A cluster's streams live on different nodes: one script per stream, all sent at once.
      if (isCluster(this.client)) {
        return Promise.all(
          reads.map(async ({ key, start }) => {
            const [s, us, entries] = (await this.scripts.run("read-events", [key], [start, count])) as [string, string, StreamEntry[]];
            return { entries, timeMs: redisTimeMs(s, us) };
          }),
        );
      }
      // One server: many streams per script, each call reading until its entries reach a bound.
      const readPart = async (part: ReadonlyArray<{ key: string; start: string }>): Promise<Array<{ entries: StreamEntry[]; timeMs: number }>> => {
        const read: Array<{ entries: StreamEntry[]; timeMs: number }> = [];
        while (read.length < part.length) {
          const rest = part.slice(read.length);
          const answer = await this.scripts.run(
            "read-streams",
            rest.map((r) => r.key),
            [count, STREAM_ENTRIES_PER_CALL, ...rest.map((r) => r.start)],
          );
          const [s, us, lists] = answer as [string, string, StreamEntry[][]];
          // It reads its first stream whatever the bound: an answer of none would never end.
          if (lists.length === 0) throw new ConveyorError(`read-streams answered no stream of ${rest.length}; expected at least the first`);
          const timeMs = redisTimeMs(s, us);
          for (const entries of lists) read.push({ entries, timeMs });
        }
        return read;
      };
      const parts: Array<Promise<Array<{ entries: StreamEntry[]; timeMs: number }>>> = [];
      for (let i = 0; i < reads.length; i += STREAMS_PER_CALL) parts.push(readPart(reads.slice(i, i + STREAMS_PER_CALL)));
      return (await Promise.all(parts)).flat();
    },
    prune: async (key, minAt, maxEvents, limit) => Number(await this.scripts.run("prune-events", [key], [minAt, maxEvents, limit])),
    now: () => this.now(),
  });

  // ── inspection ───────────────────────────────────────────────────────────────────────────

  async get(id: string, queue?: string): Promise<JobRecord | null> {
    await this.ready();
    const found = await this.find(id, queue);
    return found === null ? null : toRecord(id, found.queue, found.fields, await this.now());
  }

  /**
   * Jobs newest first (by insertion within a queue; across queues by creation time). Reads in
   * pages outside any script, so a long scan never blocks Redis; jobs that move while it reads
   * may be missed or seen in their newer state.
   */
  async list(filter: ListFilter = {}, page: Page = {}): Promise<JobRecord[]> {
    const { limit, offset, after, before, createdFrom, createdUntil } = listArgsOf(filter, page);
    await this.ready();
    let beforeSeq: number | null = null;
    if (after !== null) {
      const [cursor] = await this.read(filter.queue!, [after]);
      if (!cursor) throw staleCursor(after, filter.queue!);
      beforeSeq = Number(cursor.s);
    }
    // The reverse cursor (previous page): jobs above it, read upwards, turned back to newest first.
    let afterSeq: number | null = null;
    if (before !== null) {
      const [cursor] = await this.read(filter.queue!, [before]);
      if (!cursor) throw staleCursor(before, filter.queue!, "before");
      afterSeq = Number(cursor.s);
    }
    const [queues, now] = await Promise.all([filter.queue !== undefined ? Promise.resolve([filter.queue]) : this.knownQueues(), this.now()]);
    const bounds = { beforeSeq, afterSeq, createdFrom, createdUntil };
    const perQueue = await Promise.all(queues.map((queue) => this.listQueue(queue, filter, offset + limit, now, bounds)));
    // Each queue's jobs already come newest first by insertion; only a merge across queues needs
    // another key, and creation time is the one they share.
    const merged = perQueue.length === 1 ? perQueue[0]! : perQueue.flat().sort((a, b) => b.record.createdAt - a.record.createdAt || b.seq - a.seq);
    // Upwards (reverse cursor) the `offset` skipped are the ones nearest the cursor: the last ones.
    const shown =
      afterSeq === null ? merged.slice(offset, offset + limit) : merged.slice(Math.max(0, merged.length - offset - limit), Math.max(0, merged.length - offset));
    return shown.map((listed) => listed.record);
  }

  async finishedWindow(queue: string, fromMs: number, untilMs: number, sampleLimit: number): Promise<FinishedWindow> {
    const args = { queue, fromMs, untilMs, sampleLimit }; // checked by the facade (../checked.ts)
    await this.ready();
    const k = this.queue(args.queue);
    const out: FinishedWindow = { completed: 0, dead: 0, samples: [] };
    for (const state of ["completed", "dead"] as const) {
      const key = state === "completed" ? k.completed : k.dead;
      // Scored by finished_at, or finished_at + 2^50 for a job kept forever (_common.lua KEPT): two ranges.
      const ranges = [0, FINISHED_KEPT_OFFSET].map((offset) => [args.fromMs + offset, `(${args.untilMs + offset}`] as const);
      const counts = await Promise.all(ranges.map(([lo, hi]) => this.send((c) => c.zcount(key, lo, hi))));
      out[state] = counts[0]! + counts[1]!;
      if (args.sampleLimit === 0 || out[state] === 0) continue;
      const ids = (await Promise.all(ranges.map(([lo, hi]) => this.send((c) => c.zrangebyscore(key, lo, hi, "LIMIT", 0, args.sampleLimit))))).flat();
      const samples: FinishedTiming[] = [];
      (await this.read(args.queue, ids)).forEach((f) => {
        // Pruned since the range was read.
        if (f !== null) samples.push({ state, runAt: Number(f.r), startedAt: f.sa === undefined ? null : Number(f.sa), finishedAt: Number(f.f) });
      });
      out.samples.push(...samples.sort((a, b) => a.finishedAt - b.finishedAt).slice(0, args.sampleLimit));
    }
    return out;
  }

  async stats(queue?: string): Promise<QueueStats[]> {
    await this.ready();
    const queues = queue === undefined ? await this.knownQueues() : [checkName("queue", queue)];
    return Promise.all(
      queues.map(async (name): Promise<QueueStats> => {
        const k = this.queue(name);
        const r = (await this.scripts.run("stats", [k.meta, k.sched, k.active, k.completed, k.cancelled, k.dead, k.names], [this.nowArg()])) as unknown[];
        const n = (i: number) => Number(r[i]);
        return {
          queue: name,
          paused: n(0) === 1,
          counts: { waiting: n(1), scheduled: n(2), "waiting-children": n(9), active: n(3), completed: n(4), cancelled: n(5), dead: n(6) },
          oldestWaitingAgeMs: r[7] === null || r[7] === undefined ? null : Math.max(0, n(8) - n(7)),
        };
      }),
    );
  }

  // ── administration ───────────────────────────────────────────────────────────────────────

  async cancel(id: string, queue?: string): Promise<CancelResult> {
    await this.ready();
    const found = await this.find(id, queue);
    if (found === null) return "not-found";
    const k = this.queue(found.queue);
    const result = await this.scripts.run("cancel", [k.meta, k.sched, k.active, k.cancelled, k.expiry, k.idx], [this.nowArg(), id]);
    return String(result) as CancelResult;
  }

  async replay(id: string, queue?: string): Promise<ReplayResult> {
    await this.ready();
    const found = await this.find(id, queue);
    if (found === null) return "not-found";
    const k = this.queue(found.queue);
    const result = await this.scripts.run("replay", [k.meta, k.dead, k.expiry, k.names], [this.nowArg(), id, this.keys.channel, found.queue]);
    return String(result) as ReplayResult;
  }

  async remove(id: string, queue?: string): Promise<RemoveResult> {
    await this.ready();
    const found = await this.find(id, queue);
    if (found === null) return "not-found";
    const k = this.queue(found.queue);
    const result = await this.scripts.run("remove", [k.meta, k.completed, k.cancelled, k.dead, k.expiry, k.idx], [id]);
    return String(result) as RemoveResult;
  }

  async pause(queue: string): Promise<void> {
    await this.setPaused(queue, true);
  }

  async resume(queue: string): Promise<void> {
    await this.setPaused(queue, false);
  }

  // ── flow control (src/core/flow.ts; the claim's part is in lua/claim-4.lua) ───────────────

  async setQueueLimits(queue: string, limits: StoredQueueLimits): Promise<void> {
    checkName("queue", queue);
    await this.ready();
    const k = this.queue(queue);
    const rate = limits.rate;
    await Promise.all([
      this.register([queue]),
      this.scripts.run(
        "flow-set",
        [k.flow, k.rate],
        [rate?.max ?? "", rate?.durationMs ?? "", limits.maxRunning ?? "", JSON.stringify(limits.maxRunningPerName), this.keys.channel, queue],
      ),
    ]);
  }

  async getQueueFlow(queue: string): Promise<QueueFlow | null> {
    checkName("queue", queue);
    await this.ready();
    const flowKey = this.queue(queue).flow;
    const fields = await this.send((c) => c.hgetall(flowKey));
    // A queue that has had jobs with a group or limiter key (ln) has a flow as on SQL, limits or not.
    if (fields.rm === undefined && fields.mr === undefined && fields.pn === undefined && fields.hu === undefined && fields.ln === undefined) return null;
    return {
      limits: {
        rate: fields.rm !== undefined && fields.rd !== undefined ? { max: Number(fields.rm), durationMs: Number(fields.rd) } : null,
        maxRunning: fields.mr === undefined ? null : Number(fields.mr),
        maxRunningPerName: fields.pn === undefined ? {} : (JSON.parse(fields.pn) as Record<string, number>),
      },
      heldUntil: fields.hu === undefined ? null : Number(fields.hu),
    };
  }

  async holdQueue(queue: string, forMs: number, options: HoldOptions = {}): Promise<void> {
    checkName("queue", queue);
    const ms = forMs;
    await this.ready();
    // With keyOfJob, the script holds that job's limiter key (kr:/kh: keys of its queue), if it has one.
    await this.scripts.run("flow-hold", [this.queue(queue).flow], [this.nowArg(), ms, options.keyOfJob ?? ""]);
  }

  private async setPaused(queue: string, paused: boolean): Promise<void> {
    checkName("queue", queue);
    await this.ready();
    await Promise.all([this.register([queue]), this.scripts.run("pause", [this.queue(queue).meta], [paused ? "1" : "0", this.keys.channel, queue])]);
  }

  private async once(key: string, ttlMs: number): Promise<boolean> {
    const ttl = ttlMs;
    await this.ready();
    if (this.clock === null) {
      // The value is this call's own token: a client that resends commands after a reconnect
      // (ioredis' default) may deliver this SET twice, and the second must not read as "taken".
      const token = randomBytes(8).toString("hex");
      const onceKey = this.keys.onceKey(key);
      if ((await this.send((c) => c.set(onceKey, token, "PX", ttl, "NX"))) === "OK") return true;
      return (await this.send((c) => c.get(onceKey))) === token;
    }
    const recorded = await this.scripts.run("once", [this.keys.onceKeyWithIndex(key), this.keys.onceIndex], [this.nowArg(), ttl]);
    return recorded === 1;
  }

  // ── wake-ups ─────────────────────────────────────────────────────────────────────────────

  /**
   * Wake-ups arrive over Redis pub/sub on a dedicated connection (a subscribed connection can run
   * nothing else). A message published before the subscription is in place is lost, so once it is
   * (at first, and again after every reconnect, when ioredis resubscribes) every known queue is
   * woken once: a listener misses nothing that happened while it was not yet, or no longer,
   * listening. A connection that dies silently only delays jobs until the worker's next poll.
   */
  subscribe(listener: WakeListener): () => void {
    return this.listeners.add(listener);
  }

  private startSubscriber(): void {
    if (this.subscriber !== null || this.closed) return;
    // SUBSCRIBE may be sent again after a reconnect (ioredis resubscribes anyway): unlike the
    // command connection, this one resends what it had in flight.
    const subscriber = isCluster(this.client) ? this.client.duplicate() : this.client.duplicate({ autoResendUnfulfilledCommands: true });
    if (this.ownsClient && !isCluster(subscriber) && subscriber.options.sentinels) keepConnecting(subscriber);
    this.subscriber = subscriber;
    this.reportConnection(subscriber, "wake-ups");
    let subscribedBefore = false;
    subscriber.on("ready", () => {
      // ioredis resubscribes by itself on reconnect; what was published meanwhile is gone.
      if (subscribedBefore) void this.catchUp();
    });
    subscriber.on("message", (_channel: string, message: string) => {
      // "<queue>": claimable now; "<queue> <ms>": a scheduled job comes due in <ms>.
      const [queue = "", dueIn] = message.split(" ");
      if (dueIn === undefined) this.wake(queue);
      else this.wakeAfter(queue, Number(dueIn));
    });
    subscriber
      .subscribe(this.keys.channel)
      .then(() => {
        subscribedBefore = true;
        return this.catchUp();
      })
      .catch((error: unknown) => {
        // Polling still finds the jobs; a reconnect subscribes again.
        this.logger.warn({ backend: this.description, err: String(error) }, "could not subscribe to Conveyor wake-ups; polling only");
      });
  }

  /** Wakes listeners for every known queue (wake-ups may have been missed). */
  private async catchUp(): Promise<void> {
    try {
      for (const queue of await this.knownQueues()) this.wake(queue);
    } catch {
      // Redis is unreachable: the poll after it comes back finds the jobs.
    }
  }

  private async stopSubscriber(): Promise<void> {
    const subscriber = this.subscriber;
    this.subscriber = null;
    if (subscriber !== null) await quit(subscriber);
  }

  /** Calls every listener; a throwing listener must not break the caller or the others. */
  private wake(queue: string): void {
    this.listeners.wake(queue);
  }

  /**
   * Wakes this process's listeners when a scheduled job of `queue` comes due, in `delayMs`, so
   * delayed jobs and retries start on time instead of at the next poll; the claim that follows
   * promotes them. Delays come from Redis (claim and fail replies, wake-up messages) as durations,
   * so a skewed local clock shifts nothing.
   */
  private wakeAfter(queue: string, delayMs: number): void {
    if (this.listeners.size === 0 || this.closed || !Number.isFinite(delayMs)) return;
    const delay = Math.min(MAX_WAKE_TIMER_MS, Math.max(0, delayMs));
    const at = performance.now() + delay;
    const existing = this.wakeTimers.get(queue);
    if (existing !== undefined && existing.at <= at) return;
    if (existing !== undefined) clearTimeout(existing.timer);
    const timer = setTimeout(() => {
      this.wakeTimers.delete(queue);
      this.wake(queue);
    }, delay);
    timer.unref();
    this.wakeTimers.set(queue, { at, timer });
  }

  // ── helpers ──────────────────────────────────────────────────────────────────────────────

  /**
   * Runs once before the first call (again after a failure): the server must be recent enough and
   * must not evict keys, and the stored layout must be one this code knows (or an older one, which
   * it upgrades).
   */
  private ready(): Promise<void> {
    if (this.closed) return Promise.reject(new ConveyorError(`${this.description} is closed`));
    this.preparing ??= this.prepare().catch((error: unknown) => {
      this.preparing = null;
      // ioredis gives up with "Reached the max retries per request limit", "None of startup nodes
      // is available" or "All sentinels are unreachable…" (the store boundary wraps them as
      // StoreUnavailableError): say what could not be reached and what to do instead, still as an
      // unreachable store (a worker waits for it; the CLI says so in one line).
      const gaveUp = error instanceof StoreUnavailableError ? error.cause : error;
      const unreachable = gaveUpConnecting(gaveUp, this.lastConnectionError);
      if (unreachable !== null) throw new StoreUnavailableError(this.description, { cause: new Error(unreachable, { cause: gaveUp }) });
      throw error;
    });
    return this.preparing;
  }

  private async prepare(): Promise<void> {
    const server = await this.send((c) => c.info("server"));
    // On a cluster every master holds jobs, so each must refuse to evict (the first command above
    // made the cluster client discover its nodes).
    const nodes: Client[] = isCluster(this.client) ? this.client.nodes("master") : [this.client];
    const policies = await Promise.all(nodes.map(async (node) => infoField(await this.inFlight.run(() => node.info("memory")), "maxmemory_policy")));
    const version = infoField(server, "redis_version");
    const [major = 0, minor = 0] = (version ?? "0.0").split(".").map(Number);
    if (major < MIN_REDIS_VERSION[0] || (major === MIN_REDIS_VERSION[0] && minor < MIN_REDIS_VERSION[1])) {
      throw new ConveyorError(`${this.description} runs Redis ${version ?? "(unknown version)"}; Conveyor needs Redis ${MIN_REDIS_VERSION.join(".")} or newer`);
    }
    const policy = policies.find((p) => p !== undefined && p !== "noeviction");
    if (this.checkEvictionPolicy && policy !== undefined) {
      throw new ConveyorError(
        `${this.description} runs with maxmemory-policy ${policy}: when memory runs short Redis would silently ` +
          `delete job data. Set "maxmemory-policy noeviction" in redis.conf (and CONFIG SET maxmemory-policy ` +
          `noeviction to apply it now), or pass checkEvictionPolicy: false to RedisBackend to accept the risk`,
      );
    }
    if (this.checkEvictionPolicy && policies.some((p) => p === undefined)) {
      this.logger.warn({ backend: this.description }, "could not read maxmemory-policy from INFO; make sure it is noeviction");
    }
    this.scripts.flagged = major >= 7;
    await this.scripts.loadAll();
    // Records this layout, or upgrades an older one in place (each older layout is valid data of
    // this one: see LAYOUT_VERSION); a newer one is left as it is and refused.
    const layout = Number(await this.scripts.run("layout", [this.keys.layout], [LAYOUT_VERSION]));
    if (layout > LAYOUT_VERSION) throw new RedisLayoutTooNewError(`prefix ${JSON.stringify(this.keys.prefix)}`, layout, LAYOUT_VERSION);
    if (layout < LAYOUT_VERSION) await this.stampLayout();
    await this.checkEventLogSetting();
    if (layout !== 0 && layout < LAYOUT_VERSION) {
      this.logger.warn(
        { backend: this.description, from: layout, to: LAYOUT_VERSION },
        "upgraded the Redis data layout in place (nothing rewritten); processes running an older Conveyor on this " +
          "prefix must be stopped: they cannot read jobs stored in the new layout",
      );
    }
  }

  /**
   * After an upgrade of the prefix's layout: stamps it on every known queue, so processes of an
   * older layout already connected stop at their next call on any queue (see layout_guard in
   * lua/_common.lua), not only on queues this process writes to later.
   */
  private async stampLayout(): Promise<void> {
    const queues = await this.send((c) => c.smembers(this.keys.queues));
    for (const queue of queues) await this.scripts.run("layout-stamp", [this.queue(queue).meta], []);
  }

  /**
   * Records this process's event log setting for the prefix, unless one is recorded already, and
   * refuses to run with a different one: with two settings on one prefix some changes would have
   * events and others not, and a reader would miss them without knowing. A prefix with jobs but
   * no record predates the setting, and had the log on.
   */
  private async checkEventLogSetting(): Promise<void> {
    const key = this.keys.eventLog;
    const wanted = this.eventLogOn ? "on" : "off";
    const layoutWasNew = await this.send((c) => c.exists(this.keys.queues));
    const initial = layoutWasNew === 0 ? wanted : "on";
    await this.send((c) => c.set(key, initial, "NX"));
    const stored = await this.send((c) => c.get(key));
    if (stored !== wanted) throw eventLogMismatchError(`prefix "${this.keys.prefix}"`, "prefix", stored === "on", this.eventLogOn);
  }

  /** Sends commands on the command connection; they fail rather than hang if it drops. */
  private send<T>(command: (client: Client) => Promise<T>): Promise<T> {
    return this.inFlight
      .run(() => command(this.client))
      .catch((error: unknown) => {
        throw asStoreError(error, this.description, isRedisUnavailable);
      });
  }

  /**
   * The attempt key of one add call, on a connection that may send it twice (InFlight.mayResend):
   * a resend then answers what the first run did, not "duplicate" for the call's own jobs.
   */
  private addAttemptKey(queue: QueueKeys): string[] {
    return this.inFlight.mayResend ? [queue.addAttempt(randomBytes(9).toString("base64url"))] : [];
  }

  /** ARGV[1] of every script: the injected clock's now, or '' to use Redis TIME inside. */
  private nowArg(): string {
    return this.clock === null ? "" : String(Math.floor(this.clock.now()));
  }

  private queue(name: string): QueueKeys {
    let keys = this.queueKeys.get(name);
    if (keys === undefined) {
      keys = new QueueKeys(this.keys.prefix, name);
      this.queueKeys.set(name, keys);
    }
    return keys;
  }

  /**
   * Adds queues to the registry unless this connection already did. Null when it did for every
   * one: nothing to wait for, so a caller's next command goes out in the same turn.
   */
  private register(queues: readonly string[]): Promise<void> | null {
    const missing = queues.filter((queue) => !this.registered.has(queue));
    if (missing.length === 0) return null;
    return this.send((c) => c.sadd(this.keys.queues, ...missing)).then(() => {
      for (const queue of missing) this.registered.add(queue);
    });
  }

  private async knownQueues(): Promise<string[]> {
    return (await this.send((c) => c.smembers(this.keys.queues))).sort();
  }

  /**
   * Finds a job by id. Job ids are unique per queue; the id alone does not say which queue, so
   * every known queue is asked at once (one round trip). When several queues hold the id, the
   * first (by name) that satisfies `prefer` wins, else the first that holds it.
   */
  /**
   * The job `id` of `queue`, or of whichever queue holds it when no queue is named. Ids are unique
   * per queue here, so an id held by several queues names no one job: refused, never guessed
   * (a guess let one API key act on another's job through a shared id).
   */
  private async find(id: string, queue?: string): Promise<{ queue: string; fields: JobFields } | null> {
    if (queue !== undefined) {
      checkName("queue", queue);
      const [fields] = await this.read(queue, [id]);
      return fields ? { queue, fields } : null;
    }
    const queues = await this.knownQueues();
    const hashes = await Promise.all(queues.map(async (name) => (await this.read(name, [id]))[0]!));
    const holders = queues.flatMap((name, i) => (hashes[i] ? [{ queue: name, fields: hashes[i] }] : []));
    if (holders.length > 1) throw new AmbiguousJobIdError(id);
    return holders[0] ?? null;
  }

  /**
   * The queue of each lease. Leases this backend issued are remembered; any other (another
   * process's, or a forged one) is looked up in every known queue, preferring the queue where the
   * job is held under that very token. Returns input positions grouped by queue, and the positions
   * of leases whose job exists nowhere.
   */
  private async groupByQueue(leases: readonly Lease[]): Promise<{ byQueue: Map<string, number[]>; unknown: number[] }> {
    const byQueue = new Map<string, number[]>();
    const unknown: number[] = [];
    const add = (queue: string, i: number) => {
      const group = byQueue.get(queue);
      if (group === undefined) byQueue.set(queue, [i]);
      else group.push(i);
    };
    const missing: number[] = [];
    leases.forEach((lease, i) => {
      const home = this.leases.get(lease.jobId);
      if (home !== undefined && home.token === lease.token) add(home.queue, i);
      else missing.push(i);
    });
    if (missing.length > 0) {
      const queues = await this.knownQueues();
      // Per queue, the job of every missing lease (null where the queue has no such job).
      const jobs = await Promise.all(
        queues.map((queue) =>
          this.read(
            queue,
            missing.map((i) => leases[i]!.jobId),
          ),
        ),
      );
      missing.forEach((i, m) => {
        const found = jobs.map((perQueue) => perQueue[m]!);
        const holder = found.findIndex((fields) => fields !== null && Number(fields.k ?? 0) === leases[i]!.token);
        const at = holder >= 0 ? holder : found.findIndex((fields) => fields !== null);
        if (at >= 0) add(queues[at]!, i);
        else unknown.push(i);
      });
    }
    return { byQueue, unknown };
  }

  private forgetLease(lease: Lease): void {
    if (this.leases.get(lease.jobId)?.token === lease.token) this.leases.delete(lease.jobId);
  }

  private touchLease(lease: Lease, leaseMs: number): void {
    const home = this.leases.get(lease.jobId);
    if (home !== undefined && home.token === lease.token) home.expiresAt = Date.now() + leaseMs;
  }

  /**
   * Drops remembered leases that ended long ago without a settle (their worker lost them): a
   * forgotten lease only costs a lookup, a remembered one costs memory forever.
   */
  private sweepLeases(): void {
    this.lastSweepAt = Date.now();
    const cutoff = Date.now() - 3_600_000;
    for (const [id, home] of this.leases) if (home.expiresAt < cutoff) this.leases.delete(id);
  }

  /** One queue's jobs matching `filter`, newest first, at most `want`. */
  private async listQueue(
    queue: string,
    filter: ListFilter,
    want: number,
    now: number,
    bounds: { beforeSeq: number | null; afterSeq: number | null; createdFrom: number | null; createdUntil: number | null },
  ): Promise<Listed[]> {
    const k = this.queue(queue);
    const chunk = Math.min(500, Math.max(32, want));
    // Fast lanes hold only waiting jobs; everything else is in idx.
    const withLanes = filter.state === undefined || filter.state === "waiting";
    const names = !withLanes ? [] : filter.name !== undefined ? [filter.name] : await this.send((c) => c.smembers(k.names));
    const upwards = bounds.afterSeq !== null;
    /** How many of a lane's jobs have a seq below `seq` (a binary search in one read-only script). */
    const lanePosition = async (name: string, seq: number) => Number(await this.scripts.run("lane-position", [k.meta, k.fastLane(name)], [String(seq)]));
    const sources = [
      new ListSource(chunk, async (from, to) => {
        // idx is scored by seq: a cursor starts the read right next to it, however deep.
        const ids = await this.send((c) =>
          upwards
            ? c.zrangebyscore(k.idx, `(${bounds.afterSeq}`, "+inf", "LIMIT", from, to - from + 1)
            : bounds.beforeSeq === null
              ? c.zrevrange(k.idx, from, to)
              : c.zrevrangebyscore(k.idx, `(${bounds.beforeSeq}`, "-inf", "LIMIT", from, to - from + 1),
        );
        return this.readJobs(queue, ids, now);
      }),
      ...names.map((name) => {
        // A fast lane is oldest first, in seq order: a cursor's place in it is found by bisection.
        // Its entries are the ids' stored forms (id_store in lua/_common.lua).
        const laneIds = async (first: number, last: number) => (await this.send((c) => c.lrange(k.fastLane(name), first, last))).map(jobIdFromStored);
        let start: Promise<number> | null = null;
        return new ListSource(chunk, async (from, to) => {
          if (upwards) {
            start ??= lanePosition(name, bounds.afterSeq! + 1);
            const first = await start;
            return this.readJobs(queue, await laneIds(first + from, first + to), now);
          }
          if (bounds.beforeSeq === null) {
            const ids = await laneIds(-(to + 1), -(from + 1));
            return this.readJobs(queue, ids.reverse(), now);
          }
          start ??= lanePosition(name, bounds.beforeSeq);
          const end = (await start) - 1 - from;
          if (end < 0) return [];
          const ids = await laneIds(Math.max(0, end - (to - from)), end);
          return this.readJobs(queue, ids.reverse(), now);
        });
      }),
    ];
    const out: Listed[] = [];
    const seen = new Set<string>();
    while (out.length < want) {
      await Promise.all(sources.map((source) => source.fill()));
      let best: ListSource | null = null;
      for (const source of sources) {
        const head = source.peek();
        if (head !== undefined && (best === null || (upwards ? head.seq < best.peek()!.seq : head.seq > best.peek()!.seq))) best = source;
      }
      if (best === null) break;
      const next = best.take();
      // A job claimed while this runs moves from its lane into idx and may be read twice.
      if (seen.has(next.record.id)) continue;
      seen.add(next.record.id);
      if (filter.name !== undefined && next.record.name !== filter.name) continue;
      if (filter.state !== undefined && next.record.state !== filter.state) continue;
      // Fast lanes are read from their newest end; jobs at or above the cursor are skipped here.
      if (bounds.beforeSeq !== null && next.seq >= bounds.beforeSeq) continue;
      if (bounds.afterSeq !== null && next.seq <= bounds.afterSeq) continue;
      if (bounds.createdFrom !== null && next.record.createdAt < bounds.createdFrom) continue;
      if (bounds.createdUntil !== null && next.record.createdAt >= bounds.createdUntil) continue;
      out.push(next);
    }
    return upwards ? out.reverse() : out;
  }

  private async readJobs(queue: string, ids: readonly string[], now: number): Promise<Listed[]> {
    const hashes = await this.read(queue, ids);
    const listed: Listed[] = [];
    ids.forEach((id, i) => {
      const fields = hashes[i]!;
      // Deleted (pruned, or finished with retention 0) since the index was read.
      if (fields !== null) listed.push({ record: toRecord(id, queue, fields, now), seq: Number(fields.s) });
    });
    return listed;
  }

  /**
   * Jobs of one queue by id, null where it has none, in one snapshot: a waiting job may be a
   * compact record in a bucket rather than a hash of its own (see keys.ts), which only a script
   * can resolve atomically.
   */
  private async read(queue: string, ids: readonly string[]): Promise<(JobFields | null)[]> {
    if (ids.length === 0) return [];
    const reply = (await this.scripts.run("read", [this.queue(queue).meta], ids)) as (string | null)[];
    return reply.map((packed) => (packed === null ? null : fieldsFromPacked(packed)));
  }

  /**
   * Logs a connection's loss (throttled: ioredis retries every few seconds while Redis is down)
   * and its recovery. Commands meanwhile wait in ioredis' offline queue, or fail to their caller.
   */
  private reportConnection(connection: Client, role: string): void {
    let lastError = "";
    let lastLoggedAt = 0;
    let lost = false;
    connection.on("error", (error: Error) => {
      lastError = error.message;
      // A cluster's "Failed to refresh slots cache." carries the last startup node's own error.
      const nodeError = (error as { lastNodeError?: unknown }).lastNodeError;
      this.lastConnectionError = nodeError instanceof Error ? nodeError.message : error.message;
    });
    connection.on("reconnecting", () => {
      lost = true;
      if (Date.now() - lastLoggedAt < ERROR_LOG_INTERVAL_MS) return;
      lastLoggedAt = Date.now();
      this.logger.warn({ backend: this.description, connection: role, err: lastError || "connection closed" }, "Redis connection lost; reconnecting");
    });
    connection.on("ready", () => {
      if (!lost) return;
      lost = false;
      lastError = "";
      lastLoggedAt = 0;
      this.logger.warn({ backend: this.description, connection: role }, "Redis connection restored");
    });
  }
}

/** Reads a job index page by page (positions `from`..`to`, newest first). */
class ListSource {
  private buffer: Listed[] = [];
  private offset = 0;
  private done = false;

  constructor(
    private readonly chunk: number,
    private readonly read: (from: number, to: number) => Promise<Listed[]>,
  ) {}

  async fill(): Promise<void> {
    while (this.buffer.length === 0 && !this.done) {
      const from = this.offset;
      this.offset += this.chunk;
      const page = await this.read(from, from + this.chunk - 1);
      // Pages are read by position; a short page (or an empty one) is the end of the index.
      if (page.length === 0) this.done = true;
      this.buffer = page;
    }
  }

  peek(): Listed | undefined {
    return this.buffer[0];
  }

  take(): Listed {
    return this.buffer.shift()!;
  }
}

/**
 * Redis errors that mean "not now": a refused or lost connection (ioredis reports a closed
 * connection and exhausted reconnect attempts without a code), and the error replies Redis sends
 * while it loads its data set or a cluster is reconfiguring (the first word is Redis' error code).
 */
const REDIS_BUSY_REPLIES = ["LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "BUSY "];
const IOREDIS_CONNECTION_MESSAGES = ["Connection is closed", "Stream isn't writeable", "Reached the max retries per request limit", ...GAVE_UP_MESSAGES];

function isRedisUnavailable(error: unknown): boolean {
  if (errorCodes(error).some((code) => SOCKET_ERROR_CODES.has(code) || code === CONNECTION_DROPPED)) return true;
  if (!(error instanceof Error)) return false;
  if (error.name === "MaxRetriesPerRequestError") return true;
  if (error.name === "ReplyError") return REDIS_BUSY_REPLIES.some((word) => error.message.startsWith(word));
  return IOREDIS_CONNECTION_MESSAGES.some((m) => error.message.startsWith(m));
}

function infoField(info: string, field: string): string | undefined {
  const match = new RegExp(`^${field}:(.*)$`, "m").exec(info);
  return match?.[1]?.trim();
}

function inOneQueue(specs: readonly JobSpec[]): boolean {
  const queue = specs[0]!.queue;
  for (let i = 1; i < specs.length; i++) if (specs[i]!.queue !== queue) return false;
  return true;
}

/** The fields of a spec its options text (encodeOptions) holds. */
type OptionFields = Pick<JobSpec, "maxAttempts" | "retainCompletedMs" | "retainDeadMs" | "timeoutMs" | "backoff">;

/** The fields, with a copy of the backoff: the cache outlives the call, and a caller may change its object later. */
function optionFieldsOf(spec: JobSpec): OptionFields {
  const { maxAttempts, retainCompletedMs, retainDeadMs, timeoutMs, backoff } = spec;
  return { maxAttempts, retainCompletedMs, retainDeadMs, timeoutMs, backoff: { ...backoff } };
}

function sameOptions(a: OptionFields, b: OptionFields): boolean {
  return (
    a.maxAttempts === b.maxAttempts &&
    a.retainCompletedMs === b.retainCompletedMs &&
    a.retainDeadMs === b.retainDeadMs &&
    a.timeoutMs === b.timeoutMs &&
    sameBackoff(a.backoff, b.backoff)
  );
}

function sameBackoff(a: JobSpec["backoff"], b: JobSpec["backoff"]): boolean {
  if (a.type !== b.type || a.delayMs !== b.delayMs) return false;
  return a.type !== "exponential" || b.type !== "exponential" || a.maxDelayMs === b.maxDelayMs;
}

/** The enqueue script's dedup block: the count, then position (from 1), key, ttl and mode per windowed job. */
function dedupArgs(specs: readonly JobSpec[], positions: readonly number[]): ScriptArg[] {
  const args: ScriptArg[] = [0];
  positions.forEach((i, j) => {
    const window = specs[i]!.dedup;
    if (window !== undefined) args.push(j + 1, window.key, window.ttlMs, window.mode);
  });
  args[0] = (args.length - 1) / 4;
  return args;
}

/** One job's answer from the enqueue script: 0 stored, 1 duplicate id, or "<outcome> <id>" from a dedup window. */
function enqueueAnswer(id: string, reply: number | string): EnqueueResult {
  if (typeof reply !== "string") return { id, duplicate: reply === 1 };
  const space = reply.indexOf(" ");
  return { id: reply.slice(space + 1), duplicate: true, dedup: reply.slice(0, space) as "dropped" | "extended" | "replaced" };
}

/** A log entry as append-logs-2.lua stores it: "<at> <attempt> <line>". */
function parseLogEntry(entry: string): JobLogLine {
  const first = entry.indexOf(" ");
  const second = entry.indexOf(" ", first + 1);
  return { at: Number(entry.slice(0, first)), attempt: Number(entry.slice(first + 1, second)), line: entry.slice(second + 1) };
}

/**
 * A job's group and limiter key as the enqueue scripts store them (hash fields, see keys.ts):
 * a JSON array of field, value, ..., or "" for a job without either.
 */
function flowFieldsArg(spec: JobSpec): string {
  const flow = spec.flow;
  if (flow === undefined || (flow.group === null && flow.limiter === null)) return "";
  const fields: string[] = ["ln", laneOf(flow)];
  if (flow.group !== null) fields.push("gk", flow.group.key, "gc", String(flow.group.concurrency));
  if (flow.limiter !== null) fields.push("lk", flow.limiter.key, "lm", String(flow.limiter.max), "ld", String(flow.limiter.durationMs));
  return JSON.stringify(fields);
}
