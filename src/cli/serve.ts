import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import { InvalidInputError } from "../core/errors.js";
import { consoleLogger, type Logger } from "../core/logger.js";
import { DEFAULT_SHUTDOWN_GRACE_MS, installShutdownSignals, shutdownDeadlineMs, type Closeable } from "../runtime/shutdown.js";
import { Worker } from "../runtime/worker.js";
import { Scheduler } from "../maintenance/scheduler.js";
import { dbUrl, intOption, listOption, openStore, parse, UsageError } from "./args.js";
import { queuesForHandlers } from "./handler-queues.js";
import { createMetrics, loadTracing, METRICS_HELP, METRICS_OPTIONS, metricsSettings } from "./metrics.js";
import type { MetricsServer } from "../observability/http.js";
import { loadHandlers } from "./worker.js";
import { combineTelemetry } from "../core/telemetry.js";
import { migrateOutbox, openDeadLetters, openSource, outboxLocation } from "../outbox/open.js";

export const help = `conveyor serve --db URL [options]

Runs the HTTP API (202 Accepted enqueue, status, Server-Sent Events, cancel, queue operations,
dead letters; OpenAPI at <base-path>/openapi.json). With --handlers it also runs a worker in the
same process, for small deployments.

  --port N               port to listen on (default 3000)
  --host HOST            interface to listen on (default 127.0.0.1; 0.0.0.0 for every interface)
  --base-path PATH       path prefix of the API (default /v1)
  --api-key SPEC         an accepted key, ID:SCOPE[,SCOPE]:SHA256HEX (repeatable); scopes are
                         enqueue, read, admin. Also read from CONVEYOR_API_KEYS (SPEC;SPEC).
                         Only the SHA-256 of a key is configured, never the key itself.
  --new-key ID:SCOPES    print a new random key and its --api-key SPEC, then exit
  --no-auth              run without API keys (every request may do everything): only behind
                         your own authentication or on a loopback interface
  --handlers MODULE      also run jobs: MODULE's default export maps job names to handlers
  --queue NAME[,NAME]    queues the in-process worker takes from (with --handlers; default: the
                         module's named export \`queues\`, e.g. export const queues = ["email"])
  --concurrency N        jobs at once in the in-process worker (default 10)
  --cors ORIGIN[,ORIGIN] let browsers on these origins call the API ("*" for any)
  --max-body-bytes N     largest enqueue body, bytes (default 262144)
  --request-timeout-ms N a client still sending its request (headers and body) after this is
                         cut off with 408 (default 30000)
  --connection-timeout-ms N
                         a connection idle this long is closed (default 120000; more than the
                         15000 of the event-stream heartbeat)
  --webhooks FILE        webhook configuration, JSON: { "subscriptions": [{ "id", "url",
                         "queues"?, "names"?, "events"? }], "allow": ["host", "10.0.0.0/8"],
                         "allowHttp": false }. Signing secrets come from CONVEYOR_WEBHOOK_SECRETS
                         (whsec_..., comma-separated, newest first); setting it enables
                         callbackUrl and runs deliveries in this process.
  --stream-token-secret-env NAME
                         environment variable holding the secret that signs event-stream tokens
                         (default: random per process; set one when several instances serve
                         behind one load balancer)
  --id-secret-env NAME   environment variable holding the secret (at least 32 bytes, the same on
                         every instance) that keys the ids derived from Idempotency-Key headers
                         (idem_...) and webhook deliveries (whk_...) (default: idem_ ids are
                         keyed from the requesting API key's configured sha256, so rotating a
                         key changes its ids; whk_ ids are a plain SHA-256)
  --outbox               also serve the admin routes of the transactional outbox of --db
                         (<base-path>/outbox/dead: list, show, replay, delete the events a
                         relay's target refused for good); PostgreSQL or SQLite only
                         (default: off)
  --outbox-db URL        serve the outbox of this database instead of --db's (postgres://…
                         [?schema=NAME] or sqlite:PATH); implies --outbox
  --no-scheduler         do not fire cron schedules from this process (fired by default, like
                         every worker: safe in any number of processes, each tick runs once)
  --no-dashboard         do not serve the web dashboard (served by default at /ui; log in with
                         an API key: read keys see, admin keys also act; its session cookies
                         are signed with CONVEYOR_DASHBOARD_SECRET, >= 32 bytes, default random
                         per process: set it so logins survive restarts and work on every instance)
  --log-level LEVEL      fatal, error, warn, info, debug, silent (default info): one pino logger
                         (JSON lines on stdout) for the server, the worker and webhooks
${METRICS_HELP}

SIGTERM/SIGINT: stop accepting requests, close event streams, drain the in-process worker (the
metrics listener keeps answering until then), exit 0 (or 1 when jobs had to be released).`;

/** Builds the `--api-key` line for a freshly generated key. */
async function printNewKey(spec: string): Promise<number> {
  const { generateApiKey, hashApiKey } = await import("../http/auth.js");
  const [id, scopes] = spec.split(":");
  if (!id || !scopes) throw new UsageError("--new-key takes ID:SCOPES, e.g. web:enqueue,read");
  const key = generateApiKey();
  console.log(`key (give it to the client; it is not stored anywhere): ${key}`);
  console.log(`server flag:  --api-key ${id}:${scopes}:${hashApiKey(key)}`);
  return 0;
}

interface WebhookFile {
  subscriptions?: unknown;
  allow?: unknown;
  allowHttp?: unknown;
}

export async function run(argv: string[]): Promise<number> {
  const { values } = parse(argv, {
    port: { type: "string" },
    host: { type: "string" },
    "base-path": { type: "string" },
    "api-key": { type: "string", multiple: true },
    "new-key": { type: "string" },
    "no-auth": { type: "boolean", default: false },
    "no-scheduler": { type: "boolean", default: false },
    handlers: { type: "string" },
    queue: { type: "string" },
    concurrency: { type: "string" },
    cors: { type: "string" },
    "max-body-bytes": { type: "string" },
    "request-timeout-ms": { type: "string" },
    "connection-timeout-ms": { type: "string" },
    webhooks: { type: "string" },
    "stream-token-secret-env": { type: "string" },
    "id-secret-env": { type: "string" },
    "log-level": { type: "string" },
    "no-dashboard": { type: "boolean", default: false },
    outbox: { type: "boolean", default: false },
    "outbox-db": { type: "string" },
    ...METRICS_OPTIONS,
  });
  if (values.help) {
    console.log(help);
    return 0;
  }
  if (typeof values["new-key"] === "string") return printNewKey(values["new-key"]);

  // fastify is an optional peer dependency: load the HTTP layer only now.
  let http: typeof import("../http/index.js");
  try {
    http = await import("../http/index.js");
  } catch (error) {
    if ((error as { code?: unknown }).code === "ERR_MODULE_NOT_FOUND" && String(error).includes("fastify")) {
      throw new UsageError("conveyor serve needs fastify@5, an optional peer dependency: npm install fastify@5");
    }
    throw error;
  }

  const url = dbUrl(values.db);
  const port = intOption("port", values.port, 0) ?? 3000;
  const host = typeof values.host === "string" ? values.host : "127.0.0.1";
  const specs = [
    ...((values["api-key"] as string[] | undefined) ?? []),
    ...(process.env.CONVEYOR_API_KEYS ?? "")
      .split(";")
      .map((s) => s.trim())
      .filter(Boolean),
  ];
  const noAuth = values["no-auth"] === true;
  if (specs.length === 0 && !noAuth) {
    throw new UsageError(
      "no API keys: pass --api-key ID:SCOPES:SHA256 (conveyor serve --new-key web:enqueue,read makes one), or --no-auth to run without authentication",
    );
  }
  if (specs.length > 0 && noAuth) throw new UsageError("--no-auth and --api-key contradict each other; pick one");
  let apiKeys: ReturnType<typeof http.parseApiKeySpec>[] | false = false;
  try {
    apiKeys = noAuth ? false : specs.map(http.parseApiKeySpec);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const logLevel = typeof values["log-level"] === "string" ? values["log-level"] : "info";
  if (!["fatal", "error", "warn", "info", "debug", "trace", "silent"].includes(logLevel))
    throw new UsageError(`--log-level must be fatal, error, warn, info, debug or silent; got ${logLevel}`);
  // One logger for the whole process: until the server exists, JSON lines on stderr; from then on
  // Fastify's pino, so --log-level governs the worker and the webhooks as well as the requests.
  let target: Logger = consoleLogger({ verbose: logLevel === "info" || logLevel === "debug" || logLevel === "trace" });
  const logger: Logger = {
    info: (fields, message) => target.info(fields, message),
    warn: (fields, message) => target.warn(fields, message),
    error: (fields, message) => target.error(fields, message),
  };

  const loopback = host === "localhost" || (isIP(host) !== 0 && http.deniedReason(host)?.startsWith("loopback") === true);
  if (noAuth && !loopback) {
    logger.warn({ host }, "running WITHOUT authentication on a non-loopback interface: anyone who can reach it can enqueue, cancel and read jobs");
  }

  let streamTokenSecret: string | undefined;
  if (typeof values["stream-token-secret-env"] === "string") {
    streamTokenSecret = process.env[values["stream-token-secret-env"]];
    if (!streamTokenSecret) throw new UsageError(`--stream-token-secret-env ${values["stream-token-secret-env"]}: that environment variable is empty`);
  }

  let idSecret: string | undefined;
  if (typeof values["id-secret-env"] === "string") {
    idSecret = process.env[values["id-secret-env"]];
    if (!idSecret) throw new UsageError(`--id-secret-env ${values["id-secret-env"]}: that environment variable is empty`);
  }

  const handlersPath = typeof values.handlers === "string" ? values.handlers : null;
  if (handlersPath === null && values.queue !== undefined) throw new UsageError("--queue needs --handlers (the in-process worker's job handlers)");
  const handlers = handlersPath ? await loadHandlers(handlersPath) : null;
  const queues = handlersPath ? await queuesForHandlers(values.queue, handlersPath) : [];
  const metricsFlags = metricsSettings(values);
  const outboxUrl = typeof values["outbox-db"] === "string" ? values["outbox-db"] : values.outbox === true ? url : null;
  if (outboxUrl !== null) {
    try {
      outboxLocation(outboxUrl);
    } catch (error) {
      throw new UsageError(`${typeof values["outbox-db"] === "string" ? "--outbox-db" : "--outbox (the database of --db)"}: ${(error as Error).message}`);
    }
  }

  const backend = await openStore(url);
  const closeables: Closeable[] = [];
  let worker: Worker | null = null;
  let webhooks: InstanceType<typeof http.WebhookDispatcher> | null = null;
  let metricsServer: MetricsServer | null = null;
  let outbox: Awaited<ReturnType<typeof openDeadLetters>> | null = null;
  // The dashboard's Relay view reads the outbox's backlog through a polling source's lag() (it never claims).
  let relayLag: Awaited<ReturnType<typeof openSource>> | null = null;
  try {
    // The outbox tables come with the migrations: --db's are run by openStore above; a separate
    // --outbox-db is migrated here (as `conveyor migrate` would), so its tables exist too.
    // Closed in afterClose, after the API, so no request finds its pool gone.
    if (outboxUrl !== null && outboxUrl !== url) await migrateOutbox(outboxUrl);
    outbox = outboxUrl === null ? null : await openDeadLetters(outboxUrl);
    relayLag = outboxUrl === null || values["no-dashboard"] === true ? null : await openSource(outboxUrl, { mode: "poll" });
    // SQLite's source opens its file in start(); PostgreSQL's reads lag through its pool without it (start would LISTEN).
    if (relayLag && outboxLocation(outboxUrl!).kind === "sqlite") await relayLag.start({ wake: () => undefined, warn: () => undefined });
    const observed = metricsFlags ? await createMetrics(metricsFlags, backend) : null;
    const tracing = await loadTracing();
    const secrets = (process.env.CONVEYOR_WEBHOOK_SECRETS ?? "").split(/[,\s]+/).filter(Boolean);
    if (secrets.length > 0 || typeof values.webhooks === "string") {
      let config: WebhookFile = {};
      if (typeof values.webhooks === "string") {
        try {
          config = JSON.parse(readFileSync(values.webhooks, "utf8")) as WebhookFile;
        } catch (error) {
          throw new UsageError(`--webhooks ${values.webhooks}: ${(error as Error).message}`);
        }
      }
      if (secrets.length === 0) throw new UsageError("--webhooks needs signing secrets in CONVEYOR_WEBHOOK_SECRETS (whsec_...)");
      webhooks = new http.WebhookDispatcher({
        backend,
        secrets,
        subscriptions: (config.subscriptions ?? []) as never,
        allow: (config.allow ?? []) as string[],
        allowHttp: config.allowHttp === true,
        ...(idSecret ? { idSecret } : {}),
        logger,
        ...(tracing ? { telemetry: tracing } : {}),
      });
    }

    if (handlers) {
      worker = new Worker({
        backend,
        queues,
        handlers,
        concurrency: intOption("concurrency", values.concurrency, 1),
        logger,
        autostart: false,
        scheduler: values["no-scheduler"] !== true,
        ...(tracing ? { telemetry: tracing } : {}),
      });
      observed?.metrics.observe(worker);
      worker.on("job:dead", ({ job, error, reason }) =>
        logger.warn({ jobId: job.id, name: job.name, attempt: job.attempt, reason, error: error.message }, "job dead"),
      );
      webhooks?.attach(worker);
    }

    // The dashboard's charts come from the store (dashboard/store-history.ts); the in-process
    // worker's events only where the store keeps no finished jobs (dashboard/history.ts).
    const history = values["no-dashboard"] === true ? null : new http.MetricsHistory();
    if (history && worker) history.attach(worker);
    const app = await http.createServer({
      backend,
      apiKeys,
      basePath: typeof values["base-path"] === "string" ? values["base-path"] : "/v1",
      ...(typeof values.cors === "string" ? { cors: { origins: values.cors.trim() === "*" ? "*" : listOption("cors", values.cors) } } : {}),
      ...(values["max-body-bytes"] !== undefined ? { maxBodyBytes: intOption("max-body-bytes", values["max-body-bytes"], 1) } : {}),
      ...(values["request-timeout-ms"] !== undefined ? { requestTimeoutMs: intOption("request-timeout-ms", values["request-timeout-ms"], 1) } : {}),
      ...(values["connection-timeout-ms"] !== undefined ? { connectionTimeoutMs: intOption("connection-timeout-ms", values["connection-timeout-ms"], 1) } : {}),
      ...(webhooks ? { webhooks } : {}),
      ...(streamTokenSecret ? { streamTokenSecret } : {}),
      ...(idSecret ? { idSecret } : {}),
      ...(observed || tracing ? { telemetry: combineTelemetry(observed?.metrics, tracing) } : {}),
      logger: logLevel === "silent" ? false : { level: logLevel },
      dashboard: history
        ? { history, ...(outbox && relayLag ? { relay: { lag: relayLag.lag.bind(relayLag), deadCount: outbox.dead.count.bind(outbox.dead) } } : {}) }
        : false,
      ...(outbox ? { outbox: outbox.dead } : {}),
    });
    target = app.log;
    closeables.push({
      close: async () => {
        await app.close();
        return { drained: true, releasedJobIds: [] };
      },
    });
    if (worker) closeables.push(worker);
    // Cron schedules fire from here too (the in-process worker runs its own loop when there is one).
    const scheduler =
      worker === null && values["no-scheduler"] !== true && backend.capabilities.schedules
        ? new Scheduler(backend, {}, { onError: (error, during) => logger.warn({ error: (error as Error).message }, `scheduler: ${during} failed`) })
        : null;
    if (scheduler) {
      closeables.push({
        close: async () => {
          await scheduler.stop();
          return { drained: true, releasedJobIds: [] };
        },
      });
    }
    if (webhooks) {
      const dispatcher = webhooks;
      // One process, one set of maintenance timers: the job worker's when there is one.
      const deliveries = dispatcher.start({ maintenance: worker === null });
      observed?.metrics.observe(deliveries);
      closeables.push({ close: (o) => dispatcher.close(o) });
    }
    if (observed) {
      metricsServer = await observed.listen().catch((error: unknown) => {
        throw new UsageError(`--metrics-port ${metricsFlags?.port}: cannot listen: ${(error as Error).message}`);
      });
      process.stderr.write(`conveyor serve metrics on http://${metricsServer.address.address}:${metricsServer.address.port}/metrics\n`);
    }
    await app.listen({ port, host });
    const address = app.server.address();
    const shown =
      typeof address === "object" && address ? `${address.family === "IPv6" ? `[${address.address}]` : address.address}:${address.port}` : String(address);
    return await new Promise<number>((resolveExit) => {
      const metricsListener = metricsServer;
      installShutdownSignals(closeables, {
        logger,
        // The API drains its requests and the worker (if any) its jobs within the worker's grace period.
        deadlineMs: shutdownDeadlineMs(worker?.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_MS),
        // The metrics listener outlives the drain, so Prometheus can scrape it; closed once the
        // worker and the API are done, as `conveyor worker` does.
        afterClose: async () => {
          await metricsListener?.close();
          await relayLag?.close();
          await outbox?.close();
          await backend.close();
        },
        exit: resolveExit,
      });
      worker?.run();
      scheduler?.start();
      process.stderr.write(
        `conveyor serve on http://${shown}${typeof values["base-path"] === "string" ? values["base-path"] : "/v1"} (${backend.description}); ` +
          `${apiKeys === false ? "NO authentication" : `${apiKeys.length} API key(s)`}` +
          `${worker ? `; worker on ${queues.join(",")} (${worker.jobNames.join(",")})` : ""}` +
          `${webhooks ? "; webhooks on" : ""}` +
          `${outbox ? `; outbox routes on ${outbox.dead.description}` : ""}` +
          `${history ? `; dashboard on http://${shown}/ui/` : ""}\n`,
      );
    });
  } catch (error) {
    await Promise.all(closeables.map((c) => c.close({ force: true }).catch(() => undefined)));
    await metricsServer?.close();
    await relayLag?.close().catch(() => undefined);
    await outbox?.close().catch(() => undefined);
    await backend.close();
    if (error instanceof InvalidInputError) throw new UsageError(error.message);
    throw error;
  }
}
