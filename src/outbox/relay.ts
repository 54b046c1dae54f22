/**
 * The relay: takes batches of committed events from a source (polling the outbox table, or the
 * logical replication stream), publishes them to a target, and records the outcome with the
 * source (delete, set aside, or confirm the LSN) only after the target confirmed.
 *
 * At-least-once: an event leaves the outbox only after its target confirmed it, so a crash after
 * the confirm and before that record publishes it again (a redelivery, same outbox id); nothing
 * published is ever forgotten and nothing uncommitted is ever seen.
 *
 * Order: the events of one key reach the target in commit order. When the target fails an event,
 * the events of the same key after it in that batch are not recorded as published even if the
 * target took them: they are published again after it, so the last copy a consumer sees of each
 * is in order.
 */
import { cutText, toError } from "../core/checks.js";
import { JOB_LOG_TRUNCATION_MARK } from "../core/job-log.js";
import { InvalidInputError } from "../core/errors.js";
import { TypedEmitter } from "../core/events.js";
import { consoleLogger, type Logger } from "../core/logger.js";
import { failpoint } from "../runtime/failpoints.js";
import type { OutboxEvent } from "./event.js";
import type { PublishOutcome, Target } from "./target.js";
import { shown } from "../core/checks.js";

/** How far behind the relay is, as the source measures it. */
export interface SourceLag {
  /** Age in ms of the oldest event not yet published (null: none waiting). */
  oldestUnpublishedAgeMs: number | null;
  /** Events waiting in the outbox table (poll mode), or null where not counted. */
  backlog: number | null;
  /** cdc: WAL bytes the replication slot holds back (null in poll mode). */
  slotLagBytes: number | null;
}

/** An event the target refused for good, with why. */
export interface RejectedEvent {
  event: OutboxEvent;
  error: Error;
}

/** The most of a target's error message an event set aside keeps (`outbox_dead.error`), in UTF-16 code units. */
const SET_ASIDE_REASON_MAX = 4_000;

/** Why an event was set aside, as its `outbox_dead` row keeps it: the target's error message, cut to SET_ASIDE_REASON_MAX. */
export function setAsideReason(rejected: RejectedEvent): string {
  return cutText(rejected.error.message, SET_ASIDE_REASON_MAX, JOB_LOG_TRUNCATION_MARK);
}

/** A batch claimed from the source. Exactly one of settle / abandon is called. */
export interface ClaimedBatch {
  readonly events: readonly OutboxEvent[];
  /**
   * Records the outcome: `published` events are done, `rejected` ones are set aside with their
   * error (`target` says which target refused them); every other event of the batch stays to be
   * claimed again.
   */
  settle(published: readonly OutboxEvent[], rejected: readonly RejectedEvent[], target: string): Promise<void>;
  /** Gives the whole batch back untouched. */
  abandon(): Promise<void>;
}

/** Callbacks a source reports through. */
export interface SourceHooks {
  /** New events may be there: claim now instead of at the next poll. */
  wake(): void;
  /** Something an operator should see (retained WAL past its limit, a lost connection). */
  warn(message: string, fields?: object): void;
}

/** Where committed events come from. */
export interface OutboxSource {
  readonly description: string;
  /** Default `pollIntervalMs` for this source, when the relay is given none. */
  readonly defaultPollIntervalMs: number;
  start(hooks: SourceHooks): Promise<void>;
  /**
   * Up to about `limit` events (poll mode may add the rest of a key it holds), or null when none.
   * The relay claims the next batch while the previous one is still open (being published or
   * recorded): a source must treat its own open batches' events as held by this relay, never hand
   * them out again, and may return events of the same keys after them. The relay publishes such a
   * batch only after the open one was published, settles it only after the open one was settled,
   * and abandons it if the open one was not wholly published or not settled.
   */
  claim(limit: number): Promise<ClaimedBatch | null>;
  lag(): Promise<SourceLag>;
  close(): Promise<void>;
}

/** Options of {@link Relay}. */
export interface RelayOptions {
  source: OutboxSource;
  target: Target;
  /** Events claimed and published per round. Default 500. */
  batchSize?: number;
  /**
   * Longest wait in ms between two looks at an idle outbox. Default: the source's (PostgreSQL
   * poll 1000, woken at once by NOTIFY; SQLite 100; cdc 1000, the stream pushes events).
   */
  pollIntervalMs?: number;
  /** First retry delay in ms after the target failed, before full jitter. Default 100. */
  backoffBaseMs?: number;
  /** Largest retry delay in ms, before full jitter. Default 30000. */
  backoffMaxMs?: number;
  /** Default: JSON lines on stderr, warnings and errors. */
  logger?: Logger;
}

/** The relay's event stream (stats come from it; logs and metrics subscribe to it). */
export interface RelayEvents {
  /** A batch's events were confirmed by the target and recorded (cdc: recorded in the background, docs/outbox.md). */
  "relay:published": { count: number; ids: string[] };
  /** The target failed (down, timed out, refused for now): the relay backs off `delayMs`. */
  "relay:retry": { error: Error; pending: number; failures: number; delayMs: number };
  /** An event the target refused for good was set aside. */
  "relay:rejected": { event: OutboxEvent; error: Error };
  /** The source failed (database unreachable); the relay retries after `delayMs`. */
  "relay:error": { error: Error; during: "claim" | "settle" | "lag"; delayMs: number };
  /** A condition an operator should act on (retained WAL past its limit). */
  "relay:warning": { message: string; fields: object };
}

/** What `stats()` answers. */
export interface RelayStats extends SourceLag {
  /** Events published (confirmed and recorded) since start. */
  published: number;
  /** Events set aside since start. */
  rejected: number;
  /** Failed publish rounds since start. */
  failures: number;
  /** Failed rounds in a row right now (0 when the target is healthy). */
  consecutiveFailures: number;
  /** Events published per second over the last 10 s. */
  publishedPerSecond: number;
  /** The last error, or null. */
  lastError: string | null;
  running: boolean;
}

const RATE_WINDOW_MS = 10_000;

/** A claim's result: a batch (null: nothing waiting), or why the source failed. */
type Claimed = { batch: ClaimedBatch | null } | { error: Error };
/** Whether a round's outcome was recorded with the source. */
type RecordOutcome = { ok: true } | { ok: false; error: Error };

/** Runs a source into a target until closed. */
export class Relay extends TypedEmitter<RelayEvents> {
  readonly source: OutboxSource;
  readonly target: Target;
  readonly batchSize: number;
  readonly pollIntervalMs: number;
  readonly backoffBaseMs: number;
  readonly backoffMaxMs: number;
  private readonly logger: Logger;
  private running = false;
  private loopDone: Promise<void> = Promise.resolve();
  private woken = false;
  private wakeWaiter: (() => void) | null = null;
  private published = 0;
  private rejected = 0;
  private failures = 0;
  private consecutiveFailures = 0;
  private lastError: string | null = null;
  private readonly recent: Array<{ at: number; count: number }> = [];

  constructor(options: RelayOptions) {
    super();
    if (!options?.source || !options.target) throw new InvalidInputError("new Relay({ source, target }): both are required");
    this.source = options.source;
    this.target = options.target;
    this.batchSize = checkInt("batchSize", options.batchSize ?? 500, 1, 100_000);
    this.pollIntervalMs = checkInt("pollIntervalMs", options.pollIntervalMs ?? this.source.defaultPollIntervalMs, 1, 3_600_000);
    this.backoffBaseMs = checkInt("backoffBaseMs", options.backoffBaseMs ?? 100, 1, 3_600_000);
    this.backoffMaxMs = checkInt("backoffMaxMs", options.backoffMaxMs ?? 30_000, this.backoffBaseMs, 3_600_000);
    this.logger = options.logger ?? consoleLogger();
  }

  /** Starts the source and the relay loop; resolves once the source is connected. */
  async start(): Promise<void> {
    if (this.running) return;
    await this.source.start({
      wake: () => this.wake(),
      warn: (message, fields = {}) => {
        this.logger.warn({ source: this.source.description, ...fields }, message);
        this.emit("relay:warning", { message, fields });
      },
    });
    this.running = true;
    this.loopDone = this.loop();
  }

  /** Stops after the round in progress (its outcome is recorded), then closes source and target. */
  async close(): Promise<void> {
    if (this.running) {
      this.running = false;
      this.wake();
      await this.loopDone;
    }
    await this.source.close();
    await this.target.close();
  }

  /** Counters, rate and lag. */
  async stats(): Promise<RelayStats> {
    const lag = await this.source.lag();
    return {
      ...lag,
      published: this.published,
      rejected: this.rejected,
      failures: this.failures,
      consecutiveFailures: this.consecutiveFailures,
      publishedPerSecond: this.rate(),
      lastError: this.lastError,
      running: this.running,
    };
  }

  private wake(): void {
    this.woken = true;
    this.wakeWaiter?.();
  }

  private rate(): number {
    const since = Date.now() - RATE_WINDOW_MS;
    while (this.recent.length > 0 && this.recent[0]!.at < since) this.recent.shift();
    return this.recent.reduce((sum, r) => sum + r.count, 0) / (RATE_WINDOW_MS / 1000);
  }

  /** Waits up to `ms`, or until woken (or closed). */
  private async pause(ms: number, wakeable: boolean): Promise<void> {
    if (wakeable && this.woken) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wakeWaiter = wakeable || !this.running ? done : () => (this.running ? undefined : done());
    });
    this.wakeWaiter = null;
  }

  /** Full jitter: random(0, min(max, base · 2^failures)). */
  private backoffMs(): number {
    const ceiling = Math.min(this.backoffMaxMs, this.backoffBaseMs * 2 ** Math.min(this.consecutiveFailures, 30));
    return Math.floor(Math.random() * ceiling) + 1;
  }

  /**
   * Rounds, two at a time: while the target confirms batch N, batch N-1 is recorded with the
   * source (deleted / LSN confirmed) and, once that is done, batch N+1 is claimed. Order holds
   * because batch N+1 is published only after batch N was confirmed, and recorded only after
   * batch N was recorded; when batch N was not wholly published (a retry) or not recorded, batch
   * N+1 is given back unpublished (or, if it went out already, given back to be published again
   * after N's events: a redelivery, last copies in order).
   */
  private async loop(): Promise<void> {
    let ahead: Promise<Claimed> | null = null;
    let recording: Promise<RecordOutcome> = Promise.resolve({ ok: true });
    try {
      while (this.running) {
        const claimed: Claimed = await (ahead ?? this.claim());
        ahead = null;
        if ("error" in claimed) {
          await recording;
          await this.sourceFailed(claimed.error, "claim");
          continue;
        }
        const batch = claimed.batch;
        if (batch === null || batch.events.length === 0) {
          await batch?.abandon().catch(() => undefined);
          await this.pause(this.pollIntervalMs, true);
          continue;
        }
        const previous = recording;
        // Claim the next batch once the previous one is recorded (its rows gone, its keys free
        // for the claim), while this one is with the target.
        ahead = previous.then((r) => (r.ok && this.running ? this.claim() : { batch: null }));
        const outcomes = await this.publishToTarget(batch.events);
        const before = await previous;
        if (!before.ok) {
          // The previous batch was not recorded and comes again: this one must follow it.
          ahead = null; // it claimed nothing: it runs only after a recorded batch
          await batch.abandon().catch(() => undefined);
          await this.sourceFailed(before.error, "settle");
          continue;
        }
        const { published, rejected, retried, failure } = classify(batch.events, outcomes);
        if (published.length > 0) failpoint("relay-after-publish");
        recording = this.record(batch, published, rejected);
        if (failure !== null) {
          // Keys of this batch are blocked behind events to retry: the next batch waits too.
          await this.giveBack(ahead);
          ahead = null;
          const outcome = await recording;
          if (!outcome.ok) {
            await this.sourceFailed(outcome.error, "settle");
            continue;
          }
          this.failures++;
          this.consecutiveFailures++;
          this.lastError = failure.message;
          const delayMs = this.backoffMs();
          this.emit("relay:retry", { error: failure, pending: retried, failures: this.consecutiveFailures, delayMs });
          await this.pause(delayMs, false);
        } else {
          this.consecutiveFailures = 0;
        }
      }
    } finally {
      // Stopping: the round in progress is recorded; a batch claimed ahead goes back untouched.
      await this.giveBack(ahead);
      await recording;
    }
  }

  /** Claims a batch; a NOTIFY arriving from here on wakes the next idle pause. */
  private async claim(): Promise<Claimed> {
    this.woken = false;
    try {
      return { batch: await this.source.claim(this.batchSize) };
    } catch (error) {
      return { error: toError(error) };
    }
  }

  /** Hands a batch claimed ahead back to the source unpublished. */
  private async giveBack(ahead: Promise<Claimed> | null): Promise<void> {
    if (ahead === null) return;
    const claimed = await ahead;
    if ("batch" in claimed && claimed.batch !== null) await claimed.batch.abandon().catch(() => undefined);
  }

  /** The target's outcome for each event; a throw or a wrong count means retry them all. */
  private async publishToTarget(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
    try {
      const outcomes = await this.target.publish(events);
      if (outcomes.length !== events.length) {
        throw new Error(`target ${this.target.description} answered ${outcomes.length} outcomes for ${events.length} events`);
      }
      return outcomes;
    } catch (error) {
      const failure = toError(error);
      return events.map(() => ({ status: "retry", error: failure }));
    }
  }

  /** Records a round's outcome with the source, then counts and reports it. Never rejects. */
  private async record(batch: ClaimedBatch, published: readonly OutboxEvent[], rejected: readonly RejectedEvent[]): Promise<RecordOutcome> {
    try {
      if (published.length === 0 && rejected.length === 0) await batch.abandon();
      else await batch.settle(published, rejected, this.target.description);
    } catch (error) {
      // The target has these events but the outbox still holds them: they will be published
      // again (a redelivery the consumer dedups by outbox id), never lost.
      await batch.abandon().catch(() => undefined);
      return { ok: false, error: toError(error) };
    }
    if (published.length > 0) {
      this.published += published.length;
      this.recent.push({ at: Date.now(), count: published.length });
      this.emit("relay:published", { count: published.length, ids: published.map((e) => e.id) });
    }
    for (const r of rejected) {
      this.rejected++;
      this.logger.warn(
        { id: r.event.id, topic: r.event.topic, target: this.target.description, error: r.error.message },
        "outbox event set aside: the target refused it for good",
      );
      this.emit("relay:rejected", r);
    }
    return { ok: true };
  }

  private async sourceFailed(error: Error, during: "claim" | "settle"): Promise<void> {
    this.failures++;
    this.consecutiveFailures++;
    this.lastError = error.message;
    const delayMs = this.backoffMs();
    this.logger.error({ source: this.source.description, during, error: error.message, delayMs }, "outbox relay: the source failed; retrying");
    this.emit("relay:error", { error, during, delayMs });
    await this.pause(delayMs, false);
  }
}

/**
 * Splits a batch's outcomes. Once an event of a key is to be retried, every later event of that
 * key in the batch is retried too (even if the target took it), so a key never gets ahead of
 * an event it must follow.
 */
export function classify(
  events: readonly OutboxEvent[],
  outcomes: readonly PublishOutcome[],
): { published: OutboxEvent[]; rejected: RejectedEvent[]; retried: number; failure: Error | null } {
  const published: OutboxEvent[] = [];
  const rejected: RejectedEvent[] = [];
  const blockedKeys = new Set<string>();
  let retried = 0;
  let failure: Error | null = null;
  events.forEach((event, i) => {
    const outcome = outcomes[i]!;
    const blocked = event.key !== null && blockedKeys.has(event.key);
    if (outcome.status === "retry" || blocked) {
      retried++;
      if (outcome.status === "retry") failure ??= outcome.error;
      if (event.key !== null) blockedKeys.add(event.key);
    } else if (outcome.status === "rejected") {
      rejected.push({ event, error: outcome.error });
    } else {
      published.push(event);
    }
  });
  return { published, rejected, retried, failure };
}

function checkInt(field: string, value: number, min: number, max: number): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new InvalidInputError(`${field} must be an integer from ${min} to ${max}; got ${shown(value)}`);
  }
  return value;
}
