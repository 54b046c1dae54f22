/**
 * KafkaWorker: Conveyor handlers consuming a Kafka topic through a consumer group. Its contract
 * (docs/kafka.md) differs from a Backend's because a log is not a job store:
 *
 * - Concurrency is per partition: up to `concurrency` partitions are processed at once, and the
 *   messages of one partition one after the other, so one key's messages (one partition) run in
 *   order. More workers than partitions leave the extra ones idle.
 * - A message's offset is committed only after its handler's outcome is settled: it returned, or a
 *   retry copy (to the retry topic) or a dead letter (to the dead-letter topic) was acknowledged by
 *   every in-sync replica (acks = -1). A crash before that makes the group deliver it again
 *   (at least once; handlers must be idempotent, `job.id` is the outbox id when there is one).
 * - A failed attempt is retried through the retry topic, no earlier than the shared full-jitter
 *   backoff says (src/core/retry.ts); the copy waits in its retry-topic partition until due. A
 *   retried message leaves its key's order: later messages of the key go on meanwhile.
 * - Shutdown stops fetching, lets the running handlers finish (up to `shutdownGraceMs`, then aborts
 *   their signals and leaves those messages uncommitted), commits, and leaves the group.
 */
import { hostname } from "node:os";
import type { Admin, Consumer, EachMessagePayload, Kafka, Producer } from "kafkajs";
import { toError } from "../core/checks.js";
import { validatePayload, type BoundHandler, type Handler, type JobContext } from "../core/define.js";
import { ConveyorError, InvalidInputError, JobTimeoutError, ShutdownError, UnrecoverableError } from "../core/errors.js";
import { TypedEmitter, type WorkerEvents } from "../core/events.js";
import { newWorkerId } from "../core/ids.js";
import type { BackoffSpec, JobRecord, WorkerIdentity } from "../core/job.js";
import type { Json } from "../core/json.js";
import { silentLogger, type Logger } from "../core/logger.js";
import { DEFAULT_BACKOFF, decideRetryAfter } from "../core/retry.js";
import { errorInfo } from "../core/error-info.js";
import type { Handlers } from "../runtime/worker.js";
import { loadKafkajs, openKafka, parseKafkaUrl } from "./client.js";
import { failureHeaders, HEADER, headerStrings } from "./headers.js";
import { groupLag, type PartitionLag } from "./lag.js";
import { shown } from "../core/checks.js";
import { monotonicClock } from "../core/clock.js";

export interface KafkaWorkerOptions {
  /** `kafka://host:9092[,host2:9092]`. Give `url`, `brokers` or `kafka`. */
  url?: string;
  /** Seed brokers, `host:port`. */
  brokers?: string[];
  /** Your own kafkajs client. */
  kafka?: Kafka;
  /** The topic to consume. */
  topic: string;
  /** Consumer group: the workers of one group share the topic's partitions. */
  groupId: string;
  /**
   * Handlers by job name, or `[definition.handle(fn)]`, as for `Worker`. A message's job name is its
   * `conveyor-job` header, else its topic. A message no handler knows is dead-lettered (a log cannot
   * leave it waiting), with an error naming the handlers this worker has.
   */
  handlers: Handlers;
  /** Partitions processed at once by this worker (one message at a time within each). Default 10. */
  concurrency?: number;
  /** Total attempts per message, the first included. Default 3. */
  attempts?: number;
  /** Backoff between attempts. Default `{ type: "exponential", delayMs: 1000, maxDelayMs: 60000 }` (full jitter). */
  backoff?: BackoffSpec;
  /** Per-attempt time limit in ms (the handler's `ctx.signal` aborts with JobTimeoutError). Default: none (a handler's own `timeoutMs` setting applies). */
  timeoutMs?: number;
  /** Where retry copies go. Default `<topic>.retry`. */
  retryTopic?: string;
  /** Where dead letters go. Default `<topic>.dead`. */
  deadLetterTopic?: string;
  /** A new group starts at the earliest offset (true) or only takes messages produced after it joined (false). Default true. */
  fromBeginning?: boolean;
  /** How long running handlers may finish on close before they are aborted (their messages stay uncommitted), in ms. Default 25000. */
  shutdownGraceMs?: number;
  /** The group drops a member silent this long and hands its partitions to the others, in ms. Default 30000. */
  sessionTimeoutMs?: number;
  /** Heartbeat to the group coordinator this often, in ms. Default 3000. */
  heartbeatIntervalMs?: number;
  /**
   * Longest a fetch waits at the broker for new messages, in ms. Also bounds how long `close()`
   * waits for a fetch in flight, and how soon a retry copy is seen. Default 1000 (kafkajs: 5000).
   */
  fetchMaxWaitMs?: number;
  /** Recorded in the forensics headers. Default `host:pid:random`. */
  workerId?: string;
  /** Client id the brokers see. Default `"conveyor-worker"`. */
  clientId?: string;
  /** Errors outside handlers and kafkajs's warnings. Default: dropped. */
  logger?: Logger;
  /** Start consuming in the constructor. Default true; with false, call `start()`. */
  autostart?: boolean;
}

/** Runs one message: its job record, abort controller and outcome. */
interface Run {
  job: JobRecord;
  controller: AbortController;
}

export type { PartitionLag } from "./lag.js";

/** An offset commit acknowledged by the brokers: `offset` is the next message the group reads in that partition. */
export interface CommittedOffset {
  topic: string;
  partition: number;
  offset: number;
}

export class KafkaWorker extends TypedEmitter<WorkerEvents> {
  readonly id: string;
  readonly topic: string;
  readonly retryTopic: string;
  readonly deadLetterTopic: string;
  readonly groupId: string;
  readonly concurrency: number;
  private readonly identity: WorkerIdentity;
  private readonly handlers = new Map<string, BoundHandler<unknown>>();
  private readonly options: KafkaWorkerOptions;
  private readonly attempts: number;
  private readonly backoff: BackoffSpec;
  private readonly shutdownGraceMs: number;
  private readonly fetchMaxWaitMs: number;
  private readonly logger: Logger;
  private readonly brokers: string[];
  private kafka: Kafka | null;
  private consumer: Consumer | null = null;
  private producer: Producer | null = null;
  private admin: Admin | null = null;
  private readonly running = new Set<Run>();
  private starting: Promise<void> | null = null;
  private closing: Promise<{ drained: boolean }> | null = null;

  constructor(options: KafkaWorkerOptions) {
    super();
    if (!options || typeof options.topic !== "string" || options.topic === "")
      throw new InvalidInputError("new KafkaWorker() needs { topic, groupId, handlers } and url, brokers or kafka");
    if (typeof options.groupId !== "string" || options.groupId === "")
      throw new InvalidInputError("new KafkaWorker() needs { groupId }: the consumer group the workers share");
    this.options = options;
    this.brokers = options.url !== undefined ? parseKafkaUrl(options.url).brokers : (options.brokers ?? []);
    this.kafka = options.kafka ?? null;
    if (this.brokers.length === 0 && this.kafka === null)
      throw new InvalidInputError("new KafkaWorker() needs { url: 'kafka://host:9092' }, { brokers } or { kafka }");
    this.topic = options.topic;
    this.retryTopic = options.retryTopic ?? `${options.topic}.retry`;
    this.deadLetterTopic = options.deadLetterTopic ?? `${options.topic}.dead`;
    if (new Set([this.topic, this.retryTopic, this.deadLetterTopic]).size !== 3)
      throw new InvalidInputError("topic, retryTopic and deadLetterTopic must be three different topics");
    this.groupId = options.groupId;
    this.concurrency = positiveInt("concurrency", options.concurrency, 10);
    this.attempts = positiveInt("attempts", options.attempts, 3);
    this.backoff = options.backoff ?? DEFAULT_BACKOFF;
    this.shutdownGraceMs = positiveInt("shutdownGraceMs", options.shutdownGraceMs, 25_000, 0);
    this.fetchMaxWaitMs = positiveInt("fetchMaxWaitMs", options.fetchMaxWaitMs, 1_000);
    this.logger = options.logger ?? silentLogger;
    this.id = options.workerId ?? newWorkerId();
    this.identity = { id: this.id, host: hostname(), pid: process.pid };
    const entries: BoundHandler<unknown>[] = Array.isArray(options.handlers)
      ? (options.handlers as ReadonlyArray<BoundHandler<unknown>>).slice()
      : Object.entries((options.handlers ?? {}) as Record<string, Handler | BoundHandler>).map(([name, h]) =>
          typeof h === "function" ? { name, schema: null, run: h } : { ...h, name },
        );
    for (const h of entries) this.handlers.set(h.name, h);
    if (this.handlers.size === 0)
      throw new InvalidInputError("new KafkaWorker() needs { handlers }: job name -> async (job, ctx) => result, or [definition.handle(fn)]");
    if (options.autostart !== false) {
      this.start().catch((error: unknown) => this.reportError(error, "starting"));
    }
  }

  /** Handlers running now. */
  get busySlotCount(): number {
    return this.running.size;
  }

  private assigned: Record<string, number[]> = {};
  private readonly commitListeners = new Set<(offsets: CommittedOffset[]) => void>();

  /**
   * Calls `listener` after the brokers acknowledged an offset commit of this worker, with the
   * offsets committed (the next offset the group will read, per partition). Returns the function
   * that removes it. For audit logs and tests: what a crash of this worker would run again starts there.
   */
  onCommit(listener: (offsets: CommittedOffset[]) => void): () => void {
    this.commitListeners.add(listener);
    return () => this.commitListeners.delete(listener);
  }

  /** The partitions the group gave this worker at its latest join, by topic (empty before it joined). */
  get assignment(): Record<string, number[]> {
    return this.assigned;
  }

  /** Messages fetched and not started are kafkajs's, not counted here. */
  get bufferedCount(): number {
    return 0;
  }

  /** Connects, joins the group and starts consuming; resolves once the consumer runs. */
  start(): Promise<void> {
    this.starting ??= (async () => {
      const kafka = (this.kafka ??= await openKafka({ brokers: this.brokers, clientId: this.options.clientId ?? "conveyor-worker", logger: this.logger }));
      const { Partitioners } = await loadKafkajs();
      // Retry copies and dead letters keep the message key, so they land by key like the original.
      this.producer = kafka.producer({ maxInFlightRequests: 1, allowAutoTopicCreation: true, createPartitioner: Partitioners.DefaultPartitioner });
      await this.producer.connect();
      await this.runConsumer(kafka);
    })().catch(async (error: unknown) => {
      // Not started: release what connected, and let a later start() try again.
      this.starting = null;
      await this.consumer?.disconnect().catch(() => undefined);
      await this.producer?.disconnect().catch(() => undefined);
      throw error;
    });
    return this.starting;
  }

  /** A consumer of the topic and its retry topic, joined to the group and running. */
  private async runConsumer(kafka: Kafka): Promise<void> {
    const consumer = kafka.consumer({
      groupId: this.groupId,
      sessionTimeout: this.options.sessionTimeoutMs ?? 30_000,
      heartbeatInterval: this.options.heartbeatIntervalMs ?? 3_000,
      maxWaitTimeInMs: this.fetchMaxWaitMs,
      allowAutoTopicCreation: true,
    });
    this.consumer = consumer;
    consumer.on(consumer.events.COMMIT_OFFSETS, ({ payload }) => {
      const offsets = payload.topics.flatMap((t) => t.partitions.map((p) => ({ topic: t.topic, partition: Number(p.partition), offset: Number(p.offset) })));
      for (const listener of this.commitListeners) listener(offsets);
    });
    consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
      this.assigned = payload.memberAssignment;
    });
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      this.assigned = {};
      if (payload.restart) {
        this.reportError(payload.error, "consuming (kafkajs restarts the consumer)");
        return;
      }
      // kafkajs gives up on errors it does not class as retriable (the mock broker answers a
      // SyncGroup in a racing rebalance with INVALID_REQUEST, say): a worker must not stay
      // silently idle, so a new consumer joins the group after a pause.
      this.reportError(payload.error, "consuming (a new consumer joins in 1 s)");
      setTimeout(() => {
        if (this.closing || this.consumer !== consumer) return;
        void consumer
          .disconnect()
          .catch(() => undefined)
          .then(() => (this.closing ? undefined : this.runConsumer(kafka)))
          .catch((error: unknown) => this.reportError(error, "restarting the consumer"));
      }, 1_000).unref();
    });
    await consumer.connect();
    await consumer.subscribe({ topics: [this.topic, this.retryTopic], fromBeginning: this.options.fromBeginning ?? true });
    await consumer.run({
      partitionsConsumedConcurrently: this.concurrency,
      // kafkajs commits the offsets of the messages whose eachMessage resolved, after each batch
      // and before it leaves the group; a message whose handler is unsettled never resolves.
      autoCommit: true,
      eachMessage: (payload) => this.handle(payload),
    });
  }

  private async handle(payload: EachMessagePayload): Promise<void> {
    const { topic, partition, message } = payload;
    const heartbeat = () => payload.heartbeat();
    const headers = headerStrings(message.headers);
    const isRetry = topic === this.retryTopic;
    const sourceTopic = isRetry ? (headers[HEADER.sourceTopic] ?? this.topic) : topic;
    const sourcePartition = isRetry ? Number(headers[HEADER.sourcePartition] ?? partition) : partition;
    const sourceOffset = isRetry ? (headers[HEADER.sourceOffset] ?? message.offset) : message.offset;
    const notBefore = isRetry ? Number(headers[HEADER.notBefore] ?? 0) : 0;
    if (notBefore > Date.now()) await this.waitUntil(notBefore, heartbeat);
    if (this.closing) throw new ShutdownError();

    const name = headers[HEADER.job] ?? sourceTopic;
    const attempt = isRetry ? Math.max(1, Number(headers[HEADER.attempt] ?? 1)) : 1;
    const maxAttempts = isRetry ? Math.max(attempt, Number(headers[HEADER.maxAttempts] ?? this.attempts)) : this.attempts;
    const startedAt = Date.now();
    const createdAt = Number(message.timestamp);
    const handler = this.handlers.get(name);
    const timeoutMs = this.options.timeoutMs ?? handler?.timeoutMs ?? null;
    const userHeaders = Object.fromEntries(Object.entries(headers).filter(([k]) => !k.startsWith("conveyor-")));
    const job: JobRecord = {
      id: headers["outbox-id"] ?? `${sourceTopic}:${sourcePartition}:${sourceOffset}`,
      queue: sourceTopic,
      name,
      data: null,
      state: "active",
      priority: 0,
      attempt,
      maxAttempts,
      backoff: this.backoff,
      timeoutMs,
      runAt: notBefore || createdAt,
      createdAt,
      startedAt,
      finishedAt: null,
      lease: null,
      progress: null,
      result: null,
      error:
        headers[HEADER.errorName] !== undefined
          ? { name: headers[HEADER.errorName]!, message: headers[HEADER.errorMessage] ?? "", stack: headers[HEADER.errorStack] || null }
          : null,
      history: [],
      stalls: 0,
      replays: 0,
      meta: { kafka: { topic, partition, offset: message.offset, key: message.key?.toString() ?? null, headers: userHeaders } },
    };
    const run: Run = { job, controller: new AbortController() };
    this.running.add(run);
    // The chained clock: a timeoutMs past Node's longest timer would fire after 1 ms.
    const timer = timeoutMs !== null ? monotonicClock.after(timeoutMs, () => run.controller.abort(new JobTimeoutError(timeoutMs))) : null;
    this.emit("job:started", { job, workerId: this.id, waitMs: Math.max(0, startedAt - job.runAt) });
    const started = performance.now();
    try {
      if (!handler)
        throw new UnrecoverableError(
          `no handler for job "${name}" in this worker (it has ${[...this.handlers.keys()].join(", ")}); set the conveyor-job header or add the handler`,
        );
      let data: Json;
      try {
        data = message.value === null ? null : (JSON.parse(message.value.toString()) as Json);
      } catch (error) {
        throw new UnrecoverableError(`the message value is not JSON (${toError(error).message}); the Kafka transport carries JSON payloads`);
      }
      job.data = handler.schema ? (validatePayload(name, handler.schema, data) as Json) : data;
      const value = await Promise.race([handler.run(job, this.context(run)), aborted(run.controller.signal)]);
      const result = value === undefined ? null : (JSON.parse(JSON.stringify(value)) as Json);
      this.emit("job:completed", { job, result, durationMs: performance.now() - started });
    } catch (thrown) {
      const error = run.controller.signal.aborted ? toError(run.controller.signal.reason) : toError(thrown);
      // Aborted by shutdown: not an attempt. The message stays uncommitted and is delivered again.
      if (error instanceof ShutdownError) throw error;
      await this.settleFailure(
        job,
        error,
        { sourceTopic, sourcePartition, sourceOffset, headers, key: message.key, value: message.value, startedAt },
        performance.now() - started,
      );
    } finally {
      timer?.cancel();
      this.running.delete(run);
    }
  }

  /** Publishes the retry copy or the dead letter, acknowledged by all in-sync replicas, before the offset may be committed. */
  private async settleFailure(
    job: JobRecord,
    error: Error,
    source: {
      sourceTopic: string;
      sourcePartition: number;
      sourceOffset: string;
      headers: Record<string, string>;
      key: Buffer | null;
      value: Buffer | null;
      startedAt: number;
    },
    durationMs: number,
  ): Promise<void> {
    const decision = decideRetryAfter(error, {
      attempt: job.attempt,
      maxAttempts: job.maxAttempts,
      backoff: this.backoff,
      backoffFn: this.handlers.get(job.name)?.backoff,
    });
    const unrecoverable = decision.unrecoverable;
    if (decision.kind === "retry" && decision.backoffError) this.reportError(decision.backoffError, `computing the backoff of job ${job.id} (retried at once)`);
    const now = Date.now();
    const headers: Record<string, string> = {
      ...source.headers,
      [HEADER.job]: job.name,
      [HEADER.maxAttempts]: String(job.maxAttempts),
      [HEADER.sourceTopic]: source.sourceTopic,
      [HEADER.sourcePartition]: String(source.sourcePartition),
      [HEADER.sourceOffset]: source.sourceOffset,
      [HEADER.firstAttemptAt]: source.headers[HEADER.firstAttemptAt] ?? String(source.startedAt),
      ...failureHeaders({ error: errorInfo(error), worker: this.identity, startedAt: source.startedAt, failedAt: now }),
    };
    const retryDelayMs = decision.kind === "retry" ? decision.delayMs : null;
    if (retryDelayMs !== null) {
      headers[HEADER.attempt] = String(job.attempt + 1);
      headers[HEADER.notBefore] = String(now + retryDelayMs);
      delete headers[HEADER.deadReason];
      await this.producer!.send({ topic: this.retryTopic, acks: -1, messages: [{ key: source.key, value: source.value, headers }] });
    } else {
      headers[HEADER.attempt] = String(job.attempt);
      headers[HEADER.deadReason] = unrecoverable ? "unrecoverable" : "attempts-exhausted";
      delete headers[HEADER.notBefore];
      await this.producer!.send({ topic: this.deadLetterTopic, acks: -1, messages: [{ key: source.key, value: source.value, headers }] });
    }
    job.error = errorInfo(error);
    this.emit("job:failed", { job, error, durationMs, retryDelayMs });
    if (retryDelayMs !== null) this.emit("job:retry-scheduled", { job, error, delayMs: retryDelayMs, nextAttempt: job.attempt + 1 });
    else this.emit("job:dead", { job, error, reason: unrecoverable ? "unrecoverable" : "attempts-exhausted" });
  }

  /** Holds a retry copy until it is due, heartbeating so the group keeps this member. */
  private async waitUntil(notBefore: number, heartbeat: () => Promise<void>): Promise<void> {
    for (;;) {
      const left = notBefore - Date.now();
      if (left <= 0) return;
      if (this.closing) throw new ShutdownError();
      await new Promise((resolve) => setTimeout(resolve, Math.min(left, 500)));
      await heartbeat();
    }
  }

  private context(run: Run): JobContext {
    return {
      signal: run.controller.signal,
      log: async (line) => {
        // No store keeps it: the line goes to this worker's logger with the job's id.
        this.logger.info({ jobId: run.job.id, attempt: run.job.attempt }, line);
      },
      progress: async (value) => {
        // No store keeps it: progress is an event of this process (metrics, logs), not a record.
        run.job.progress = value;
        this.emit("job:progress", { job: run.job, progress: value });
      },
      once: () =>
        Promise.reject(
          new ConveyorError(
            "ctx.once needs a job store; the Kafka transport has none: dedup on job.id (the outbox id, or topic:partition:offset) in your own database",
          ),
        ),
      tx: () => Promise.reject(new ConveyorError("ctx.tx() needs a backend with transactionalCompletion (PostgreSQL); the Kafka transport has none")),
      // A Kafka message is never the parent of a flow (queue.addFlow needs a job store).
      children: () => Promise.resolve([]),
    };
  }

  /**
   * Consumer lag per partition of the topic and its retry topic: the messages produced and not
   * yet committed by this group. Scale workers on it (up to one per partition: more stay idle).
   */
  async lag(): Promise<PartitionLag[]> {
    await this.start();
    if (this.admin === null) {
      const admin = this.kafka!.admin();
      await admin.connect();
      this.admin = admin;
    }
    return groupLag(this.admin, this.groupId, [this.topic, this.retryTopic]);
  }

  /**
   * Stops fetching, waits for running handlers up to `graceMs` (default `shutdownGraceMs`), then
   * aborts the rest (their messages stay uncommitted: the group delivers them again), commits what
   * finished and leaves the group. `drained` is false when handlers had to be aborted.
   */
  close(options: { graceMs?: number } = {}): Promise<{ drained: boolean }> {
    this.closing ??= (async () => {
      const graceMs = options.graceMs ?? this.shutdownGraceMs;
      this.emit("worker:shutdown", { reason: "close", activeJobIds: [...this.running].map((r) => r.job.id), graceMs });
      await this.starting?.catch(() => undefined);
      let drained = true;
      const timer = setTimeout(() => {
        if (this.running.size > 0) drained = false;
        for (const run of this.running) run.controller.abort(new ShutdownError());
      }, graceMs);
      try {
        // kafkajs: stop fetching, let each partition's current message finish, commit, leave the group.
        await this.consumer?.disconnect();
      } finally {
        clearTimeout(timer);
        await this.producer?.disconnect().catch((error: unknown) => this.reportError(error, "closing the producer"));
        await this.admin?.disconnect().catch(() => undefined);
      }
      this.emit("worker:closed", { drained, releasedJobIds: [] });
      return { drained };
    })();
    return this.closing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private reportError(error: unknown, during: string): void {
    const e = toError(error);
    this.logger.error({ workerId: this.id, during, err: errorInfo(e) }, `kafka worker error while ${during}`);
    this.emit("worker:error", { error: e, during });
  }
}

function aborted(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    if (signal.aborted) reject(toError(signal.reason));
    else signal.addEventListener("abort", () => reject(toError(signal.reason)), { once: true });
  });
}

function positiveInt(name: string, value: number | undefined, fallback: number, min = 1): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < min) throw new InvalidInputError(`${name} must be an integer >= ${min}; got ${shown(value)}`);
  return value;
}
