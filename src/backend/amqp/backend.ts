/**
 * The RabbitMQ backend: Conveyor jobs as persistent messages on durable quorum queues (amqplib).
 *
 * RabbitMQ pushes messages; the contract pulls (`claim`). The bridge is a consumer buffer: the
 * first claim of a queue starts a consumer with `basic.qos` prefetch = the claim's limit (the
 * worker's concurrency + prefetch), deliveries land in a local buffer, and `claim` hands them out
 * as jobs with a lease. The lease IS the delivery: its token names the delivery in this process,
 * and a settle acknowledges it on the channel it came from, only while that channel is alive:
 * an ack for a delivery of a dead channel is never sent on a new one (the broker has already
 * requeued that message), the settle is reported stale instead.
 *
 * Settling never loses a job: a failed attempt's next state (a copy in a delay queue for the
 * retry, or in the dead queue with its forensics) is published and confirmed by the broker BEFORE
 * the original delivery is acknowledged. A crash between the two runs the job once more, never
 * zero times.
 *
 * What a broker cannot do (look a job up by id, list or cancel waiting jobs, priorities, unique
 * ids, pause, an injected clock, idempotency keys) is declared in `capabilities`; see
 * docs/amqp.md for the reasons and for what to use instead.
 */
import { checkedBackend, featureRefusal } from "../checked.js";
import type { ScheduleFiring, ScheduleWrite, StoredSchedule } from "../../core/schedule.js";
import type { Socket } from "node:net";
import { hostname } from "node:os";
import type { Channel, ChannelModel, ConfirmChannel, ConsumeMessage, GetMessage, Options } from "amqplib";
import { describeAmqpUrl, openAmqpConnection, publishConfirmed, withTimeout } from "../../amqp/connection.js";
import { nonNegativeInt, positiveInt } from "../../core/checks.js";
import { systemClock, type Clock } from "../../core/clock.js";
import { ConveyorError, InvalidInputError, StoreUnavailableError, UnsupportedByStoreError, type LeaseLossReason } from "../../core/errors.js";
import type { AttemptRecord, ErrorInfo, FlowInfo, FlowNodeSpec, JobRecord, JobSpec, JobState, Lease, WorkerIdentity } from "../../core/job.js";
import type { QueueFlow } from "../../core/flow.js";
import type { JobLogLine } from "../../core/job-log.js";
import { consoleLogger, type Logger } from "../../core/logger.js";
import { checkName } from "../../core/spec.js";
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
  RemoveResult,
  ReplayResult,
  RescuedJob,
  SettleResult,
  WakeListener,
} from "../contract.js";
import { allOrNothingOf } from "../contract.js";
import { listArgsOf, pageDeadLetters } from "../listing.js";
import type { FinishedWindow } from "../contract.js";
import { decode, encode, envelopeOf, forensicHeaders, propertiesOf, recordOf, type Envelope } from "./envelope.js";
import { bucketOf, checkPrefix, declareDelay, declareQueue, MAX_BUCKET, MAX_HOP_MS, Names } from "./topology.js";

/** Dead letters replayed per confirmed burst by `replayAllDead`. */
const REPLAY_BATCH = 500;

/** Options of {@link AmqpBackend}. */
export interface AmqpBackendOptions {
  /** `amqp://user:password@host:5672/vhost` (`amqps://` for TLS). */
  url: string;
  /**
   * Prefix of every queue Conveyor declares (`<prefix>~<queue>`, `~dead`, `~delay~K`), so several
   * applications can share a vhost. Default "conveyor".
   */
  prefix?: string;
  /**
   * `basic.qos` prefetch of each queue's consumer: deliveries the broker pushes to this process
   * before it has acknowledged earlier ones. Default: the limit of the first claim, which a
   * `Worker` makes with all its slots free, i.e. its `concurrency + prefetch`.
   */
  prefetch?: number;
  /**
   * `x-delivery-limit` of the work queues: deliveries of one message that end without a settle
   * (the worker crashed, its connection dropped, or it handed the job back on shutdown) before the
   * broker dead-letters it as a poison pill. Default 20. Fixed when a queue is first declared:
   * RabbitMQ refuses to redeclare a queue with other arguments.
   */
  deliveryLimit?: number;
  /** How long to wait for the broker to confirm a publish, ms. Default 30 000. */
  confirmTimeoutMs?: number;
  /**
   * The broker's `consumer_timeout` (rabbitmq.conf), ms. RabbitMQ closes a channel holding a
   * delivery unacknowledged for longer, requeueing every delivery on it; a heartbeat cannot extend
   * it. So a job held this long minus a margin (a tenth, at most 60 s) is handed back (requeued)
   * and its lease reported lost, before the broker would take the whole channel down with the
   * other jobs on it. Default 1 800 000 (RabbitMQ's own default, 30 min).
   */
  consumerTimeoutMs?: number;
  /**
   * A delivered job whose name no claiming worker handles goes back through a delay queue and
   * returns after this many ms (it is never dropped, and never spins). Default 5 000.
   */
  unhandledRetryMs?: number;
  /**
   * How long a claim waits for deliveries when fewer than its limit are buffered, ms. A Worker is
   * woken by every delivery anyway, so 0 suits it; a caller that claims right after enqueueing
   * (tests, scripts) may want a moment for the push to arrive. Default 0.
   */
  claimWaitMs?: number;
  /** Dead letters read at most per `get`/`list`/`replay`/`remove` of the dead queue. Default 10 000. */
  deadScanLimit?: number;
  /**
   * Queues `stats()` and dead-letter commands without a queue look at, besides those this process
   * used. RabbitMQ has no way to list queues over AMQP. Default none.
   */
  queues?: readonly string[];
  /** AMQP heartbeat in seconds (a dead TCP peer is noticed after about twice this). Default 10. */
  heartbeatSeconds?: number;
  /**
   * A claim hands out deliveries of a connection this process has read nothing from for longer
   * than this, ms, only after one round trip to the broker (`basic.qos` on the consuming channel)
   * shows the connection and channel still open. A process that was stopped (SIGSTOP, a VM pause,
   * an event loop blocked) runs its timers before it reads its socket: without the check it would
   * start deliveries the broker already took back when it closed the connection meanwhile, and run
   * them twice. Healthy traffic (deliveries, confirms, the broker's heartbeats) keeps the
   * connection heard from, so the round trip is rare. Default 1 000.
   */
  silenceCheckMs?: number;
  /** Timestamps of records and of attempt history. Default the system clock. */
  clock?: Clock;
  /**
   * A processed-keys store for `ctx.once()` (e.g. a PostgreSQL or Redis backend's `idempotency`).
   * Default none: `ctx.once()` throws UnsupportedByStoreError, RabbitMQ has nowhere to keep keys.
   */
  idempotency?: IdempotencyStore;
  /** Default JSON lines on stderr (warnings and errors). */
  logger?: Logger;
}

/** One connection to the broker and its two channels. Replaced whole when anything in it closes. */
interface Session {
  readonly generation: number;
  readonly connection: ChannelModel;
  /** Confirm channel: enqueues, retry and dead copies, replays. */
  readonly publisher: ConfirmChannel;
  /** Consumers and their acks. */
  readonly consumer: Channel;
  alive: boolean;
  /** Queues whose topology this session declared. */
  readonly declared: Set<string>;
  /** Delay queues declared, by name. */
  readonly delays: Set<string>;
  /** Queues with a consumer on this session, and its consumer tag. */
  readonly consuming: Map<string, Promise<string>>;
  prefetch: number | null;
  /** performance.now() when this process last read anything from the connection's socket. */
  heardAt: number;
  /**
   * The socket spoke after a silence longer than `silenceCheckMs`: what it brought (deliveries
   * pushed while this process was not reading) may precede a close still to be read, so the next
   * claim checks the session first.
   */
  spokeAfterSilence: boolean;
  /** The round trip checking the session, while one runs. */
  checking: Promise<void> | null;
  /** Queues whose consumer on this session is up (basic.consume answered). */
  readonly consumers: Set<string>;
  /**
   * Delivery tags pushed on the consuming channel and not yet acked or nacked, in arrival order,
   * which is ascending: lets a batch of acks go as one `multiple` ack when it covers every one up
   * to its highest.
   */
  readonly unsettled: Set<number>;
  /** The connection's socket (amqplib 2.x), or null when it cannot be found. */
  readonly socket: Socket | null;
  /** The socket is corked until the end of this turn of the event loop (see `cork`). */
  corked: boolean;
}

/** A message pushed to this process and not yet settled. */
interface Delivery {
  readonly message: ConsumeMessage;
  readonly session: Session;
  readonly queue: string;
  /** performance.now() when it arrived: RabbitMQ's consumer_timeout counts from then. */
  readonly arrivedAt: number;
}

/** A delivery handed out by `claim`: what a lease token names. */
interface Held {
  readonly delivery: Delivery;
  readonly envelope: Envelope;
  readonly jobId: string;
  readonly attempt: number;
  readonly startedAt: number;
  readonly worker: WorkerIdentity;
}

const DEFAULT_PREFIX = "conveyor";

export class AmqpBackend implements Backend {
  readonly description: string;
  readonly capabilities: Capabilities;
  readonly idempotency: IdempotencyStore;

  private readonly url: string;
  private readonly names: Names;
  private readonly fixedPrefetch: number | null;
  private readonly deliveryLimit: number;
  private readonly confirmTimeoutMs: number;
  private readonly consumerTimeoutMs: number;
  private readonly unhandledRetryMs: number;
  private readonly deadScanLimit: number;
  private readonly claimWaitMs: number;
  private readonly heartbeatSeconds: number;
  private readonly silenceCheckMs: number;
  private readonly clock: Clock;
  private readonly logger: Logger;
  /** Queues known to this process (the `queues` option and every queue used). */
  private readonly known = new Set<string>();

  private current: Session | null = null;
  private opening: Promise<Session> | null = null;
  private generation = 0;
  private closed = false;
  /** Deliveries not yet claimed, per queue, oldest first. */
  private readonly buffers = new Map<string, Delivery[]>();
  /** Claimed deliveries by lease token. */
  private readonly held = new Map<number, Held>();
  private nextToken = 1;
  private turn = 0;
  private readonly listeners = new Set<WakeListener>();
  /** Set when the last listener left (its workers shut down): claims start no consumer until one subscribes again. */
  private consumersStopped = false;

  constructor(options: AmqpBackendOptions) {
    this.description = describeAmqpUrl(options?.url, "AmqpBackend");
    this.url = options.url;
    this.names = new Names(checkPrefix(options.prefix ?? DEFAULT_PREFIX));
    this.fixedPrefetch = options.prefetch === undefined ? null : positiveInt("option prefetch", options.prefetch);
    this.deliveryLimit = positiveInt("option deliveryLimit", options.deliveryLimit ?? 20);
    this.confirmTimeoutMs = positiveInt("option confirmTimeoutMs", options.confirmTimeoutMs ?? 30_000);
    this.consumerTimeoutMs = positiveInt("option consumerTimeoutMs", options.consumerTimeoutMs ?? 1_800_000);
    this.unhandledRetryMs = nonNegativeInt("option unhandledRetryMs", options.unhandledRetryMs ?? 5_000);
    this.claimWaitMs = nonNegativeInt("option claimWaitMs", options.claimWaitMs ?? 0);
    this.deadScanLimit = positiveInt("option deadScanLimit", options.deadScanLimit ?? 10_000);
    this.heartbeatSeconds = nonNegativeInt("option heartbeatSeconds", options.heartbeatSeconds ?? 10);
    this.silenceCheckMs = nonNegativeInt("option silenceCheckMs", options.silenceCheckMs ?? 1_000);
    this.clock = options.clock ?? systemClock;
    this.logger = options.logger ?? consoleLogger();
    for (const queue of options.queues ?? []) this.known.add(checkName("queue", queue));
    this.capabilities = Object.freeze({
      jobRecords: false,
      cancel: false,
      priorities: false,
      uniqueIds: false,
      pause: false,
      clockDriven: false,
      idempotencyKeys: options.idempotency !== undefined,
      transactionalEnqueue: false,
      transactionalCompletion: false,
      // Every process that connects to the broker gets the deliveries pushed to it.
      crossProcessWakeups: true,
      multiProcess: true,
      claimAcrossQueues: "turns",
      // A parent held back until its children settle, and a dedup window, both need records the broker does not keep.
      flows: "none",
      dedupWindows: false,
      // Consumers are pushed deliveries up to their prefetch; no claim passes through a store that could count starts.
      queueLimits: false,
      jobFlowKeys: false,
      // A schedule's last fired tick must be compared and set with the enqueue: no record to keep it in.
      schedules: false,
      // No records of finished jobs to count by finish time.
      finishedWindows: false,
    });
    this.idempotency = options.idempotency ?? { once: () => Promise.reject(featureRefusal(this, "once")) };
    // Callers get the store behind the checking facade (../checked.ts): arguments checked once, for every store.
    return checkedBackend(this);
  }

  // ---------------------------------------------------------------- connection

  /** The live session, connecting (again) when there is none. */
  private session(): Promise<Session> {
    if (this.closed) return Promise.reject(new ConveyorError(`${this.description}: the backend is closed`));
    if (this.current?.alive) return Promise.resolve(this.current);
    this.opening ??= this.connect().finally(() => {
      this.opening = null;
    });
    return this.opening;
  }

  private async connect(): Promise<Session> {
    let connection: ChannelModel;
    try {
      connection = await openAmqpConnection(this.url, { heartbeatSeconds: this.heartbeatSeconds });
    } catch (error) {
      throw new StoreUnavailableError(this.description, { cause: error });
    }
    try {
      const publisher = await connection.createConfirmChannel();
      const consumer = await connection.createChannel();
      const session: Session = {
        generation: ++this.generation,
        connection,
        publisher,
        consumer,
        alive: true,
        declared: new Set(),
        delays: new Set(),
        consuming: new Map(),
        prefetch: null,
        heardAt: performance.now(),
        spokeAfterSilence: false,
        checking: null,
        consumers: new Set(),
        unsettled: new Set(),
        socket: socketOf(connection),
        corked: false,
      };
      this.listen(session);
      const lost = (why: string) => () => this.lose(session, why);
      connection.on("close", lost("connection closed"));
      for (const channel of [publisher, consumer]) {
        channel.on("error", () => undefined);
        channel.on("close", lost("channel closed"));
      }
      if (this.closed) {
        await connection.close().catch(() => undefined);
        throw new ConveyorError(`${this.description}: the backend is closed`);
      }
      this.current = session;
      return session;
    } catch (error) {
      await connection.close().catch(() => undefined);
      throw error instanceof ConveyorError ? error : new StoreUnavailableError(this.description, { cause: error });
    }
  }

  /**
   * Notes when the session's socket has something to read (a frame of any kind, heartbeats too).
   * amqplib reads it on the same 'readable' event, before or after this listener, in one go.
   */
  private listen(session: Session): void {
    const socket = session.socket;
    if (socket === null) {
      // An amqplib without the socket where 2.x keeps it: every claim after a silence checks.
      this.logger.warn({ store: this.description }, "amqplib connection has no readable socket to watch; claims check the session after every silence");
      return;
    }
    socket.on("readable", () => {
      const now = performance.now();
      if (now - session.heardAt > this.silenceCheckMs) session.spokeAfterSilence = true;
      session.heardAt = now;
    });
  }

  /**
   * Resolves once `session` is known open now: at once when this process read from it within
   * `silenceCheckMs` and nothing arrived after a longer silence since; else after a `basic.qos`
   * round trip on its consuming channel (a close the broker sent meanwhile is read before the
   * answer). A session that fails the check is dropped (the broker requeues its deliveries).
   */
  private async heardFrom(session: Session): Promise<void> {
    if (!session.alive) return;
    if (!session.spokeAfterSilence && performance.now() - session.heardAt <= this.silenceCheckMs) return;
    session.checking ??= (async () => {
      session.spokeAfterSilence = false;
      try {
        // Re-sets the prefetch it has (qos without global applies to consumers started later only).
        const roundTrip = session.consumer.prefetch(session.prefetch ?? this.fixedPrefetch ?? 1, false);
        await withTimeout(roundTrip, this.confirmTimeoutMs, () => new Error(`no answer to basic.qos within ${this.confirmTimeoutMs} ms`));
        session.heardAt = performance.now();
      } catch (error) {
        this.lose(session, `silent session failed its check: ${String(error)}`);
      }
    })().finally(() => {
      session.checking = null;
    });
    await session.checking;
  }

  /**
   * A session ended: the broker requeues every delivery it had pushed on it. Forget the unclaimed
   * ones; claimed ones stay in `held` until their holder settles (stale) or heartbeats (lost).
   */
  private lose(session: Session, why: string): void {
    if (!session.alive) return;
    session.alive = false;
    if (this.current === session) this.current = null;
    for (const [queue, buffer] of this.buffers) {
      this.buffers.set(
        queue,
        buffer.filter((d) => d.session !== session),
      );
    }
    session.connection.close().catch(() => undefined);
    if (!this.closed) {
      this.logger.warn(
        { store: this.description, generation: session.generation, why },
        "RabbitMQ session lost; its unsettled deliveries return to their queues, reconnecting on next use",
      );
      // Workers claim again (and so reconnect and consume again) at once rather than at their next poll.
      setTimeout(() => this.wake("*"), 100).unref();
    }
  }

  /** Runs `fn`, turning driver failures (socket, closed channel) into StoreUnavailableError. */
  private async guard<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (error) {
      if (error instanceof ConveyorError) throw error;
      throw new StoreUnavailableError(this.description, { cause: error });
    }
  }

  /** Declares a queue's work and dead queues once per session. */
  private async declared(session: Session, queue: string): Promise<void> {
    this.known.add(queue);
    if (session.declared.has(queue)) return;
    await declareQueue(session.publisher, this.names, queue, { deliveryLimit: this.deliveryLimit });
    session.declared.add(queue);
  }

  private async delayQueue(session: Session, queue: string, delayMs: number): Promise<string> {
    const bucket = bucketOf(delayMs);
    const name = this.names.delay(queue, bucket);
    if (!session.delays.has(name)) {
      await declareDelay(session.publisher, this.names, queue, bucket);
      session.delays.add(name);
    }
    return name;
  }

  /**
   * Publishes `envelope` where it belongs: the work queue when due, else a delay queue with the
   * remaining delay as expiration. Resolves once the broker confirmed it.
   */
  private place(session: Session, envelope: Envelope): Promise<void> {
    const delayMs = Math.min(MAX_HOP_MS, envelope.runAt - this.clock.now());
    const delayQueue = delayMs > 0 ? this.names.delay(envelope.queue, bucketOf(delayMs)) : null;
    const publish = () => {
      const properties: Options.Publish = propertiesOf(envelope);
      if (delayMs > 0) properties.expiration = String(Math.ceil(delayMs));
      return publishConfirmed(session.publisher, "", delayQueue ?? this.names.work(envelope.queue), encode(envelope), properties);
    };
    // The common case publishes at once (no await first), so a batch goes out in one burst.
    if (session.declared.has(envelope.queue) && (delayQueue === null || session.delays.has(delayQueue))) return publish();
    return (async () => {
      await this.declared(session, envelope.queue);
      if (delayMs > 0) await this.delayQueue(session, envelope.queue, delayMs);
      await publish();
    })();
  }

  private async publishDead(session: Session, envelope: Envelope): Promise<void> {
    await this.declared(session, envelope.queue);
    await publishConfirmed(session.publisher, "", this.names.dead(envelope.queue), encode(envelope), propertiesOf(envelope, forensicHeaders(envelope)));
  }

  /** `promise` (a broker round trip), or StoreUnavailableError after `confirmTimeoutMs`, dropping the session. */
  private confirmed<T>(promise: Promise<T>): Promise<T> {
    return withTimeout(promise, this.confirmTimeoutMs, () => {
      // A confirm that never comes: drop the session; the next call opens a fresh one.
      const session = this.current;
      if (session) this.lose(session, "no publisher confirm in time");
      return new StoreUnavailableError(this.description, { cause: new Error(`no broker confirm within ${this.confirmTimeoutMs} ms`) });
    });
  }

  // ---------------------------------------------------------------- lifecycle

  async migrate(): Promise<void> {
    await this.guard(async () => {
      const session = await this.session();
      for (const queue of this.known) await this.declared(session, queue);
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.opening?.catch(() => undefined);
    const session = this.current;
    this.current = null;
    this.buffers.clear();
    this.held.clear();
    if (session) {
      session.alive = false;
      // Closing the connection cancels the consumers and hands every unsettled delivery back to
      // its queue (the broker requeues them, in order).
      await session.connection.close().catch(() => undefined);
    }
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
    if (specs.length === 0) return [];
    const now = this.clock.now();
    const envelopes = specs.map((spec) => envelopeOf(spec, now, spec.runAt ?? now + spec.delayMs));
    await this.guard(async () => {
      const session = await this.session();
      for (const queue of new Set(specs.map((s) => s.queue))) await this.declared(session, queue);
      this.cork(session);
      await this.confirmed(Promise.all(envelopes.map((e) => this.place(session, e))));
    });
    for (const queue of new Set(specs.map((s) => s.queue))) this.wake(queue);
    return specs.map((s) => ({ id: s.id, duplicate: false }));
  }

  // ---------------------------------------------------------------- claim

  async claim(request: ClaimRequest): Promise<ClaimedJob[]> {
    const { limit } = request;
    const queues = request.queues.map((q) => checkName("queue", q));
    const names = new Set(request.names);
    if (queues.length === 0 || names.size === 0) return [];
    const session = await this.guard(() => this.session());
    // Bounded: a queue that is not available yet (recovering after a broker restart) can leave
    // basic.consume unanswered, and a worker's shutdown waits for its claim.
    // (Skipped once every consumer is up: a claim per delivery burst, each with a timer, added up.)
    if (!queues.every((q) => session.consumers.has(q))) await this.guard(() => this.confirmed(this.consume(session, queues, limit)));
    if (this.claimWaitMs > 0) await this.deliveries(queues, limit, this.claimWaitMs);
    // Never start a delivery of a session that may have closed while this process was not reading.
    const sessions = new Set<Session>();
    for (const queue of queues) for (const delivery of this.buffers.get(queue) ?? []) sessions.add(delivery.session);
    for (const s of sessions) await this.heardFrom(s);

    const now = this.clock.now();
    const claimed: ClaimedJob[] = [];
    const moves: Promise<void>[] = [];
    const start = this.turn++ % queues.length;
    for (let i = 0; i < queues.length && claimed.length < limit; i++) {
      const queue = queues[(start + i) % queues.length]!;
      const buffer = this.buffers.get(queue) ?? [];
      while (claimed.length < limit && buffer.length > 0) {
        const delivery = buffer.shift()!;
        if (!delivery.session.alive) continue;
        const envelope = decode(delivery.message.content);
        if (envelope === null) {
          moves.push(this.setAsideForeign(delivery));
          continue;
        }
        if (envelope.runAt > now + 1_000) {
          // Not due yet: a delay longer than one hop through a delay queue, or a clock ahead of ours.
          moves.push(this.move(delivery, (s) => this.place(s, envelope)));
          continue;
        }
        if (!names.has(envelope.name)) {
          const later = { ...envelope, runAt: now + this.unhandledRetryMs };
          moves.push(this.move(delivery, (s) => this.place(s, later)));
          continue;
        }
        const token = this.nextToken++;
        const attempt = envelope.attempt + 1;
        const redeliveries = Number(delivery.message.properties.headers?.["x-delivery-count"] ?? 0) || 0;
        this.held.set(token, { delivery, envelope, jobId: envelope.id, attempt, startedAt: now, worker: request.worker });
        const lease: Lease = { jobId: envelope.id, token };
        claimed.push({
          job: recordOf(envelope, "active", {
            attempt,
            startedAt: now,
            stalls: redeliveries,
            lease: { ...lease, expiresAt: now + request.leaseMs, worker: request.worker },
          }),
          lease,
          leaseExpiresAt: now + request.leaseMs,
        });
      }
    }
    await Promise.all(moves);
    return claimed;
  }

  /** Resolves once `limit` deliveries of `queues` are buffered, or after `waitMs`. */
  private async deliveries(queues: readonly string[], limit: number, waitMs: number): Promise<void> {
    const buffered = () => queues.reduce((n, q) => n + (this.buffers.get(q)?.length ?? 0), 0);
    const deadline = performance.now() + waitMs;
    while (buffered() < limit && performance.now() < deadline) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, Math.max(1, deadline - performance.now()));
        const unsubscribe = this.onDelivery(done);
        function done() {
          clearTimeout(timer);
          unsubscribe();
          resolve();
        }
      });
    }
  }

  private readonly deliveryWaiters = new Set<() => void>();
  private onDelivery(callback: () => void): () => void {
    this.deliveryWaiters.add(callback);
    return () => this.deliveryWaiters.delete(callback);
  }

  /** Starts consumers for the queues that have none on this session. */
  private async consume(session: Session, queues: readonly string[], limit: number): Promise<void> {
    if (this.consumersStopped) return;
    for (const queue of queues) {
      let started = session.consuming.get(queue);
      if (!started) {
        started = this.startConsumer(session, queue, limit);
        session.consuming.set(queue, started);
        started.catch(() => session.consuming.delete(queue));
      }
      await started;
    }
  }

  private async startConsumer(session: Session, queue: string, limit: number): Promise<string> {
    await this.declared(session, queue);
    const prefetch = this.fixedPrefetch ?? session.prefetch ?? limit;
    if (session.prefetch !== prefetch) {
      // Quorum queues support only per-consumer prefetch: each queue's consumer gets this many.
      await session.consumer.prefetch(prefetch, false);
      session.prefetch = prefetch;
    }
    if (!this.buffers.has(queue)) this.buffers.set(queue, []);
    const { consumerTag } = await session.consumer.consume(
      this.names.work(queue),
      (message) => {
        if (message === null) {
          // The broker cancelled the consumer (queue deleted): consume again at the next claim.
          session.consuming.delete(queue);
          session.consumers.delete(queue);
          return;
        }
        if (!session.alive) return;
        session.unsettled.add(message.fields.deliveryTag);
        this.buffers.get(queue)!.push({ message, session, queue, arrivedAt: performance.now() });
        for (const waiter of [...this.deliveryWaiters]) waiter();
        this.wake(queue);
      },
      { noAck: false },
    );
    session.consumers.add(queue);
    return consumerTag;
  }

  /**
   * The last wake-up listener left (every Worker on this backend shut down or was closed): cancel
   * the consumers, so the broker pushes nothing more here, and hand back every delivery that was
   * buffered but never claimed (nack-requeue), so other workers run them now rather than after
   * this connection closes. Claimed jobs stay with their holders until settled.
   */
  private async stopConsuming(): Promise<void> {
    this.consumersStopped = true;
    const session = this.current;
    if (!session?.alive || session.consuming.size === 0) return;
    const consumers = [...session.consuming.values()];
    session.consuming.clear();
    session.consumers.clear();
    try {
      for (const tag of await Promise.all(consumers)) await session.consumer.cancel(tag);
    } catch {
      // The channel died meanwhile: the broker requeued everything on it already.
      return;
    }
    for (const [queue, buffer] of this.buffers) {
      this.buffers.set(queue, []);
      for (const delivery of buffer) if (delivery.session.alive) this.requeue(delivery);
    }
  }

  /**
   * Moves a delivery elsewhere without running it: publish its new copy (confirmed), then ack the
   * original. When the publish fails the delivery is handed back to its queue instead.
   */
  private async move(delivery: Delivery, publish: (session: Session) => Promise<void>): Promise<void> {
    try {
      const session = await this.session();
      await this.confirmed(publish(session));
    } catch (error) {
      this.logger.warn({ store: this.description, err: String(error) }, "could not move a delivery; requeued it");
      if (delivery.session.alive) this.requeue(delivery);
      return;
    }
    if (delivery.session.alive) this.ack(delivery);
  }

  /** A message on a work queue that is no Conveyor job: kept in the dead queue, never dropped. */
  private setAsideForeign(delivery: Delivery): Promise<void> {
    return this.move(delivery, async (session) => {
      await this.declared(session, delivery.queue);
      const props = delivery.message.properties as Options.Publish;
      await publishConfirmed(session.publisher, "", this.names.dead(delivery.queue), delivery.message.content, {
        ...props,
        headers: {
          ...(props.headers as Record<string, unknown>),
          "x-conveyor-error-message": "not a Conveyor job message (unreadable body); set aside unprocessed",
        },
      });
    });
  }

  // ---------------------------------------------------------------- leases and settles

  /**
   * Corks the session's socket until the end of this turn of the event loop: the frames amqplib
   * writes meanwhile (a batch of acks, of publishes: three frames each) leave in one write instead
   * of one system call per frame, which was a fifth of the processing profile.
   */
  private cork(session: Session): void {
    const socket = session.socket;
    if (socket === null || session.corked || !session.alive) return;
    session.corked = true;
    socket.cork();
    setImmediate(() => {
      session.corked = false;
      socket.uncork();
    });
  }

  /** Acknowledges one delivery on its own channel (the caller made sure it lives). */
  private ack(delivery: Delivery): void {
    delivery.session.unsettled.delete(delivery.message.fields.deliveryTag);
    delivery.session.consumer.ack(delivery.message);
  }

  /** Hands one delivery back to its queue (nack, requeue) on its own channel. */
  private requeue(delivery: Delivery): void {
    delivery.session.unsettled.delete(delivery.message.fields.deliveryTag);
    delivery.session.consumer.nack(delivery.message, false, true);
  }

  /**
   * Acknowledges deliveries of live sessions: per session one ack with `multiple` when they are
   * every unsettled delivery up to the highest of them (jobs mostly finish in the order they came),
   * else one ack each. Never covers a delivery not in the batch.
   */
  private ackAll(deliveries: readonly Delivery[]): void {
    const bySession = new Map<Session, Delivery[]>();
    for (const d of deliveries) {
      const list = bySession.get(d.session);
      if (list) list.push(d);
      else bySession.set(d.session, [d]);
    }
    for (const [session, list] of bySession) {
      this.cork(session);
      let highest = list[0]!;
      for (const d of list) if (d.message.fields.deliveryTag > highest.message.fields.deliveryTag) highest = d;
      const top = highest.message.fields.deliveryTag;
      let upToTop = 0;
      for (const tag of session.unsettled) {
        if (tag > top) break;
        upToTop++;
      }
      if (list.length > 1 && upToTop === list.length) {
        for (const d of list) session.unsettled.delete(d.message.fields.deliveryTag);
        session.consumer.ack(highest.message, true);
      } else {
        for (const d of list) this.ack(d);
      }
    }
  }

  /** The held delivery a lease names, while its channel lives; null when stale. */
  private live(lease: Lease): Held | null {
    const held = this.held.get(lease.token);
    if (!held || held.jobId !== lease.jobId) return null;
    if (!held.delivery.session.alive) {
      this.held.delete(lease.token);
      return null;
    }
    return held;
  }

  async heartbeat(leases: readonly Lease[], _leaseMs: number): Promise<HeartbeatResult> {
    const lost: Array<{ lease: Lease; reason: LeaseLossReason }> = [];
    const margin = Math.min(60_000, Math.floor(this.consumerTimeoutMs / 10));
    const now = performance.now();
    for (const lease of leases) {
      const held = this.held.get(lease.token);
      if (!held || held.jobId !== lease.jobId) {
        // A token this process issued and no longer holds: its channel died (a settled lease is
        // not heartbeated). One it never issued names nothing.
        lost.push({ lease, reason: Number.isInteger(lease.token) && lease.token > 0 && lease.token < this.nextToken ? "expired" : "gone" });
        continue;
      }
      if (!held.delivery.session.alive) {
        // The channel died: the broker has requeued the message (it may run elsewhere already).
        this.held.delete(lease.token);
        lost.push({ lease, reason: "expired" });
        continue;
      }
      if (now - held.delivery.arrivedAt > this.consumerTimeoutMs - margin) {
        // Before RabbitMQ's consumer_timeout closes the channel with every job on it: hand this
        // one back alone. It runs again (the delivery counts toward x-delivery-limit).
        this.held.delete(lease.token);
        this.requeue(held.delivery);
        this.logger.warn(
          { store: this.description, jobId: lease.jobId, consumerTimeoutMs: this.consumerTimeoutMs },
          "job held close to RabbitMQ's consumer_timeout: handed back to its queue; raise consumer_timeout for jobs this long",
        );
        lost.push({ lease, reason: "expired" });
      }
    }
    return { lost };
  }

  async complete(items: readonly Completion[]): Promise<SettleResult[]> {
    const acks: Delivery[] = [];
    const results = items.map((item): SettleResult => {
      const held = this.live(item.lease);
      if (!held) return "stale";
      this.held.delete(item.lease.token);
      acks.push(held.delivery);
      return "applied";
    });
    this.ackAll(acks);
    return results;
  }

  async fail(items: readonly Failure[]): Promise<SettleResult[]> {
    const delays = items.map((item) => item.retryDelayMs);
    const queues = new Set(items.map((i) => this.held.get(i.lease.token)?.delivery.queue));
    return this.guard(async () => {
      const session = await this.session();
      const now = this.clock.now();
      const results = await Promise.all(
        items.map(async (item, i): Promise<SettleResult> => {
          const held = this.live(item.lease);
          if (!held) return "stale";
          const delay = delays[i]!;
          const envelope = this.afterAttempt(held, now, delay === null ? "dead" : "failed", item.error);
          if (delay === null) {
            envelope.finishedAt = now;
            await this.confirmed(this.publishDead(session, envelope));
          } else {
            envelope.runAt = now + delay;
            await this.confirmed(this.place(session, envelope));
          }
          // Only once the next state is confirmed: ack the attempt's delivery, if its channel still
          // lives. If it died meanwhile the broker requeued it and the job runs once more.
          if (!held.delivery.session.alive || this.held.get(item.lease.token) !== held) return "stale";
          this.held.delete(item.lease.token);
          this.ack(held.delivery);
          return "applied";
        }),
      );
      for (const queue of queues) if (queue) this.wake(queue);
      return results;
    });
  }

  /** The envelope after an attempt: its history entry and error recorded. */
  private afterAttempt(held: Held, now: number, outcome: AttemptRecord["outcome"], error: ErrorInfo): Envelope {
    const record: AttemptRecord = {
      attempt: held.attempt,
      workerId: held.worker.id,
      host: held.worker.host,
      pid: held.worker.pid,
      startedAt: held.startedAt,
      finishedAt: now,
      outcome,
      error,
    };
    return { ...held.envelope, attempt: held.attempt, history: [...held.envelope.history, record], error };
  }

  async release(leases: readonly Lease[]): Promise<SettleResult[]> {
    return leases.map((lease) => {
      const held = this.live(lease);
      if (!held) return "stale";
      this.held.delete(lease.token);
      this.requeue(held.delivery);
      return "applied";
    });
  }

  async progress(lease: Lease): Promise<SettleResult> {
    // Nothing stores it (no job records); the answer still says whether the lease is ours.
    return this.live(lease) ? "applied" : "stale";
  }

  async appendLogs(lease: Lease, lines: readonly string[]): Promise<SettleResult> {
    // No job record to keep them with: the lines go to this process's logger, with the job's id,
    // so an operator still finds them (docs/amqp.md); the answer says whether the lease is ours.
    if (!this.live(lease)) return "stale";
    for (const line of lines) this.logger.info({ store: this.description, jobId: lease.jobId, token: lease.token }, line);
    return "applied";
  }

  logs(id: string): Promise<JobLogLine[]> {
    return Promise.reject(
      new UnsupportedByStoreError(
        this.description,
        "jobRecords",
        `read the ctx.log lines of job ${JSON.stringify(id)}: RabbitMQ keeps no job records; the lines went to the worker's logger`,
      ),
    );
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

  // ---------------------------------------------------------------- maintenance: the broker's job

  async rescueExpired(): Promise<RescuedJob[]> {
    // The broker requeues the deliveries of a dead connection itself; there is no lease to expire.
    return [];
  }

  async promoteDue(): Promise<number> {
    // Delay queues dead-letter due messages into the work queue themselves.
    return 0;
  }

  async prune(): Promise<PruneResult> {
    // Completed jobs are acknowledged messages: nothing is kept to prune.
    return { jobs: 0, idempotencyKeys: 0 };
  }

  // ---------------------------------------------------------------- the dead-letter queue

  /**
   * Reads the dead queue of `queue` with basic.get on a channel of its own, calling `visit` for
   * each message until it returns true or the queue (or `deadScanLimit`) runs out. `visit` may ack
   * the message it stops at; every other message read is handed back when the channel closes.
   */
  private async scanDead(queue: string, visit: (envelope: Envelope, message: GetMessage, channel: Channel) => Promise<boolean>): Promise<void> {
    await this.guard(async () => {
      const session = await this.session();
      await this.declared(session, queue);
      const channel = await session.connection.createChannel();
      channel.on("error", () => undefined);
      try {
        for (let n = 0; n < this.deadScanLimit; n++) {
          const message = await channel.get(this.names.dead(queue), { noAck: false });
          if (message === false) break;
          const envelope = deadEnvelope(message, queue);
          if (await visit(envelope, message, channel)) {
            await settleBarrier(channel, this.names.dead(queue));
            break;
          }
        }
      } finally {
        await channel.close().catch(() => undefined);
      }
    });
  }

  private queuesFor(queue: string | undefined, what: string): string[] {
    if (queue !== undefined) return [checkName("queue", queue)];
    if (this.known.size === 0) {
      throw new InvalidInputError(
        `${what} on RabbitMQ needs a queue name (RabbitMQ cannot list queues over AMQP); name the queue, or pass { queues } to AmqpBackend`,
      );
    }
    return [...this.known];
  }

  enqueueFlow(_nodes: readonly FlowNodeSpec[]): Promise<EnqueueResult[]> {
    return Promise.reject(featureRefusal(this, "enqueueFlow"));
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

  finishedWindow(queue: string): Promise<FinishedWindow> {
    return Promise.reject(
      new UnsupportedByStoreError(
        this.description,
        "finishedWindows",
        `count the jobs queue ${JSON.stringify(queue)} finished in a time window: RabbitMQ keeps no record of a job once acknowledged (capabilities.finishedWindows is false); ` +
          "chart throughput from the workers' metrics (conveyor-jobs/metrics) instead",
      ),
    );
  }

  flow(id: string): Promise<FlowInfo | null> {
    return Promise.reject(featureRefusal(this, "flow", id));
  }

  async get(id: string, queue?: string): Promise<JobRecord | null> {
    let found: JobRecord | null = null;
    for (const q of this.queuesFor(queue, "get")) {
      await this.scanDead(q, async (envelope) => {
        if (envelope.id !== id) return false;
        found = recordOf(envelope, "dead");
        return true;
      });
      if (found) return found;
    }
    throw new UnsupportedByStoreError(
      this.description,
      "jobRecords",
      `tell the state of job ${JSON.stringify(id)}: RabbitMQ keeps no index of jobs by id, only dead letters can be looked up (and it is not one). ` +
        "Track status in your own store, or use a backend with job records (SQLite, PostgreSQL, Redis) where clients poll jobs",
    );
  }

  async list(filter: ListFilter = {}, page: Page = {}): Promise<JobRecord[]> {
    const args = listArgsOf(filter, page);
    if (filter.state !== "dead") {
      throw new UnsupportedByStoreError(
        this.description,
        "jobRecords",
        `list ${filter.state ?? "all"} jobs: RabbitMQ does not let a client read a queue without taking its messages; only dead letters can be listed (state "dead")`,
      );
    }
    const jobs: JobRecord[] = [];
    for (const q of this.queuesFor(filter.queue, "listing dead jobs")) {
      await this.scanDead(q, async (envelope) => {
        jobs.push(recordOf(envelope, "dead"));
        return false;
      });
    }
    return pageDeadLetters(jobs, filter, args);
  }

  async replay(id: string, queue?: string): Promise<ReplayResult> {
    for (const q of this.queuesFor(queue, "replay")) {
      let done = false;
      await this.scanDead(q, async (envelope, message, channel) => {
        if (envelope.id !== id) return false;
        const session = await this.session();
        // The new copy first, confirmed; only then the dead letter goes.
        await this.confirmed(this.place(session, this.revived(envelope)));
        channel.ack(message);
        done = true;
        return true;
      });
      if (done) {
        this.wake(q);
        return "replayed";
      }
    }
    return "not-found";
  }

  /** A dead letter's job as a replay sends it back: due now, a fresh set of attempts, one more replay. */
  private revived(envelope: Envelope): Envelope {
    return { ...envelope, attempt: 0, error: null, finishedAt: null, runAt: this.clock.now(), replays: envelope.replays + 1 };
  }

  async replayAllDead(queue: string, options: { name?: string; limit?: number } = {}): Promise<{ replayed: string[] }> {
    const q = checkName("queue", queue);
    const limit = options.limit === undefined ? Infinity : positiveInt("option limit", options.limit);
    const replayed: string[] = [];
    await this.guard(async () => {
      const session = await this.session();
      await this.declared(session, q);
      const channel = await session.connection.createChannel();
      channel.on("error", () => undefined);
      try {
        // Only the letters there at the start: a replayed job that dies again meanwhile joins the
        // tail, and reading on would replay it twice (or forever).
        let left = (await channel.checkQueue(this.names.dead(q))).messageCount;
        while (left > 0 && replayed.length < limit) {
          // A batch of copies goes out in one burst and is confirmed together; only then are
          // their dead letters acked. Letters of other names stay unacked: they go back to the
          // dead queue, unchanged, when the channel closes.
          const batch: Array<{ message: GetMessage; again: Envelope }> = [];
          while (left > 0 && batch.length < REPLAY_BATCH && replayed.length + batch.length < limit) {
            const message = await channel.get(this.names.dead(q), { noAck: false });
            left--;
            if (message === false) {
              left = 0;
              break;
            }
            const envelope = deadEnvelope(message, q);
            if (options.name !== undefined && envelope.name !== options.name) continue;
            batch.push({ message, again: this.revived(envelope) });
          }
          if (batch.length === 0) continue;
          await this.confirmed(Promise.all(batch.map((b) => this.place(session, b.again))));
          for (const b of batch) {
            channel.ack(b.message);
            replayed.push(b.again.id);
          }
        }
        await settleBarrier(channel, this.names.dead(q));
      } finally {
        await channel.close().catch(() => undefined);
      }
    });
    if (replayed.length > 0) this.wake(q);
    return { replayed };
  }

  async remove(id: string, queue?: string): Promise<RemoveResult> {
    for (const q of this.queuesFor(queue, "remove")) {
      let done = false;
      await this.scanDead(q, async (envelope, message, channel) => {
        if (envelope.id !== id) return false;
        channel.ack(message);
        done = true;
        return true;
      });
      if (done) return "removed";
    }
    return "not-found";
  }

  // ---------------------------------------------------------------- stats and unsupported admin

  async stats(queue?: string): Promise<QueueStats[]> {
    const queues = queue !== undefined ? [checkName("queue", queue)] : [...this.known];
    return this.guard(async () => {
      const session = await this.session();
      const out: QueueStats[] = [];
      for (const q of queues) {
        await this.declared(session, q);
        const depth = (name: string) => this.depth(session, name);
        let scheduled = 0;
        for (let bucket = 0; bucket <= MAX_BUCKET; bucket++) scheduled += await depth(this.names.delay(q, bucket));
        const counts: Record<JobState, number> = {
          scheduled,
          waiting: await depth(this.names.work(q)),
          // Only this process's: the broker does not say how many deliveries are unacknowledged.
          active: [...this.held.values()].filter((h) => h.delivery.queue === q).length,
          completed: 0,
          "waiting-children": 0,
          dead: await depth(this.names.dead(q)),
          cancelled: 0,
        };
        out.push({ queue: q, paused: false, counts, oldestWaitingAgeMs: null });
      }
      return out;
    });
  }

  /** Ready messages of a queue, 0 when it does not exist (a passive declare fails its channel). */
  private async depth(session: Session, name: string): Promise<number> {
    const channel = await session.connection.createChannel();
    channel.on("error", () => undefined);
    try {
      return (await channel.checkQueue(name)).messageCount;
    } catch {
      return 0;
    } finally {
      await channel.close().catch(() => undefined);
    }
  }

  async cancel(id: string, _queue?: string): Promise<CancelResult> {
    throw featureRefusal(this, "cancel", id);
  }

  async pause(queue: string): Promise<void> {
    throw featureRefusal(this, "pause", queue);
  }

  async resume(queue: string): Promise<void> {
    throw featureRefusal(this, "resume", queue);
  }

  /**
   * Wake-ups: called for a queue when a delivery for it arrives (or this process enqueued to it).
   * A Worker subscribes while it runs and unsubscribes as its shutdown begins; when the last
   * listener leaves, the consumers are cancelled and unclaimed deliveries handed back (see
   * `stopConsuming`). A claim after that starts the consumers again.
   */
  subscribe(listener: WakeListener): () => void {
    this.listeners.add(listener);
    this.consumersStopped = false;
    return () => {
      if (!this.listeners.delete(listener) || this.listeners.size > 0) return;
      this.stopConsuming().catch((error: unknown) => this.logger.warn({ store: this.description, err: String(error) }, "cancelling the consumers failed"));
    };
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

  /** The RabbitMQ queues Conveyor declares for `queue`: work, dead and every delay bucket. */
  brokerQueues(queue: string): string[] {
    return [this.names.work(queue), this.names.dead(queue), ...Array.from({ length: MAX_BUCKET + 1 }, (_, k) => this.names.delay(queue, k))];
  }

  /** Diagnostics for tests and the chaos harness: the current session's generation and held deliveries. */
  get state(): { generation: number | null; held: number; buffered: number; host: string } {
    let buffered = 0;
    for (const b of this.buffers.values()) buffered += b.length;
    return { generation: this.current?.alive ? this.current.generation : null, held: this.held.size, buffered, host: hostname() };
  }
}

/** The socket under an amqplib connection (amqplib 2.x keeps it at `connection.stream`), or null. */
function socketOf(model: ChannelModel): Socket | null {
  const stream = (model.connection as { stream?: unknown }).stream;
  if (stream === null || typeof stream !== "object") return null;
  const socket = stream as Partial<Socket>;
  return typeof socket.on === "function" && typeof socket.cork === "function" && typeof socket.uncork === "function" ? (stream as Socket) : null;
}

/**
 * A dead-queue message as an envelope. A message the broker dead-lettered itself (x-delivery-limit:
 * it kept crashing or stalling its consumers) still has the body of its last attempt; its error says
 * why it is here.
 */
/**
 * Makes the acks sent on `channel` count before it closes. A quorum queue applies acks
 * asynchronously, and closing the channel right after them races its "consumer gone" handling:
 * RabbitMQ 3.10 here returned 96 of 130 just-acked dead letters to the queue (the job then
 * replayed and still dead). One more `basic.get` on the same queue is a synchronous command to
 * the same queue leader, so it reaches it after the acks; a message it takes goes back unchanged
 * with the channel's close.
 */
async function settleBarrier(channel: Channel, queue: string): Promise<void> {
  await channel.get(queue, { noAck: false });
}

function deadEnvelope(message: GetMessage, queue: string): Envelope {
  const envelope = decode(message.content);
  const deaths = message.properties.headers?.["x-death"] as Array<{ reason?: string; count?: number; time?: { value?: number } | Date }> | undefined;
  const limit = deaths?.find((d) => d.reason === "delivery_limit");
  if (envelope === null) {
    // Not a Conveyor message: shown as a job with the raw body as its data, so it can be removed.
    const text = message.content.toString("utf8");
    let data: string;
    try {
      data = JSON.stringify(JSON.parse(text));
    } catch {
      data = JSON.stringify(text);
    }
    const id = typeof message.properties.messageId === "string" ? message.properties.messageId : `delivery-${message.fields.deliveryTag}`;
    return {
      v: 1,
      id,
      queue,
      name: typeof message.properties.type === "string" ? message.properties.type : "(unknown)",
      payload: data,
      maxAttempts: 1,
      backoff: { type: "fixed", delayMs: 0 },
      timeoutMs: null,
      retainCompletedMs: null,
      retainDeadMs: null,
      meta: null,
      createdAt: 0,
      runAt: 0,
      attempt: 0,
      history: [],
      error: { name: "ForeignMessage", message: "not a Conveyor job message: set aside unprocessed", stack: null },
      replays: 0,
      finishedAt: null,
    };
  }
  if (limit && envelope.finishedAt === null) {
    const time = limit.time instanceof Date ? limit.time.getTime() : typeof limit.time?.value === "number" ? limit.time.value * 1000 : null;
    return {
      ...envelope,
      finishedAt: time,
      error: {
        name: "LeaseExpiredError",
        message:
          "dead-lettered by RabbitMQ after x-delivery-limit deliveries without a settle: the job keeps crashing or stalling its workers " +
          "(or was handed back on shutdown that often). Inspect its payload and history, fix the handler, then replay it",
        stack: null,
      },
    };
  }
  return envelope;
}
