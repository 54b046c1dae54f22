/**
 * `createServer`: a standalone Fastify server with the Conveyor API mounted, as
 * `conveyor serve` runs it. To add the API to an app you already have, register
 * `conveyorHttp` instead.
 */
import { maxHeaderSize, STATUS_CODES, type Server } from "node:http";
import type { Duplex } from "node:stream";
import Fastify, { type FastifyError, type FastifyHttpOptions, type FastifyInstance, type FastifyServerOptions } from "fastify";
import { InvalidInputError } from "../core/errors.js";
import { answerError, conveyorHttp, redactUrl, safeRequestSerializer, type ConveyorHttpOptions } from "./plugin.js";
import { problem, PROBLEM_CONTENT_TYPE, sendProblem, type Problem } from "./problem.js";
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

/** Longest path segment the router takes, in characters (`routerOptions.maxParamLength`). */
const MAX_PATH_SEGMENT_LENGTH = 4_096;

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
    routerOptions: { maxParamLength: MAX_PATH_SEGMENT_LENGTH, ...extra.routerOptions },
    // Errors raised before routing (a malformed URL such as /v1/jobs/%) as problem documents too.
    frameworkErrors: (error, _request, reply) => void sendProblem(reply, routingProblem(error, extra.routerOptions?.maxParamLength ?? MAX_PATH_SEGMENT_LENGTH)),
    // Requests Node refuses before Fastify sees them (not HTTP, headers too large, too slow).
    clientErrorHandler: (error: ClientError, socket: Duplex) => answerClientError(error, socket, requestTimeoutMs),
  };
  const app = Fastify(serverOptions);

  app.setErrorHandler(answerError);
  app.setNotFoundHandler((request, reply) =>
    sendProblem(
      reply,
      problem(
        404,
        "no-route",
        `no route ${request.method} ${redactUrl(request.url.split("?")[0]!).slice(0, 200)}; the API is under ${plugin.basePath ?? "/v1"}`,
      ),
    ),
  );
  await app.register(conveyorHttp, plugin);
  return app;
}

/**
 * The answer to a URL the router cannot take. Never the URL itself: it may carry an access_token
 * or an API key, and a problem document is as likely to be logged as a request line.
 */
function routingProblem(error: FastifyError, maxParamLength: number): Problem {
  switch (error.code) {
    case "FST_ERR_MAX_PARAM_LENGTH":
      return problem(
        414,
        "uri-too-long",
        `the URL is too long: a path segment may be at most ${maxParamLength} characters, percent-encoded; job ids are at most 255 characters`,
      );
    case "FST_ERR_BAD_URL":
      return problem(400, "bad-request", 'the URL path has a malformed percent-escape; percent-encode reserved characters in path segments ("%" as %25)');
  }
  const status = typeof error.statusCode === "number" && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 400;
  return problem(status, "bad-request", redactUrl(error.message));
}

/** A `clientError` of Node's HTTP server: `code` names what the parser refused (llhttp's `HPE_…`). */
type ClientError = Error & { code?: string };

/**
 * Answers a request Node's HTTP parser refused (`clientError`) with a problem document, as every
 * other error of the API. The request never reached Fastify; its raw bytes (`rawPacket`, with any
 * credentials in its headers) are neither echoed nor logged.
 */
function answerClientError(error: ClientError, socket: Duplex, requestTimeoutMs: number): void {
  // A reset connection has no one to answer.
  if (error.code === "ECONNRESET" || socket.destroyed) return;
  const p = clientErrorProblem(error, requestTimeoutMs);
  if (socket.writable) {
    const body = JSON.stringify(p);
    socket.write(
      `HTTP/1.1 ${p.status} ${STATUS_CODES[p.status]}\r\nContent-Type: ${PROBLEM_CONTENT_TYPE}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}

/** What to do about a request Node's HTTP parser (llhttp) refused, by its error code. */
const PARSE_ERROR_ADVICE: Record<string, string> = {
  HPE_INVALID_TRANSFER_ENCODING: "send either Content-Length or Transfer-Encoding: chunked (not both), and no other transfer coding",
  HPE_UNEXPECTED_CONTENT_LENGTH: "send either Content-Length or Transfer-Encoding: chunked, not both",
  HPE_INVALID_CHUNK_SIZE: "send each chunk as its size in hex, CRLF, the data and CRLF, and end with a 0-size chunk",
  HPE_INVALID_HEADER_TOKEN: "remove control characters (and other characters HTTP does not allow) from header names and values",
  HPE_INVALID_CONTENT_LENGTH: "send Content-Length as one decimal number of bytes",
};

function clientErrorProblem(error: ClientError, requestTimeoutMs: number): Problem {
  switch (error.code) {
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return problem(408, "request-timeout", `the request was not received in full within ${requestTimeoutMs} ms; send the whole request at once`);
    case "HPE_HEADER_OVERFLOW":
      return problem(
        431,
        "headers-too-large",
        `the request line and headers are larger than ${maxHeaderSize} bytes in all; send a shorter URL, or fewer or shorter headers (cookies included)`,
      );
  }
  // llhttp's reasons are fixed texts ("Invalid header value char"), never the request's bytes.
  const reason = error.code?.startsWith("HPE_") ? error.message.replace(/^Parse Error: /, "").slice(0, 200) : (error.code ?? "unknown error");
  const advice = PARSE_ERROR_ADVICE[error.code ?? ""] ?? "fix the client or proxy that sent it";
  return problem(400, "bad-http", `the request is not valid HTTP/1.1 (${reason}); ${advice}`);
}
