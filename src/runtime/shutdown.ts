import type { Logger } from "../core/logger.js";

/** Anything that shuts down gracefully: a Worker, or a group of them. */
export interface Closeable {
  close(options?: { force?: boolean; reason?: string }): Promise<{ drained: boolean; releasedJobIds: string[] }>;
}

export interface SignalOptions {
  logger: Logger;
  /** Called with the exit code once everything closed. Default `process.exit`. */
  exit?: (code: number) => void;
  /** Runs after the workers closed and before exit (close the backend, flush logs). */
  afterClose?: () => Promise<void>;
  /** Signals to handle. Default SIGTERM and SIGINT. */
  signals?: NodeJS.Signals[];
  /**
   * How long after the first signal the process exits even though closing has not finished, ms
   * (exit code 1): a store that stopped answering (a claim, a release or the backend's close that
   * never returns) held it for ever, past any orchestrator's patience. The jobs it still held run
   * again once their leases expire. Default: no deadline. shutdownDeadlineMs gives the usual one.
   */
  deadlineMs?: number;
}

/** WorkerOptions.shutdownGraceMs' default, ms. */
export const DEFAULT_SHUTDOWN_GRACE_MS = 25_000;

/**
 * What closing may take beyond the workers' shutdown grace period, ms: their unfinished jobs'
 * releases, the store's and the listeners' close.
 */
export const SHUTDOWN_STORE_WAIT_MS = 10_000;

/** The deadline of a process whose workers drain for `shutdownGraceMs`: that, plus SHUTDOWN_STORE_WAIT_MS. */
export function shutdownDeadlineMs(shutdownGraceMs: number): number {
  return shutdownGraceMs + SHUTDOWN_STORE_WAIT_MS;
}

/**
 * Process-level shutdown policy, kept out of the Worker so a library user decides whether
 * signals are theirs:
 * - the first SIGTERM/SIGINT stops claiming and drains within each worker's grace period;
 * - a second one aborts and releases in-flight jobs at once;
 * - exit 0 when every worker drained, 1 when jobs had to be released (their ids are logged).
 * Returns a function that removes the handlers.
 */
export function installShutdownSignals(closeables: readonly Closeable[], options: SignalOptions): () => void {
  const signals = options.signals ?? ["SIGTERM", "SIGINT"];
  const exit = options.exit ?? ((code: number) => process.exit(code));
  let received = 0;
  let deadline: NodeJS.Timeout | undefined;
  let exited = false;
  const exitOnce = (code: number) => {
    if (exited) return;
    exited = true;
    clearTimeout(deadline);
    exit(code);
  };

  const onSignal = (signal: NodeJS.Signals) => {
    received++;
    if (received === 1) {
      options.logger.warn({ signal }, `received ${signal}: no more claims; draining in-flight jobs (send it again to stop at once)`);
      if (options.deadlineMs !== undefined) {
        const deadlineMs = options.deadlineMs;
        deadline = setTimeout(() => {
          options.logger.error(
            { signal, deadlineMs },
            `shutdown did not finish within ${deadlineMs} ms (the store is not answering); exiting 1: the jobs still held run again once their leases expire`,
          );
          exitOnce(1);
        }, deadlineMs);
      }
      void Promise.all(closeables.map((c) => c.close({ reason: signal })))
        .then(async (results) => {
          const released = results.flatMap((r) => r.releasedJobIds);
          const drained = results.every((r) => r.drained);
          if (drained) options.logger.info({ signal }, "all in-flight jobs finished; exiting 0");
          else options.logger.warn({ signal, releasedJobIds: released }, `shutdown released ${released.length} unfinished job(s); exiting 1`);
          await options.afterClose?.();
          exitOnce(drained ? 0 : 1);
        })
        .catch((error: unknown) => {
          options.logger.error({ signal, err: String(error) }, "shutdown failed; exiting 1");
          exitOnce(1);
        });
    } else {
      options.logger.warn({ signal }, `received ${signal} again: aborting and releasing in-flight jobs now`);
      for (const c of closeables) void c.close({ force: true, reason: `second ${signal}` });
    }
  };
  for (const s of signals) process.on(s, onSignal);
  return () => {
    for (const s of signals) process.off(s, onSignal);
  };
}
