/**
 * `createServer`: a standalone Fastify server with the Conveyor API mounted, as
 * `conveyor serve` runs it. To add the API to an app you already have, register
 * `conveyorHttp` instead.
 */
import type { Server } from "node:http";
import Fastify, { type FastifyHttpOptions, type FastifyInstance, type FastifyServerOptions } from "fastify";
import { InvalidInputError } from "../core/errors.js";
import { answerError, conveyorHttp, safeRequestSerializer, type ConveyorHttpOptions } from "./plugin.js";
import { problem, sendProblem } from "./problem.js";
import { shown } from "../core/checks.js";

export interface ServerOptions extends ConveyorHttpOptions {
  /**
   * Fastify's logger: `true`, a pino options object, a pino-compatible instance, or `false`.
   * Default `{ level: "info" }`. Authorization and X-API-Key headers are redacted, and stream
   * tokens are stripped from logged URLs, whatever you pass.
   */
  logger?: boolean | LoggerConfig;
  /** Trust X-Forwarded-* from these proxies (Fastify's `trustProxy`). Default false. */
  trustProxy?: FastifyServerOptions["trustProxy"];
  /**
   * Longest time a client may take to send a whole request, headers and body, in ms; a client
   * still trickling its request then is cut off (Node answers 408). Default 30 000. Checked
   * every quarter of it (at most every second), so a slow client is gone within 1.25 times it.
   */
  requestTimeoutMs?: number;
  /**
   * A connection with no traffic either way for this long is closed, in ms. Default 120 000. Must
   * exceed `events.heartbeatMs` (default 15 000): the heartbeats are what keeps an idle event
   * stream's connection busy.
   */
  connectionTimeoutMs?: number;
  /** Other Fastify server options (keepAliveTimeout …); `requestTimeoutMs`/`connectionTimeoutMs` win over theirs. */
  fastify?: Omit<FastifyServerOptions, "logger" | "trustProxy">;
}

/** `ServerOptions.requestTimeoutMs` when not given. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;
/** `ServerOptions.connectionTimeoutMs` when not given. */
export const DEFAULT_CONNECTION_TIMEOUT_MS = 120_000;

/** Fastify's logger options (pino's), e.g. `{ level: "warn", stream }`. */
export type LoggerConfig = Exclude<FastifyServerOptions["logger"], boolean | undefined>;

const REDACT = ["req.headers.authorization", 'req.headers["x-api-key"]', 'req.headers["cookie"]'];

/** Builds (does not start) the server; call `listen({ port, host })` on it, and `close()` to stop. */
export async function createServer(options: ServerOptions): Promise<FastifyInstance> {
  const {
    logger = { level: "info" },
    trustProxy = false,
    fastify: extra = {},
    requestTimeoutMs = DEFAULT_REQUEST_TIMEOUT_MS,
    connectionTimeoutMs = DEFAULT_CONNECTION_TIMEOUT_MS,
    ...plugin
  } = options;
  for (const [name, value] of [
    ["requestTimeoutMs", requestTimeoutMs],
    ["connectionTimeoutMs", connectionTimeoutMs],
  ] as const) {
    if (!Number.isInteger(value) || value < 1) throw new InvalidInputError(`createServer option ${name} must be a positive integer (ms); got ${shown(value)}`);
  }
  const heartbeatMs = plugin.events?.heartbeatMs ?? 15_000;
  if (connectionTimeoutMs <= heartbeatMs) {
    throw new InvalidInputError(
      `connectionTimeoutMs (${connectionTimeoutMs}) must exceed events.heartbeatMs (${heartbeatMs}), or idle event streams are cut between heartbeats`,
    );
  }
  const given: LoggerConfig = logger === true || logger === false ? {} : logger;
  const theirRedact = Array.isArray(given.redact) ? given.redact : (given.redact?.paths ?? []);
  const loggerOption: LoggerConfig | false =
    logger === false
      ? false
      : {
          ...given,
          redact: { paths: [...REDACT, ...theirRedact], censor: "[redacted]" },
          serializers: { ...given.serializers, req: safeRequestSerializer },
        };
  const serverOptions: FastifyHttpOptions<Server> = {
    logger: loggerOption,
    trustProxy,
    // SSE streams are closed by the plugin's preClose hook; other keep-alive sockets now.
    forceCloseConnections: true,
    ...extra,
    requestTimeout: requestTimeoutMs,
    connectionTimeout: connectionTimeoutMs,
    http: {
      // Node rejects a headers timeout longer than the request timeout; its default is 60 s.
      headersTimeout: Math.min(60_000, requestTimeoutMs),
      // How often Node looks for requests past their timeout (default every 30 s).
      connectionsCheckingInterval: Math.max(50, Math.min(1_000, Math.floor(requestTimeoutMs / 4))),
    },
    // Job ids may be 255 characters; percent-encoded UTF-8 takes up to 12 characters each.
    routerOptions: { maxParamLength: 4_096, ...extra.routerOptions },
    // Errors raised before routing (a malformed URL such as /v1/jobs/%) as problem documents too.
    frameworkErrors: (error, _request, reply) => {
      const status = typeof error.statusCode === "number" && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 400;
      void sendProblem(reply, problem(status, "bad-request", `${error.message}; percent-encode reserved characters in path segments`));
    },
  };
  const app = Fastify(serverOptions);

  app.setErrorHandler(answerError);
  app.setNotFoundHandler((request, reply) =>
    sendProblem(
      reply,
      problem(404, "no-route", `no route ${request.method} ${request.url.split("?")[0]!.slice(0, 200)}; the API is under ${plugin.basePath ?? "/v1"}`),
    ),
  );
  await app.register(conveyorHttp, plugin);
  return app;
}
