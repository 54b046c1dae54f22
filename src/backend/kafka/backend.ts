/**
 * The Kafka backend: Conveyor jobs as records of Kafka topics, behind the `Backend` contract, so
 * the `Worker`, the CLI (`--db kafka://…`) and the HTTP service run on Kafka.
 *
 * - **Enqueue = produce**, keyed, with `acks = -1` (every in-sync replica has it) before the call
 *   resolves. The value is the job's envelope (the same format the RabbitMQ backend writes: the
 *   payload and options, the attempt count and history), so a retry copy or dead letter carries
 *   the job's whole state.
 * - **Claim = consume** through one consumer group (`groupId`): the members share the partitions,
 *   records of an assigned partition are buffered here and handed out by `claim` with a lease
 *   that names the record. A partition's offset is committed only up to its first record whose
 *   job is not settled yet, and only after the settle (completed, or its retry copy / dead letter
 *   acknowledged with `acks = -1`). A process that dies leaves those uncommitted: the member that
 *   takes the partition over runs them again (at least once).
 * - **Retries** go to `<queue>.retry` as copies that are not claimed before their run time (the
 *   runtime's full-jitter backoff decides it, as for every backend); **dead letters** to
 *   `<queue>.dead` with the same forensics headers the `KafkaWorker` writes, readable, replayable
 *   and removable through a dead-letter view (a private consumer of the dead topics).
 *
 * What a log cannot do is declared in `capabilities` and refused by name
 * (`UnsupportedByStoreError`, HTTP 501): job records by id, cancel, priorities, unique ids, pause,
 * an injected clock, idempotency keys, dedup windows, flow limits, schedules, flows. docs/kafka.md
 * says why each is missing and what to use instead.
 */
import type { Admin, Consumer, EachBatchPayload, Kafka, KafkaMessage, Producer } from "kafkajs";
import { nonNegativeInt, positiveInt, retryDelayMs } from "../../core/checks.js";
import { systemClock, type Clock } from "../../core/clock.js";
import { ConveyorError, InvalidInputError, StoreUnavailableError, UnsupportedByStoreError, type LeaseLossReason } from "../../core/errors.js";
import type { QueueFlow } from "../../core/flow.js";
import type { AttemptRecord, ErrorInfo, FlowInfo, FlowNodeSpec, JobRecord, JobSpec, JobState, Lease, WorkerIdentity } from "../../core/job.js";
import type { JobLogLine } from "../../core/job-log.js";
import { consoleLogger, type Logger } from "../../core/logger.js";
import type { ScheduleFiring, ScheduleWrite, StoredSchedule } from "../../core/schedule.js";
import { checkName } from "../../core/spec.js";
import { loadKafkajs, openKafka, parseKafkaUrl } from "../../kafka/client.js";
import { failureHeaders, HEADER, headerStrings } from "../../kafka/headers.js";
import { groupLag, type PartitionLag } from "../../kafka/lag.js";
import { decode, encode, envelopeOf, recordOf, type Envelope } from "../amqp/envelope.js";
import type {
  Backend,
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
  PruneResult,
  QueueStats,
  FinishedWindow,
  RemoveResult,
  ReplayResult,
  RescuedJob,
  SettleResult,
  WakeListener,
} from "../contract.js";
import { allOrNothingOf } from "../contract.js";
import { checkedBackend, featureRefusal } from "../checked.js";
import { listArgsOf, pageDeadLetters } from "../listing.js";
import { DeadLetterView, DEAD_MARKER } from "./dead-view.js";
import { checkTopicPrefix, TopicNames, type TopicKind } from "./topics.js";
import { shown } from "../../core/checks.js";

/** Options of {@link KafkaBackend}. */
export interface KafkaBackendOptions {
  /** `kafka://host:9092[,host2:9092]`. Give `url`, `brokers` or `kafka`. */
  url?: string;
  /** Seed brokers, `host:port`. */
  brokers?: string[];
  /** Your own kafkajs client (ssl, sasl…). */
  kafka?: Kafka;
  /** Prefix of every topic (`<prefix>.<queue>`, `.retry`, `.dead`), 1-64 of `[a-zA-Z0-9_-]`. Default "conveyor". */
  prefix?: string;
  /** The consumer group every worker of this store shares. Default `<prefix>.workers`. */
  groupId?: string;
  /**
   * The Kafka message key of a job, which decides its partition. `"queue"` (default): every job of
   * a queue in one partition, claimed in FIFO order as on the other backends, and one process of
   * the group consumes a queue at a time (its concurrency is the queue's). `"id"`: jobs spread
   * over the topic's partitions by id, consumed by up to as many processes as there are
   * partitions, in order per partition only.
   */
  partitionKey?: "queue" | "id";
  /** Queues `stats()`, the lag and dead-letter commands without a queue look at, besides those used. Default none. */
  queues?: readonly string[];
  /**
   * How long a claim waits for records when fewer than its limit are buffered, ms. A Worker is
   * woken by every fetched record anyway, so 0 suits it; a caller that claims right after
   * enqueueing (scripts, tests) may want a moment for the fetch. Default 0.
   */
  claimWaitMs?: number;
  /** Records buffered per partition before its fetching pauses (resumes at half). Default 1000. */
  maxBufferedPerPartition?: number;
  /** The group drops a member silent this long and hands its partitions to the others, ms. Default 30000. */
  sessionTimeoutMs?: number;
  /** Heartbeat to the group coordinator this often, ms. Default 3000. */
  heartbeatIntervalMs?: number;
  /** Longest a fetch waits at the broker for new records, ms (also bounds how late a due retry copy is seen). Default 1000. */
  fetchMaxWaitMs?: number;
  /** Client id the brokers see. Default "conveyor-backend". */
  clientId?: string;
  /** Timestamps of records and of attempt history, and when a retry copy is due. Default the system clock. */
  clock?: Clock;
  /** A processed-keys store for `ctx.once()` (e.g. a PostgreSQL or Redis backend's `idempotency`). Default none: refused. */
  idempotency?: IdempotencyStore;
  /** Default JSON lines on stderr (warnings and errors). */
  logger?: Logger;
}

/** A fetched record of an assigned partition, until its job is settled. */
interface Entry {
  readonly part: PartitionState;
  readonly offset: number;
  readonly envelope: Envelope;
  state: "buffered" | "held" | "settled";
  token: number;
  attempt: number;
  startedAt: number;
  worker: WorkerIdentity | null;
  /** Arrival order in this process: ties of run time are claimed in it. */
  readonly seq: number;
}

/** An assigned partition of a work or retry topic. */
interface PartitionState {
  readonly topic: string;
  readonly partition: number;
  readonly queue: string;
  readonly kind: TopicKind;
  /** Unsettled records, in offset order. */
  readonly entries: Entry[];
  /** The offset to commit: the first record not settled (−1 before any record was seen). */
  next: number;
  paused: boolean;
  revoked: boolean;
}

const DEFAULT_PREFIX = "conveyor";

export class KafkaBackend implements Backend {
  readonly description: string;
  readonly capabilities: Capabilities;
  readonly idempotency: IdempotencyStore;
  readonly groupId: string;
  readonly topics: TopicNames;

  private readonly brokers: string[];
  private kafka: Kafka | null;
  private readonly options: KafkaBackendOptions;
  private readonly partitionKey: "queue" | "id";
  private readonly claimWaitMs: number;
  private readonly maxBuffered: number;
  private readonly fetchMaxWaitMs: number;
  private readonly clock: Clock;
  private readonly logger: Logger;
  /** Queues known to this process (the `queues` option and every queue used). */
  private readonly known = new Set<string>();

  private producer: Producer | null = null;
  private admin: Admin | null = null;
  private connecting: Promise<void> | null = null;
  private closed = false;

  private consumer: Consumer | null = null;
  /** Queues the running consumer subscribed (work and retry topics). */
  private subscribed = new Set<string>();
  private consuming: Promise<void> | null = null;
  private readonly parts = new Map<string, PartitionState>();
  private readonly held = new Map<number, Entry>();
  private nextToken = 1;
  private seq = 0;
  private turn = 0;
  private readonly listeners = new Set<WakeListener>();
  private readonly arrivalWaiters = new Set<() => void>();
  private dueTimer: NodeJS.Timeout | null = null;
  private deadView: DeadLetterView | null = null;

  constructor(options: KafkaBackendOptions) {
    if (!options || typeof options !== "object") throw new InvalidInputError("new KafkaBackend() needs { url: 'kafka://host:9092' }, { brokers } or { kafka }");
    this.options = options;
    const location = options.url !== undefined ? parseKafkaUrl(options.url) : null;
    this.brokers = location?.brokers ?? options.brokers ?? [];
    this.kafka = options.kafka ?? null;
    if (this.brokers.length === 0 && this.kafka === null)
      throw new InvalidInputError("new KafkaBackend() needs { url: 'kafka://host:9092' }, { brokers } or { kafka }");
    this.topics = new TopicNames(checkTopicPrefix(options.prefix ?? DEFAULT_PREFIX));
    this.groupId = options.groupId ?? `${this.topics.prefix}.workers`;
    if (typeof this.groupId !== "string" || this.groupId === "") throw new InvalidInputError("the Kafka backend's groupId must be a non-empty string");
    if (options.partitionKey !== undefined && options.partitionKey !== "queue" && options.partitionKey !== "id") {
      throw new InvalidInputError(`partitionKey must be "queue" or "id"; got ${shown(options.partitionKey)}`);
    }
    this.partitionKey = options.partitionKey ?? "queue";
    this.claimWaitMs = nonNegativeInt("option claimWaitMs", options.claimWaitMs ?? 0);
    this.maxBuffered = positiveInt("option maxBufferedPerPartition", options.maxBufferedPerPartition ?? 1_000);
    this.fetchMaxWaitMs = positiveInt("option fetchMaxWaitMs", options.fetchMaxWaitMs ?? 1_000);
    this.clock = options.clock ?? systemClock;
    this.logger = options.logger ?? consoleLogger();
    this.description = `kafka:${this.brokers.join(",") || "client"}/${this.topics.prefix}`;
    for (const queue of options.queues ?? []) this.known.add(checkName("queue", queue));
    this.capabilities = Object.freeze({
      // A log has offsets, not records by id: only dead letters can be read (through the dead-letter view).
      jobRecords: false,
      // A record cannot be taken out of a log.
      cancel: false,
      // A partition is read in offset order; there is no other order to claim by.
      priorities: false,
      // Producing the same id twice appends two records.
      uniqueIds: false,
      // Pausing is per consumer (worker.pause()); the group has no switch for every member.
      pause: false,
      // Delays wait on this process's clock, sessions and rebalances on the brokers'.
      clockDriven: false,
      idempotencyKeys: options.idempotency !== undefined,
      transactionalEnqueue: false,
      transactionalCompletion: false,
      // Every member of the group fetches its partitions and is woken by what it fetches.
      crossProcessWakeups: true,
      multiProcess: true,
      claimAcrossQueues: "turns",
      flows: "none",
      dedupWindows: false,
      queueLimits: false,
      jobFlowKeys: false,
      schedules: false,
      // Settled records are committed offsets, not rows: nothing to count by finish time.
      finishedWindows: false,
    });
    this.idempotency = options.idempotency ?? { once: () => Promise.reject(featureRefusal(this, "once")) };
    // Callers get the store behind the checking facade (../checked.ts): arguments checked once, for every store.
    return checkedBackend(this);
  }

  // ---------------------------------------------------------------- connection

  private async client(): Promise<Kafka> {
    this.kafka ??= await openKafka({ brokers: this.brokers, clientId: this.options.clientId ?? "conveyor-backend", logger: this.logger });
    return this.kafka;
  }

  /** Connects the producer and the admin client once. */
  private connected(): Promise<void> {
    if (this.closed) return Promise.reject(new ConveyorError(`${this.description}: the backend is closed`));
    this.connecting ??= (async () => {
      const kafka = await this.client();
      const { Partitioners } = await loadKafkajs();
      const producer = kafka.producer({ maxInFlightRequests: 1, allowAutoTopicCreation: true, createPartitioner: Partitioners.DefaultPartitioner });
      const admin = kafka.admin();
      try {
        await producer.connect();
        await admin.connect();
      } catch (error) {
        await producer.disconnect().catch(() => undefined);
        await admin.disconnect().catch(() => undefined);
        throw error;
      }
      this.producer = producer;
      this.admin = admin;
    })().catch((error: unknown) => {
      this.connecting = null;
      throw error;
    });
    return this.connecting;
  }

  /** Runs `fn`, turning client failures into StoreUnavailableError. */
  private async guard<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (error) {
      if (error instanceof ConveyorError) throw error;
      throw new StoreUnavailableError(this.description, { cause: error });
    }
  }

  /** Produces records to one topic, acknowledged by every in-sync replica. */
  private async produce(topic: string, messages: Array<{ key: string; value: Buffer; headers: Record<string, string>; timestamp?: string }>): Promise<void> {
    await this.connected();
    await this.producer!.send({ topic, acks: -1, messages });
  }

  private keyOf(envelope: Envelope): string {
    return this.partitionKey === "queue" ? envelope.queue : envelope.id;
  }

  /** Headers every job record carries, so Kafka's own tools (kcat, consoles) show what it is. */
  private jobHeaders(envelope: Envelope): Record<string, string> {
    return {
      [HEADER.job]: envelope.name,
      "conveyor-id": envelope.id,
      [HEADER.attempt]: String(envelope.attempt + 1),
      [HEADER.maxAttempts]: String(envelope.maxAttempts),
      [HEADER.notBefore]: String(envelope.runAt),
    };
  }

  /** Where a job's next record goes: the work topic when due, else the retry topic, held until due. */
  private topicFor(envelope: Envelope): string {
    return envelope.runAt > this.clock.now() ? this.topics.retry(envelope.queue) : this.topics.work(envelope.queue);
  }

  // ---------------------------------------------------------------- lifecycle

  async migrate(): Promise<void> {
    // Topics are created by the brokers on first use (auto.create.topics.enable) or by you
    // beforehand with the partition count you want; migrate checks the cluster answers.
    await this.guard(async () => {
      await this.connected();
      await this.admin!.fetchTopicMetadata({ topics: [] });
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.dueTimer) clearTimeout(this.dueTimer);
    await this.connecting?.catch(() => undefined);
    // Leaving the group hands the partitions to the other members at once; whatever is not
    // committed (buffered or running here) is theirs to run again.
    await this.consuming?.catch(() => undefined);
    await this.consumer?.disconnect().catch(() => undefined);
    await this.deadView?.close();
    this.parts.clear();
    this.held.clear();
    await this.producer?.disconnect().catch(() => undefined);
    await this.admin?.disconnect().catch(() => undefined);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  async now(): Promise<number> {
    return this.clock.now();
  }

  // ---------------------------------------------------------------- enqueue

  async enqueue(specs: readonly JobSpec[], options?: EnqueueOptions): Promise<EnqueueResult[]> {
    allOrNothingOf(specs, options);
    for (const spec of specs) {
      if (spec.priority !== 0) {
        throw new InvalidInputError(
          `job ${JSON.stringify(spec.id)} has priority ${spec.priority}: a Kafka partition is read in offset order, there are no priorities (capabilities.priorities is false); ` +
            "leave priority unset, or put urgent jobs on a queue of their own with its own workers",
          { field: "priority" },
        );
      }
      if (spec.dedup !== undefined) {
        throw new UnsupportedByStoreError(
          this.description,
          "dedupWindows",
          `keep a dedup window for job ${JSON.stringify(spec.id)}: a Kafka log keeps no record to look a key up (capabilities.dedupWindows is false); ` +
            "drop options.dedup, or use a backend with job records (SQLite, PostgreSQL, Redis)",
        );
      }
      if (spec.flow !== undefined) {
        throw new InvalidInputError(
          `job ${JSON.stringify(spec.id)} has a group or limiter: the Kafka backend has no fleet-wide flow keys (capabilities.jobFlowKeys is false)`,
          { field: "group" },
        );
      }
    }
    if (specs.length === 0) return [];
    const now = this.clock.now();
    const byTopic = new Map<string, Envelope[]>();
    for (const spec of specs) {
      this.known.add(spec.queue);
      const envelope = envelopeOf(spec, now, spec.runAt ?? now + spec.delayMs);
      const topic = this.topicFor(envelope);
      byTopic.set(topic, [...(byTopic.get(topic) ?? []), envelope]);
    }
    await this.guard(async () => {
      await this.connected();
      // One request for the whole batch; kafkajs resolves once every partition leader acknowledged (acks = -1).
      await this.producer!.sendBatch({
        acks: -1,
        topicMessages: [...byTopic].map(([topic, envelopes]) => ({
          topic,
          messages: envelopes.map((e) => ({ key: this.keyOf(e), value: encode(e), headers: this.jobHeaders(e), timestamp: String(e.createdAt) })),
        })),
      });
    });
    for (const queue of new Set(specs.map((s) => s.queue))) this.wake(queue);
    return specs.map((s) => ({ id: s.id, duplicate: false }));
  }

  // ---------------------------------------------------------------- the consumer

  /** The consumer runs, subscribed to (at least) these queues' work and retry topics, and has joined the group. */
  private async consume(queues: readonly string[]): Promise<void> {
    if (this.closed) throw new ConveyorError(`${this.description}: the backend is closed`);
    // `subscribed` grows at once, so concurrent claims for the same queues share one (re)start.
    const missing = queues.filter((q) => !this.subscribed.has(q));
    if (missing.length === 0 && this.consuming) return this.consuming;
    for (const q of missing) this.subscribed.add(q);
    const previous = this.consuming;
    this.consuming = (async () => {
      await previous?.catch(() => undefined);
      // kafkajs subscribes before it runs: a new queue means a new consumer (a rejoin). The
      // partitions it gets again keep their records here; the others are revoked below.
      const old = this.consumer;
      this.consumer = null;
      await old?.disconnect().catch(() => undefined);
      if (this.closed) throw new ConveyorError(`${this.description}: the backend is closed`);
      const all = new Set(this.subscribed);
      const kafka = await this.client();
      const consumer = kafka.consumer({
        groupId: this.groupId,
        sessionTimeout: this.options.sessionTimeoutMs ?? 30_000,
        heartbeatInterval: this.options.heartbeatIntervalMs ?? 3_000,
        maxWaitTimeInMs: this.fetchMaxWaitMs,
        allowAutoTopicCreation: true,
      });
      const joined = new Promise<void>((resolve, reject) => {
        consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
          this.assigned(payload.memberAssignment);
          resolve();
        });
        consumer.on(consumer.events.CRASH, ({ payload }) => {
          this.logger.warn({ store: this.description, err: String(payload.error) }, "Kafka consumer crashed; kafkajs restarts it when it can");
          if (!payload.restart) reject(payload.error);
        });
      });
      await consumer.connect();
      await consumer.subscribe({ topics: [...all].flatMap((q) => [this.topics.work(q), this.topics.retry(q)]), fromBeginning: true });
      await consumer.run({
        autoCommit: false,
        eachBatchAutoResolve: false,
        partitionsConsumedConcurrently: 1_000,
        eachBatch: (payload) => this.fetched(payload),
      });
      this.consumer = consumer;
      await joined;
      // Nobody is waiting for work: fetch nothing (see subscribe()).
      if (this.listeners.size === 0 && this.stopped) this.pauseAll();
    })().catch((error: unknown) => {
      this.consuming = null;
      for (const q of missing) this.subscribed.delete(q);
      throw error;
    });
    return this.consuming;
  }

  /** A (re)join: partitions no longer ours are revoked, their records forgotten (the new owner runs them). */
  private assigned(assignment: Record<string, number[]>): void {
    const ours = new Set(Object.entries(assignment).flatMap(([topic, partitions]) => partitions.map((p) => `${topic}:${p}`)));
    for (const [key, part] of this.parts) {
      if (ours.has(key)) {
        part.paused = false;
        continue;
      }
      part.revoked = true;
      for (const entry of part.entries) if (entry.state === "held") this.held.delete(entry.token);
      this.parts.delete(key);
    }
  }

  /** A fetched batch: its records are buffered for claims (the fetch position moves on; the commit does not). */
  private async fetched(payload: EachBatchPayload): Promise<void> {
    const { batch } = payload;
    const { topic, partition } = batch;
    const parsed = this.topics.parse(topic);
    if (!parsed) return;
    const key = `${topic}:${partition}`;
    let part = this.parts.get(key);
    if (!part) {
      part = { topic, partition, queue: parsed.queue, kind: parsed.kind, entries: [], next: -1, paused: false, revoked: false };
      this.parts.set(key, part);
    }
    for (const message of batch.messages) {
      if (!payload.isRunning() || payload.isStale()) return;
      const offset = Number(message.offset);
      payload.resolveOffset(message.offset);
      // Fetched again after a rejoin: already here, or settled and about to be committed.
      if ((part.next >= 0 && offset < part.next) || part.entries.some((e) => e.offset === offset)) continue;
      const envelope = this.envelopeOf(message, parsed.queue);
      if (envelope === null) {
        await this.setAsideForeign(message, part);
        continue;
      }
      part.entries.push({ part, offset, envelope, state: "buffered", token: 0, attempt: 0, startedAt: 0, worker: null, seq: this.seq++ });
    }
    if (!part.paused && this.buffered(part) >= this.maxBuffered && this.consumer) {
      part.paused = true;
      this.consumer.pause([{ topic, partitions: [partition] }]);
    }
    for (const waiter of [...this.arrivalWaiters]) waiter();
    this.wake(parsed.queue);
    this.armDueTimer();
  }

  private envelopeOf(message: KafkaMessage, queue: string): Envelope | null {
    if (message.value === null) return null;
    const envelope = decode(message.value);
    return envelope !== null && envelope.queue === queue ? envelope : null;
  }

  /** A record that is no Conveyor job: kept in the dead topic with why, never dropped, then passed. */
  private async setAsideForeign(message: KafkaMessage, part: PartitionState): Promise<void> {
    try {
      const headers = headerStrings(message.headers);
      await this.produce(this.topics.dead(part.queue), [
        {
          key: message.key?.toString() ?? "",
          value: message.value ?? Buffer.alloc(0),
          headers: {
            ...headers,
            [HEADER.sourceTopic]: part.topic,
            [HEADER.sourcePartition]: String(part.partition),
            [HEADER.sourceOffset]: message.offset,
            [HEADER.errorName]: "ForeignMessage",
            [HEADER.errorMessage]: "not a Conveyor job record (its value is no job envelope): set aside unprocessed",
          },
        },
      ]);
      const offset = Number(message.offset);
      if (part.entries.length === 0) {
        part.next = offset + 1;
        await this.commit(part);
      } else {
        // Passed once the records before it are settled: a settled placeholder keeps the commit in order.
        part.entries.push({
          part,
          offset,
          envelope: null as unknown as Envelope,
          state: "settled",
          token: 0,
          attempt: 0,
          startedAt: 0,
          worker: null,
          seq: this.seq++,
        });
      }
    } catch (error) {
      this.logger.error({ store: this.description, err: String(error) }, "could not set a foreign record aside; it stays uncommitted");
    }
  }

  private buffered(part: PartitionState): number {
    return part.entries.reduce((n, e) => n + (e.state === "buffered" ? 1 : 0), 0);
  }

  /** Wakes the workers when the earliest held-back retry copy becomes due. */
  private armDueTimer(): void {
    if (this.dueTimer) clearTimeout(this.dueTimer);
    this.dueTimer = null;
    let earliest = Infinity;
    for (const part of this.parts.values())
      for (const e of part.entries) if (e.state === "buffered" && e.envelope.runAt < earliest) earliest = e.envelope.runAt;
    if (earliest === Infinity || this.closed) return;
    const inMs = earliest - this.clock.now();
    if (inMs <= 0) return;
    this.dueTimer = setTimeout(
      () => {
        this.dueTimer = null;
        for (const part of this.parts.values()) this.wake(part.queue);
        this.armDueTimer();
      },
      Math.min(inMs, 60_000),
    );
    this.dueTimer.unref();
  }

  /** Commits a partition up to its first unsettled record (dropping the settled ones before it). */
  private async commit(part: PartitionState): Promise<boolean> {
    while (part.entries.length > 0 && part.entries[0]!.state === "settled") part.next = part.entries.shift()!.offset + 1;
    if (part.next < 0 || part.revoked || !this.consumer) return false;
    if (part.paused && this.buffered(part) < this.maxBuffered / 2) {
      part.paused = false;
      this.consumer.resume([{ topic: part.topic, partitions: [part.partition] }]);
    }
    try {
      await this.consumer.commitOffsets([{ topic: part.topic, partition: part.partition, offset: String(part.next) }]);
      return true;
    } catch (error) {
      this.logger.warn(
        { store: this.description, topic: part.topic, partition: part.partition, err: String(error) },
        "offset commit failed; the records after it may run again",
      );
      return false;
    }
  }

  // ---------------------------------------------------------------- claim

  async claim(request: ClaimRequest): Promise<ClaimedJob[]> {
    const limit = positiveInt("claim limit", request.limit);
    const queues = request.queues.map((q) => checkName("queue", q));
    const names = new Set(request.names);
    if (queues.length === 0 || names.size === 0) return [];
    for (const q of queues) this.known.add(q);
    this.stopped = false;
    await this.guard(() => this.consume(queues));
    if (this.claimWaitMs > 0) await this.arrivals(queues, limit, this.claimWaitMs);
    const now = this.clock.now();
    const claimed: ClaimedJob[] = [];
    const start = this.turn++ % queues.length;
    for (let i = 0; i < queues.length && claimed.length < limit; i++) {
      const queue = queues[(start + i) % queues.length]!;
      for (const entry of this.claimable(queue, names, now, limit - claimed.length)) {
        const token = this.nextToken++;
        entry.state = "held";
        entry.token = token;
        entry.attempt = entry.envelope.attempt + 1;
        entry.startedAt = now;
        entry.worker = request.worker;
        this.held.set(token, entry);
        const lease: Lease = { jobId: entry.envelope.id, token };
        claimed.push({
          job: recordOf(entry.envelope, "active", {
            attempt: entry.attempt,
            startedAt: now,
            lease: { ...lease, expiresAt: now + request.leaseMs, worker: request.worker },
          }),
          lease,
          leaseExpiresAt: now + request.leaseMs,
        });
      }
    }
    return claimed;
  }

  /** Due buffered records of a queue whose name is handled: earliest run time first, then arrival. */
  private claimable(queue: string, names: ReadonlySet<string>, now: number, limit: number): Entry[] {
    const candidates: Entry[] = [];
    for (const part of this.parts.values()) {
      if (part.queue !== queue) continue;
      for (const e of part.entries) if (e.state === "buffered" && e.envelope.runAt <= now && names.has(e.envelope.name)) candidates.push(e);
    }
    return candidates.sort((a, b) => a.envelope.runAt - b.envelope.runAt || a.seq - b.seq).slice(0, limit);
  }

  /** Resolves once `limit` records of `queues` are buffered, or after `waitMs`. */
  private async arrivals(queues: readonly string[], limit: number, waitMs: number): Promise<void> {
    const count = () => [...this.parts.values()].filter((p) => queues.includes(p.queue)).reduce((n, p) => n + this.buffered(p), 0);
    const deadline = performance.now() + waitMs;
    while (count() < limit && performance.now() < deadline) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, Math.max(1, deadline - performance.now()));
        const waiters = this.arrivalWaiters;
        waiters.add(done);
        function done() {
          clearTimeout(timer);
          waiters.delete(done);
          resolve();
        }
      });
    }
  }

  // ---------------------------------------------------------------- leases and settles

  /** The held record a lease names, while its partition is still ours; null when stale. */
  private live(lease: Lease): Entry | null {
    const entry = this.held.get(lease.token);
    if (!entry || entry.envelope.id !== lease.jobId || entry.state !== "held") return null;
    if (entry.part.revoked) {
      this.held.delete(lease.token);
      return null;
    }
    return entry;
  }

  async heartbeat(leases: readonly Lease[], _leaseMs: number): Promise<HeartbeatResult> {
    // A lease lasts while the partition is assigned here: kafkajs heartbeats the group itself.
    const lost: Array<{ lease: Lease; reason: LeaseLossReason }> = [];
    for (const lease of leases) {
      if (this.live(lease)) continue;
      // A token this process issued and no longer holds: its partition was revoked. One it never issued names nothing.
      lost.push({ lease, reason: Number.isInteger(lease.token) && lease.token > 0 && lease.token < this.nextToken ? "expired" : "gone" });
    }
    return { lost };
  }

  /** Marks a held record settled and commits its partition; "stale" when the partition is no longer ours. */
  private async settle(entry: Entry): Promise<SettleResult> {
    this.held.delete(entry.token);
    entry.state = "settled";
    return (await this.commit(entry.part)) ? "applied" : "stale";
  }

  async complete(items: readonly Completion[]): Promise<SettleResult[]> {
    return Promise.all(
      items.map(async (item) => {
        const entry = this.live(item.lease);
        return entry ? this.settle(entry) : "stale";
      }),
    );
  }

  async fail(items: readonly Failure[]): Promise<SettleResult[]> {
    const delays = items.map((item) => retryDelayMs(item.retryDelayMs));
    return this.guard(() =>
      Promise.all(
        items.map(async (item, i): Promise<SettleResult> => {
          const entry = this.live(item.lease);
          if (!entry) return "stale";
          const now = this.clock.now();
          const delay = delays[i]!;
          const envelope = this.afterAttempt(entry, now, delay === null ? "dead" : "failed", item.error);
          const forensics: Record<string, string> = {
            ...this.jobHeaders(envelope),
            [HEADER.sourceTopic]: entry.part.topic,
            [HEADER.sourcePartition]: String(entry.part.partition),
            [HEADER.sourceOffset]: String(entry.offset),
            [HEADER.firstAttemptAt]: String(envelope.history[0]?.startedAt ?? entry.startedAt),
            ...failureHeaders({ error: item.error, worker: entry.worker!, startedAt: entry.startedAt, failedAt: now }),
          };
          if (delay === null) {
            envelope.finishedAt = now;
            forensics[HEADER.attempt] = String(envelope.attempt);
            forensics[HEADER.deadReason] = envelope.attempt >= envelope.maxAttempts ? "attempts-exhausted" : "unrecoverable";
            await this.produce(this.topics.dead(envelope.queue), [{ key: this.keyOf(envelope), value: encode(envelope), headers: forensics }]);
          } else {
            envelope.runAt = now + delay;
            forensics[HEADER.notBefore] = String(envelope.runAt);
            // Due at once: straight back to the work topic; later: the retry topic holds it.
            await this.produce(this.topicFor(envelope), [{ key: this.keyOf(envelope), value: encode(envelope), headers: forensics }]);
          }
          // Only once the next record is acknowledged: the attempt's record is settled and committed.
          if (this.held.get(item.lease.token) !== entry) return "stale";
          return this.settle(entry);
        }),
      ),
    );
  }

  /** The envelope after an attempt: its history entry and error recorded. */
  private afterAttempt(entry: Entry, now: number, outcome: AttemptRecord["outcome"], error: ErrorInfo): Envelope {
    const worker = entry.worker!;
    const record: AttemptRecord = {
      attempt: entry.attempt,
      workerId: worker.id,
      host: worker.host,
      pid: worker.pid,
      startedAt: entry.startedAt,
      finishedAt: now,
      outcome,
      error,
    };
    return { ...entry.envelope, attempt: entry.attempt, history: [...entry.envelope.history, record], error };
  }

  async release(leases: readonly Lease[]): Promise<SettleResult[]> {
    const queues = new Set<string>();
    const results = leases.map((lease): SettleResult => {
      const entry = this.live(lease);
      if (!entry) return "stale";
      // Back to the buffer, in its place: the next claim here takes it again.
      this.held.delete(lease.token);
      entry.state = "buffered";
      entry.worker = null;
      queues.add(entry.part.queue);
      return "applied";
    });
    for (const queue of queues) this.wake(queue);
    return results;
  }

  async progress(lease: Lease): Promise<SettleResult> {
    // Nothing stores it (no job records); the answer still says whether the lease is ours.
    return this.live(lease) ? "applied" : "stale";
  }

  async appendLogs(lease: Lease, lines: readonly string[]): Promise<SettleResult> {
    // No job record to keep them with: they go to this process's logger with the job's id.
    if (!this.live(lease)) return "stale";
    for (const line of lines) this.logger.info({ store: this.description, jobId: lease.jobId, token: lease.token }, line);
    return "applied";
  }

  logs(id: string): Promise<JobLogLine[]> {
    return Promise.reject(
      new UnsupportedByStoreError(
        this.description,
        "jobRecords",
        `read the ctx.log lines of job ${JSON.stringify(id)}: a Kafka log keeps no job records; the lines went to the worker's logger`,
      ),
    );
  }

  // ---------------------------------------------------------------- maintenance: the group's job

  async rescueExpired(): Promise<RescuedJob[]> {
    // A dead member's partitions move to the others, who fetch from the last commit: no lease to expire.
    return [];
  }

  async promoteDue(): Promise<number> {
    // A retry copy is claimed once due, straight from the retry topic.
    return 0;
  }

  async prune(): Promise<PruneResult> {
    // Kafka's retention (retention.ms, retention.bytes) deletes old records, not Conveyor.
    return { jobs: 0, idempotencyKeys: 0 };
  }

  // ---------------------------------------------------------------- lag: the scaling signal

  /**
   * The group's lag per partition of the work and retry topics of every known queue (or of
   * `queue`): records produced and not yet committed. The scaling signal (docs/kafka.md);
   * `ConveyorMetrics` exports it as `conveyor_kafka_consumer_lag`.
   */
  async lag(queue?: string): Promise<PartitionLag[]> {
    const queues = queue !== undefined ? [checkName("queue", queue)] : [...this.known];
    return this.guard(async () => {
      await this.connected();
      return groupLag(
        this.admin!,
        this.groupId,
        queues.flatMap((q) => [this.topics.work(q), this.topics.retry(q)]),
      );
    });
  }

  // ---------------------------------------------------------------- dead letters

  private queuesFor(queue: string | undefined, what: string): string[] {
    if (queue !== undefined) return [checkName("queue", queue)];
    if (this.known.size === 0) {
      throw new InvalidInputError(`${what} on Kafka needs a queue name (this process knows no queue yet); name the queue, or pass { queues } to KafkaBackend`);
    }
    return [...this.known];
  }

  /** The dead-letter view, caught up with the dead topics of `queues`. */
  private async dead(queues: readonly string[]): Promise<DeadLetterView> {
    return this.guard(async () => {
      await this.connected();
      this.deadView ??= new DeadLetterView({
        kafka: await this.client(),
        admin: this.admin!,
        topics: this.topics,
        logger: this.logger,
        groupPrefix: `${this.groupId}.dead-view`,
      });
      await this.deadView.catchUp(queues);
      return this.deadView;
    });
  }

  async get(id: string, queue?: string): Promise<JobRecord | null> {
    const queues = this.queuesFor(queue, "get");
    const view = await this.dead(queues);
    for (const q of queues) {
      const found = view.find(q, id);
      if (found) return recordOf(found.envelope, "dead");
    }
    throw new UnsupportedByStoreError(
      this.description,
      "jobRecords",
      `tell the state of job ${JSON.stringify(id)}: a Kafka log has no index of jobs by id, only dead letters can be looked up (and it is not one). ` +
        "Track status in your own store, or use a backend with job records (SQLite, PostgreSQL, Redis) where clients poll jobs",
    );
  }

  async list(filter: ListFilter = {}, page: Page = {}): Promise<JobRecord[]> {
    const args = listArgsOf(filter, page);
    if (filter.state !== "dead") {
      throw new UnsupportedByStoreError(
        this.description,
        "jobRecords",
        `list ${filter.state ?? "all"} jobs: a Kafka log is read by offset, not searched; only dead letters can be listed (state "dead"). Watch the lag for the backlog`,
      );
    }
    const queues = this.queuesFor(filter.queue, "listing dead jobs");
    const view = await this.dead(queues);
    return pageDeadLetters(
      queues.flatMap((q) => view.all(q).map((d) => recordOf(d.envelope, "dead"))),
      filter,
      args,
    );
  }

  /** Replays a dead letter: a fresh copy to the work topic (acknowledged), then a marker hides the dead letter. */
  async replay(id: string, queue?: string): Promise<ReplayResult> {
    const queues = this.queuesFor(queue, "replay");
    const view = await this.dead(queues);
    for (const q of queues) {
      const found = view.find(q, id);
      if (!found) continue;
      const now = this.clock.now();
      const again: Envelope = { ...found.envelope, attempt: 0, error: null, finishedAt: null, runAt: now, replays: found.envelope.replays + 1 };
      await this.guard(async () => {
        await this.produce(this.topicFor(again), [{ key: this.keyOf(again), value: encode(again), headers: this.jobHeaders(again) }]);
        await this.produce(this.topics.dead(q), [
          { key: this.keyOf(again), value: Buffer.from(id), headers: { [DEAD_MARKER]: "replayed", "conveyor-id": id, "conveyor-marker-at": String(now) } },
        ]);
      });
      view.forget(q, id);
      return "replayed";
    }
    return "not-found";
  }

  /** Removes a dead letter: a marker record in the dead topic hides it (a log deletes nothing by id). */
  async remove(id: string, queue?: string): Promise<RemoveResult> {
    const queues = this.queuesFor(queue, "remove");
    const view = await this.dead(queues);
    for (const q of queues) {
      const found = view.find(q, id);
      if (!found) continue;
      await this.guard(() =>
        this.produce(this.topics.dead(q), [
          {
            key: this.keyOf(found.envelope),
            value: Buffer.from(id),
            headers: { [DEAD_MARKER]: "removed", "conveyor-id": id, "conveyor-marker-at": String(this.clock.now()) },
          },
        ]),
      );
      view.forget(q, id);
      return "removed";
    }
    return "not-found";
  }

  // ---------------------------------------------------------------- stats and unsupported admin

  /**
   * Per queue: `waiting` is the group's lag on the queue's topics less what this process holds
   * (running or not yet due); `active` and `scheduled` are this process's; `dead` the dead letters
   * in the view. A queue's backlog for autoscaling is its lag (`lag()`).
   */
  async stats(queue?: string): Promise<QueueStats[]> {
    const queues = queue !== undefined ? [checkName("queue", queue)] : [...this.known];
    if (queues.length === 0) return [];
    const lag = await this.lag(queue);
    const view = await this.dead(queues);
    const now = this.clock.now();
    return queues.map((q) => {
      const mine = [...this.parts.values()].filter((p) => p.queue === q).flatMap((p) => p.entries);
      const active = mine.filter((e) => e.state === "held").length;
      const scheduled = mine.filter((e) => e.state === "buffered" && e.envelope.runAt > now).length;
      const behind = lag.filter((l) => l.topic === this.topics.work(q) || l.topic === this.topics.retry(q)).reduce((n, l) => n + l.lag, 0);
      const settledUncommitted = mine.filter((e) => e.state === "settled").length;
      const dueBuffered = mine.filter((e) => e.state === "buffered" && e.envelope.runAt <= now);
      const oldest = dueBuffered.reduce((min, e) => Math.min(min, e.envelope.runAt), Infinity);
      const counts: Record<JobState, number> = {
        scheduled,
        waiting: Math.max(0, behind - active - scheduled - settledUncommitted),
        active,
        completed: 0,
        "waiting-children": 0,
        dead: view.all(q).length,
        cancelled: 0,
      };
      return { queue: q, paused: false, counts, oldestWaitingAgeMs: oldest === Infinity ? null : Math.max(0, now - oldest) };
    });
  }

  // What a log cannot do (capabilities): refused by name, with the facade's one table of reasons
  // and alternatives (featureRefusal in ../checked.ts), as RabbitMQ's are; docs/kafka.md says why.

  async cancel(id: string, _queue?: string): Promise<CancelResult> {
    throw featureRefusal(this, "cancel", id);
  }

  async pause(queue: string): Promise<void> {
    throw featureRefusal(this, "pause", queue);
  }

  async resume(queue: string): Promise<void> {
    throw featureRefusal(this, "resume", queue);
  }

  finishedWindow(queue: string): Promise<FinishedWindow> {
    return Promise.reject(featureRefusal(this, "finishedWindow", queue));
  }

  setQueueLimits(queue: string): Promise<void> {
    return Promise.reject(featureRefusal(this, "setQueueLimits", queue));
  }

  getQueueFlow(queue: string): Promise<QueueFlow | null> {
    return Promise.reject(featureRefusal(this, "getQueueFlow", queue));
  }

  holdQueue(queue: string): Promise<void> {
    return Promise.reject(featureRefusal(this, "holdQueue", queue));
  }

  enqueueFlow(_nodes: readonly FlowNodeSpec[]): Promise<EnqueueResult[]> {
    return Promise.reject(featureRefusal(this, "enqueueFlow"));
  }

  flow(id: string): Promise<FlowInfo | null> {
    return Promise.reject(featureRefusal(this, "flow", id));
  }

  scheduleUpsert(write: ScheduleWrite): Promise<{ created: boolean; schedule: StoredSchedule }> {
    return Promise.reject(featureRefusal(this, "scheduleUpsert", write.id));
  }

  scheduleRemove(_queue: string, id: string): Promise<boolean> {
    return Promise.reject(featureRefusal(this, "scheduleRemove", id));
  }

  scheduleList(): Promise<StoredSchedule[]> {
    return Promise.reject(featureRefusal(this, "scheduleList"));
  }

  scheduleFire(firing: ScheduleFiring): Promise<{ fired: boolean; jobs: EnqueueResult[] }> {
    return Promise.reject(featureRefusal(this, "scheduleFire", firing.id));
  }

  // ---------------------------------------------------------------- wake-ups

  /** Set when the last listener left: fetching pauses until a claim or a listener comes back. */
  private stopped = false;

  /**
   * Wake-ups: called for a queue when records of it are fetched here. A Worker subscribes while
   * it runs and unsubscribes as its shutdown begins; when the last listener leaves, fetching
   * pauses (the partitions stay ours, so the running jobs can still commit; close() leaves the group).
   */
  subscribe(listener: WakeListener): () => void {
    this.listeners.add(listener);
    this.stopped = false;
    this.resumeAll();
    return () => {
      if (!this.listeners.delete(listener) || this.listeners.size > 0) return;
      this.stopped = true;
      this.pauseAll();
    };
  }

  private pauseAll(): void {
    if (!this.consumer) return;
    const topics = [...this.subscribed].flatMap((q) => [this.topics.work(q), this.topics.retry(q)]);
    if (topics.length > 0) this.consumer.pause(topics.map((topic) => ({ topic })));
  }

  private resumeAll(): void {
    if (!this.consumer) return;
    const topics = [...this.subscribed].flatMap((q) => [this.topics.work(q), this.topics.retry(q)]);
    if (topics.length > 0) this.consumer.resume(topics.map((topic) => ({ topic })));
  }

  private wake(queue: string): void {
    for (const listener of this.listeners) {
      try {
        listener(queue);
      } catch (error) {
        this.logger.error({ err: String(error) }, "a wake-up listener threw");
      }
    }
  }

  /** Queues this backend knows: the `queues` option and every queue used through it. */
  get knownQueues(): string[] {
    return [...this.known];
  }

  /** Diagnostics for tests: records held by claims and buffered, and the partitions assigned here. */
  get state(): { held: number; buffered: number; partitions: string[] } {
    let buffered = 0;
    for (const p of this.parts.values()) buffered += this.buffered(p);
    return { held: this.held.size, buffered, partitions: [...this.parts.keys()].sort() };
  }
}
