/**
 * The LISTEN side of wake-ups: one connection per backend instance, held for as long as anyone
 * subscribes, re-established with jittered exponential backoff whenever it is lost (server
 * restart, pg_terminate_backend, network). It never throws and never crashes the process: a lost
 * connection is logged, and workers keep finding jobs by polling until it is back.
 *
 * NOTIFY is fire-and-forget: notifications sent while no connection listens are gone. So every
 * time LISTEN becomes active — the first time included, since a subscriber may have missed the
 * jobs enqueued while it was connecting — `onListening` lets the backend look for work that is
 * already there.
 */
import { toError } from "../../core/checks.js";
import type { Notification, Pool, PoolClient } from "pg";
import pg from "pg";
import type { Logger } from "../../core/logger.js";

export interface NotificationListenerOptions {
  /** Where the connection comes from; it occupies one of the pool's connections while held. */
  pool: Pool;
  /** The channel to LISTEN on. */
  channel: string;
  /** Called with each notification's payload (a queue name). */
  onNotify: (payload: string) => void;
  /** Called each time LISTEN is active on a new connection. */
  onListening: () => void;
  logger: Logger;
  /** For log lines: which backend this is. */
  description: string;
  /** First reconnect delay in ms, before jitter. Default 100. */
  minReconnectDelayMs?: number;
  /** Largest reconnect delay in ms, before jitter. Default 10 000. */
  maxReconnectDelayMs?: number;
}

/** One LISTEN connection with its own reconnect loop. */
export class NotificationListener {
  private readonly options: NotificationListenerOptions;
  private readonly minDelayMs: number;
  private readonly maxDelayMs: number;
  /** Bumped by every start and stop; a loop runs only while the generation it started in lasts. */
  private generation = 0;
  private running = false;
  private loop: Promise<void> = Promise.resolve();
  /** Ends the current session early (stop), or null when none is open. */
  private endSession: (() => void) | null = null;
  /** Cuts the current reconnect pause short (stop), or null when not pausing. */
  private endPause: (() => void) | null = null;
  private active = false;
  /** Failed sessions since LISTEN last worked, for the log line when it works again. */
  private failures = 0;

  constructor(options: NotificationListenerOptions) {
    this.options = options;
    this.minDelayMs = options.minReconnectDelayMs ?? 100;
    this.maxDelayMs = options.maxReconnectDelayMs ?? 10_000;
  }

  /** True while LISTEN is active on a live connection. */
  get listening(): boolean {
    return this.active;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    const generation = ++this.generation;
    // A restart right after a stop waits for the old loop to hand its connection back.
    this.loop = this.loop.then(() => this.run(generation));
  }

  /** Stops listening and returns the connection to the pool. */
  async stop(): Promise<void> {
    this.running = false;
    this.generation++;
    this.endSession?.();
    this.endPause?.();
    await this.loop;
  }

  private async run(generation: number): Promise<void> {
    const current = () => this.generation === generation;
    this.failures = 0;
    while (current()) {
      const outcome = await this.session(current);
      if (!current()) return;
      if (outcome !== "ended-cleanly") this.failures++;
      // Between half and all of an exponential ceiling: a fleet that lost the database together
      // does not reconnect in lock-step, and the first retry still comes quickly.
      const ceilingMs = Math.min(this.maxDelayMs, this.minDelayMs * 2 ** Math.max(0, this.failures - 1));
      const delayMs = Math.round(ceilingMs * (0.5 + Math.random() / 2));
      if (outcome !== "ended-cleanly") {
        this.options.logger.warn(
          { backend: this.options.description, error: outcome.message, retryInMs: delayMs, failures: this.failures },
          "PostgreSQL LISTEN connection unavailable; reconnecting (workers poll meanwhile)",
        );
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, delayMs);
        // Reconnect attempts alone never keep a process alive.
        timer.unref();
        this.endPause = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.endPause = null;
    }
  }

  /**
   * Holds one connection until it is lost or the listener stops. Resolves with the error that
   * ended it, or "ended-cleanly" when stopped.
   */
  private async session(current: () => boolean): Promise<Error | "ended-cleanly"> {
    let client: PoolClient;
    try {
      client = await this.options.pool.connect();
    } catch (error) {
      return toError(error);
    }
    if (!current()) {
      // Stopped while waiting for the pool.
      client.release();
      return "ended-cleanly";
    }
    return new Promise<Error | "ended-cleanly">((resolve) => {
      let over = false;
      const finish = (error: Error | null) => {
        if (over) return;
        over = true;
        this.active = false;
        this.endSession = null;
        client.off("notification", onNotification);
        client.off("error", onError);
        client.off("end", onEnd);
        // A dying connection can report more than one error; none of them may crash the process.
        client.on("error", ignore);
        if (error !== null) {
          client.release(error); // discarded by the pool, not reused
          resolve(error);
          return;
        }
        // Stopped: stop listening before the connection goes back to the pool for other work.
        client.query("UNLISTEN *").then(
          () => {
            client.off("error", ignore);
            client.release();
            resolve("ended-cleanly");
          },
          (unlistenError: unknown) => {
            client.release(toError(unlistenError));
            resolve("ended-cleanly");
          },
        );
      };
      const onNotification = (message: Notification) => {
        if (message.channel !== this.options.channel || !message.payload) return;
        try {
          this.options.onNotify(message.payload);
        } catch {
          // A subscriber's bug must not take the connection down; the backend reports it.
        }
      };
      const onError = (error: Error) => finish(error);
      const onEnd = () => finish(new Error("the LISTEN connection ended"));
      client.on("notification", onNotification);
      client.on("error", onError);
      client.on("end", onEnd);
      this.endSession = () => finish(null);

      client.query(`LISTEN ${pg.escapeIdentifier(this.options.channel)}`).then(
        () => {
          if (over) return;
          this.active = true;
          if (this.failures > 0) {
            this.options.logger.info({ backend: this.options.description, failures: this.failures }, "PostgreSQL LISTEN connection re-established");
            this.failures = 0;
          }
          this.options.onListening();
        },
        (error: unknown) => finish(toError(error)),
      );
    });
  }
}

function ignore(): void {}
