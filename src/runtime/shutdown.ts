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

  const onSignal = (signal: NodeJS.Signals) => {
    received++;
    if (received === 1) {
      options.logger.warn({ signal }, `received ${signal}: no more claims; draining in-flight jobs (send it again to stop at once)`);
      void Promise.all(closeables.map((c) => c.close({ reason: signal })))
        .then(async (results) => {
          const released = results.flatMap((r) => r.releasedJobIds);
          const drained = results.every((r) => r.drained);
          if (drained) options.logger.info({ signal }, "all in-flight jobs finished; exiting 0");
          else options.logger.warn({ signal, releasedJobIds: released }, `shutdown released ${released.length} unfinished job(s); exiting 1`);
          await options.afterClose?.();
          exit(drained ? 0 : 1);
        })
        .catch((error: unknown) => {
          options.logger.error({ signal, err: String(error) }, "shutdown failed; exiting 1");
          exit(1);
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
