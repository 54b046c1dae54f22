/**
 * The process-level shutdown policy (installShutdownSignals): a close that never finishes (a store
 * that stopped answering holds a claim, a release or its own close for ever) no longer holds the
 * process past its deadline.
 */
import { describe, expect, it } from "vitest";
import { installShutdownSignals, SHUTDOWN_STORE_WAIT_MS, shutdownDeadlineMs } from "../../src/runtime/shutdown.js";
import { silentLogger, type Logger } from "../../src/index.js";

function recordingLogger(): { logger: Logger; errors: string[] } {
  const errors: string[] = [];
  return { logger: { ...silentLogger, error: (_fields: object, message: string) => void errors.push(message) }, errors };
}

/** Sends `signal` to this process and waits until `exited` has a code or `ms` passed. */
async function signalAndWait(signal: NodeJS.Signals, exited: number[], ms: number): Promise<number> {
  const t0 = Date.now();
  process.kill(process.pid, signal);
  while (exited.length === 0 && Date.now() - t0 < ms) await new Promise((resolve) => setTimeout(resolve, 10));
  return Date.now() - t0;
}

describe("installShutdownSignals", () => {
  it("exits 1 at its deadline when closing never finishes, saying why", async () => {
    const { logger, errors } = recordingLogger();
    const exited: number[] = [];
    const remove = installShutdownSignals([{ close: () => new Promise(() => undefined) }], {
      logger,
      exit: (code) => exited.push(code),
      deadlineMs: 300,
      signals: ["SIGUSR2"],
    });
    try {
      const took = await signalAndWait("SIGUSR2", exited, 5_000);
      expect(exited).toEqual([1]);
      expect(took).toBeGreaterThanOrEqual(290);
      expect(errors).toEqual([
        "shutdown did not finish within 300 ms (the store is not answering); exiting 1: the jobs still held run again once their leases expire",
      ]);
    } finally {
      remove();
    }
  });

  it("exits once, with the close's code, when closing finishes before the deadline", async () => {
    const { logger, errors } = recordingLogger();
    const exited: number[] = [];
    const remove = installShutdownSignals([{ close: async () => ({ drained: true, releasedJobIds: [] }) }], {
      logger,
      exit: (code) => exited.push(code),
      deadlineMs: 200,
      signals: ["SIGUSR2"],
    });
    try {
      await signalAndWait("SIGUSR2", exited, 5_000);
      await new Promise((resolve) => setTimeout(resolve, 400));
      expect(exited).toEqual([0]);
      expect(errors).toEqual([]);
    } finally {
      remove();
    }
  });

  it("the usual deadline is the grace period and SHUTDOWN_STORE_WAIT_MS", () => {
    expect(shutdownDeadlineMs(25_000)).toBe(25_000 + SHUTDOWN_STORE_WAIT_MS);
  });
});
