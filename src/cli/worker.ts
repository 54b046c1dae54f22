import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import type { Backend } from "../backend/contract.js";
import { isStoreTooNew } from "../backend/migration-files.js";
import { MAX_TIMER_MS } from "../core/clock.js";
import { StoreUnavailableError } from "../core/errors.js";
import { consoleLogger } from "../core/logger.js";
import { installShutdownSignals, shutdownDeadlineMs } from "../runtime/shutdown.js";
import { MIN_WATCHDOG_STALL_MS, Worker, type Handlers } from "../runtime/worker.js";
import { dbUrl, intOption, listOption, openStore, parse, requiredString, UsageError } from "./args.js";
import { queuesForHandlers } from "./handler-queues.js";
import { createMetrics, loadTracing, METRICS_HELP, METRICS_OPTIONS, metricsSettings } from "./metrics.js";

/** How often a worker waiting at start-up for a store that gives no answer says so, ms. */
const STORE_SILENCE_WARN_MS = 5_000;

export const help = `conveyor worker --db URL [--queue NAME[,NAME]] --handlers MODULE [options]

Runs jobs until SIGTERM/SIGINT. MODULE's default export maps job names to
async (job, ctx) => result (job.id, job.name, job.data, job.attempt; ctx.signal, ctx.progress(),
ctx.log()). Without --queue, the queues come from MODULE's named export \`queues\`
(export const queues = ["email"]); job names say nothing about queues. With --sandbox,
--queue is required (the module is loaded only in the child processes).

  --concurrency N        jobs at once (default 10)
  --prefetch N           jobs claimed ahead of free slots and held locally, so slots refill
                         without a round trip; for many short jobs (default 0)
  --lease-ms N           lease length in ms (default 30000)
  --max-result-bytes N   largest result a handler may return, bytes of JSON (default 1048576)
  --shutdown-grace-ms N  drain time on SIGTERM before releasing jobs, ms (default 25000)
  --poll-interval-ms N   idle poll period, ms (default 1000)
  --rescue-interval-ms N how often this worker looks for expired leases, ms (default 5000)
  --sandbox              run each handler in a child process, killed at its timeout and
                         replaced (survives handlers that block or call process.exit)
  --watchdog-ms N        kill this process when its event loop is blocked longer than N ms,
                         so it gets restarted (default: the lease length, at least 200;
                         0 turns it off; otherwise from 200)
  --no-scheduler         do not fire cron schedules from this worker (fired by default; safe in
                         every worker at once: each tick runs exactly once)
  --verbose              log every job event
${METRICS_HELP}

A store that is down at startup is waited for (retried with backoff up to 30 s, logged);
a wrong URL, password or schema version fails at once.

Exit code: 0 when shutdown drained every job (or SIGTERM came before it started), 1 when
unfinished jobs were released.`;

export async function loadHandlers(modulePath: string): Promise<Handlers> {
  const path = resolve(modulePath);
  if (!existsSync(path)) throw new UsageError(`--handlers: no such file ${path}`);
  let mod: { default?: unknown };
  try {
    mod = (await import(pathToFileURL(path).href)) as { default?: unknown };
  } catch (error) {
    if (/\.[cm]?ts$/.test(path) && /Unknown file extension/.test(String(error))) {
      // A TypeScript handlers file under plain node: load tsx's hook if the project has it.
      const api = (await import("tsx/esm/api").catch(() => null)) as { register?: () => void } | null;
      if (!api?.register) throw new UsageError(`--handlers ${modulePath} is TypeScript: compile it, or install tsx so conveyor can load it`);
      api.register();
      mod = (await import(pathToFileURL(path).href)) as { default?: unknown };
    } else {
      throw error;
    }
  }
  const handlers = mod.default;
  if (!handlers || typeof handlers !== "object") {
    throw new UsageError(`--handlers ${modulePath} must have a default export mapping job names to async (job, ctx) => result`);
  }
  return handlers as Handlers;
}

/**
 * `--watchdog-ms`: 0 (off) or from MIN_WATCHDOG_STALL_MS; by default the lease length, and at
 * least that minimum when the lease is shorter (a test fleet's 150 ms lease still starts).
 */
function watchdogOption(value: unknown, leaseMs: number): number {
  const given = intOption("watchdog-ms", value, 0);
  if (given === undefined) return Math.max(leaseMs, MIN_WATCHDOG_STALL_MS);
  if ((given !== 0 && given < MIN_WATCHDOG_STALL_MS) || given > MAX_TIMER_MS) {
    throw new UsageError(`--watchdog-ms must be 0 (off) or from ${MIN_WATCHDOG_STALL_MS} (two stamps of the watched loop) to ${MAX_TIMER_MS}; got ${given}`);
  }
  return given;
}

export async function run(argv: string[]): Promise<number> {
  const { values } = parse(argv, {
    queue: { type: "string" },
    handlers: { type: "string" },
    concurrency: { type: "string" },
    prefetch: { type: "string" },
    "lease-ms": { type: "string" },
    "max-result-bytes": { type: "string" },
    "shutdown-grace-ms": { type: "string" },
    "poll-interval-ms": { type: "string" },
    "rescue-interval-ms": { type: "string" },
    sandbox: { type: "boolean", default: false },
    "no-scheduler": { type: "boolean", default: false },
    "watchdog-ms": { type: "string" },
    verbose: { type: "boolean", default: false },
    ...METRICS_OPTIONS,
  });
  if (values.help) {
    console.log(help);
    return 0;
  }
  const url = dbUrl(values.db);
  if (values.sandbox && values.queue === undefined) {
    throw new UsageError(
      "which queues? with --sandbox the handlers module is loaded only in the child processes, so its `queues` export cannot be read here: pass --queue NAME[,NAME]",
    );
  }
  const handlersPath = requiredString("handlers", values.handlers);
  const logger = consoleLogger({ verbose: values.verbose === true });
  const leaseMs = intOption("lease-ms", values["lease-ms"], 1) ?? 30_000;
  if (leaseMs > MAX_TIMER_MS)
    throw new UsageError(`--lease-ms must be at most ${MAX_TIMER_MS} (about 24.8 days, the longest timer Node.js runs); got ${leaseMs}`);
  const watchdogMs = watchdogOption(values["watchdog-ms"], leaseMs);
  const rescueIntervalMs = intOption("rescue-interval-ms", values["rescue-interval-ms"], 1);
  // Every option is checked before the store is waited for: a usage mistake fails at once.
  const concurrency = intOption("concurrency", values.concurrency, 1);
  const prefetch = intOption("prefetch", values.prefetch, 0);
  const shutdownGraceMs = intOption("shutdown-grace-ms", values["shutdown-grace-ms"], 0);
  const maxResultBytes = intOption("max-result-bytes", values["max-result-bytes"], 1);
  const pollIntervalMs = intOption("poll-interval-ms", values["poll-interval-ms"], 1);
  const metricsFlags = metricsSettings(values);
  // Until the worker exists nothing is claimed, so a stop request then simply ends the process
  // with 0 (rather than letting the signal kill it, or waiting out a store that is down).
  let stopSignal: NodeJS.Signals | null = null;
  let stopRequested: () => void = () => undefined;
  const stopped = new Promise<null>((resolve) => (stopRequested = () => resolve(null)));
  const onEarlySignal = (signal: NodeJS.Signals) => {
    if (stopSignal !== null) {
      // A second signal while something still holds start-up (a handlers module that never
      // finishes loading): nothing was claimed, so leave now.
      process.exit(0);
    }
    stopSignal = signal;
    stopRequested();
  };
  process.on("SIGTERM", onEarlySignal);
  process.on("SIGINT", onEarlySignal);
  const removeEarlySignals = () => {
    process.off("SIGTERM", onEarlySignal);
    process.off("SIGINT", onEarlySignal);
  };
  let handlers: Handlers | undefined;
  let queues: string[] = [];
  let backend: Backend | null = null;
  try {
    // In a sandbox the module is loaded only by the child processes.
    handlers = values.sandbox ? undefined : await loadHandlers(handlersPath);
    // --queue, else the module's `queues` export (the rule `serve --handlers` follows).
    queues = values.sandbox ? listOption("queue", values.queue) : await queuesForHandlers(values.queue, handlersPath);
    // A store that is down (being restarted, not up yet) is waited for, not a crash: exiting
    // would only make the orchestrator restart us into the same outage. Anything else (a bad
    // URL, wrong password, a schema newer than this code) fails at once.
    for (let attempt = 0; backend === null && stopSignal === null; attempt++) {
      try {
        // A store that never answers (a Cluster or Sentinel URL whose servers are all down keeps
        // ioredis connecting for ever) must not hold a SIGTERM: stop waiting for it then.
        const opening = openStore(url);
        // Nor wait in silence: such a store gives no error to log, only no answer.
        const silence = setInterval(
          () => logger.warn({}, "the store (--db) has not answered yet; waiting for it (check that its servers are running and the URL)"),
          STORE_SILENCE_WARN_MS,
        );
        try {
          backend = await Promise.race([opening, stopped]);
        } finally {
          clearInterval(silence);
        }
        if (backend === null) void opening.then((late) => late.close()).catch(() => undefined);
      } catch (error) {
        if (!isStoreUnreachable(error)) throw error;
        if (stopSignal !== null) break;
        const delayMs = Math.round(Math.min(30_000, 500 * 2 ** attempt) * (0.5 + Math.random() / 2));
        logger.warn({ err: error instanceof Error ? error.message : String(error), retryInMs: delayMs }, "the store is unreachable; retrying");
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([new Promise<void>((resolveWait) => (timer = setTimeout(resolveWait, delayMs))), stopped]);
        clearTimeout(timer);
      }
    }
  } catch (error) {
    removeEarlySignals();
    throw error;
  }
  if (stopSignal !== null || backend === null) {
    removeEarlySignals();
    await backend?.close();
    logger.warn({ signal: stopSignal }, "stopped before the worker started; nothing was claimed; exiting 0");
    return 0;
  }
  let observed: Awaited<ReturnType<typeof createMetrics>> | null = null;
  let tracing: Awaited<ReturnType<typeof loadTracing>> = null;
  try {
    observed = metricsFlags ? await createMetrics(metricsFlags, backend) : null;
    tracing = await loadTracing();
  } catch (error) {
    removeEarlySignals();
    await backend.close();
    throw error;
  }
  const worker = new Worker({
    backend,
    queues,
    ...(handlers ? { handlers } : { sandbox: { module: handlersPath } }),
    ...(watchdogMs > 0 ? { watchdog: { stallMs: watchdogMs } } : {}),
    concurrency,
    prefetch,
    leaseMs,
    maxResultBytes,
    shutdownGraceMs,
    pollIntervalMs,
    ...(rescueIntervalMs !== undefined ? { maintenance: { rescueIntervalMs } } : {}),
    scheduler: values["no-scheduler"] !== true,
    logger,
    autostart: false,
    ...(tracing ? { telemetry: tracing } : {}),
  });
  if (values.verbose) {
    worker.on("job:completed", ({ job, durationMs }) => logger.info({ jobId: job.id, name: job.name, attempt: job.attempt, durationMs }, "completed"));
    worker.on("job:retry-scheduled", ({ job, error, delayMs }) =>
      logger.info({ jobId: job.id, name: job.name, attempt: job.attempt, delayMs, error: error.message }, "retry scheduled"),
    );
  }
  worker.on("job:dead", ({ job, error, reason }) =>
    logger.warn({ jobId: job.id, name: job.name, attempt: job.attempt, reason, error: error.message }, "job dead"),
  );
  worker.on("job:settle-refused", ({ job, operation }) =>
    logger.warn(
      { jobId: job.id, name: job.name, attempt: job.attempt, token: job.lease?.token ?? null, operation },
      "settle refused: the lease is stale (fencing token); nothing was applied",
    ),
  );
  worker.on("job:stalled-rescued", ({ rescued }) => logger.warn({ ...rescued }, "rescued a job whose lease expired"));

  observed?.metrics.observe(worker);
  let metricsServer: Awaited<ReturnType<NonNullable<typeof observed>["listen"]>> | null = null;
  try {
    metricsServer = observed ? await observed.listen() : null;
  } catch (error) {
    removeEarlySignals();
    await worker.close({ force: true });
    await backend.close();
    throw new UsageError(`--metrics-port ${metricsFlags?.port}: cannot listen: ${(error as Error).message}`);
  }
  const store = backend;
  return new Promise<number>((resolveExit) => {
    const afterClose = async () => {
      await metricsServer?.close();
      await store.close();
    };
    const removeSignals = installShutdownSignals([worker], { logger, afterClose, exit: resolveExit, deadlineMs: shutdownDeadlineMs(worker.shutdownGraceMs) });
    // The worker stops by itself when another process upgrades the store past this code while it
    // runs: exit 1 then, so the orchestrator restarts it (into a clear refusal until upgraded).
    let storeTooNew = false;
    worker.on("worker:error", ({ error }) => {
      storeTooNew ||= isStoreTooNew(error);
    });
    worker.on("worker:closed", () => {
      if (!storeTooNew) return;
      removeSignals();
      void afterClose().finally(() => resolveExit(1));
    });
    // Synchronous since the check above: no signal can have arrived in between.
    removeEarlySignals();
    worker.run();
    logger.info({ workerId: worker.id, queues, jobs: worker.jobNames, db: backend.description }, "worker started");
    process.stderr.write(`conveyor worker ${worker.id} on ${backend.description}, queues ${queues.join(",")}, jobs ${worker.jobNames.join(",")}\n`);
    if (metricsServer) process.stderr.write(`conveyor worker metrics on http://${metricsServer.address.address}:${metricsServer.address.port}/metrics\n`);
  });
}

/** The store is down or busy (the backends' typed error, anywhere in the cause chain): wait for it. */
export function isStoreUnreachable(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 5; depth++) {
    if (e instanceof StoreUnavailableError) return true;
    e = e.cause;
  }
  return false;
}
