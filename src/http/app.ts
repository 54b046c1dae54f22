/**
 * `createServer`: a standalone Fastify server with the Conveyor API mounted, as
 * `conveyor serve` runs it. To add the API to an app you already have, register
 * `conveyorHttp` instead.
 */
import Fastify, { type FastifyInstance, type FastifyServerOptions } from "fastify";
import { answerError, conveyorHttp, safeRequestSerializer, type ConveyorHttpOptions } from "./plugin.js";
import { problem, sendProblem } from "./problem.js";

export interface ServerOptions extends ConveyorHttpOptions {
  /**
   * Fastify's logger: `true`, a pino options object, a pino-compatible instance, or `false`.
   * Default `{ level: "info" }`. Authorization and X-API-Key headers are redacted, and stream
   * tokens are stripped from logged URLs, whatever you pass.
   */
  logger?: boolean | LoggerConfig;
  /** Trust X-Forwarded-* from these proxies (Fastify's `trustProxy`). Default false. */
  trustProxy?: FastifyServerOptions["trustProxy"];
  /** Other Fastify server options (keepAliveTimeout, requestTimeout …). */
  fastify?: Omit<FastifyServerOptions, "logger" | "trustProxy">;
}

/** Fastify's logger options (pino's), e.g. `{ level: "warn", stream }`. */
export type LoggerConfig = Exclude<FastifyServerOptions["logger"], boolean | undefined>;

const REDACT = ["req.headers.authorization", 'req.headers["x-api-key"]', 'req.headers["cookie"]'];

/** Builds (does not start) the server; call `listen({ port, host })` on it, and `close()` to stop. */
export async function createServer(options: ServerOptions): Promise<FastifyInstance> {
  const { logger = { level: "info" }, trustProxy = false, fastify: extra = {}, ...plugin } = options;
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
  const app = Fastify({
    logger: loggerOption,
    trustProxy,
    // SSE streams are closed by the plugin's preClose hook; other keep-alive sockets now.
    forceCloseConnections: true,
    ...extra,
    // Job ids may be 255 characters; percent-encoded UTF-8 takes up to 12 characters each.
    routerOptions: { maxParamLength: 4_096, ...extra.routerOptions },
    // Errors raised before routing (a malformed URL such as /v1/jobs/%) as problem documents too.
    frameworkErrors: (error, _request, reply) => {
      const status = typeof error.statusCode === "number" && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 400;
      void sendProblem(reply, problem(status, "bad-request", `${error.message}; percent-encode reserved characters in path segments`));
    },
  });
  app.setErrorHandler(answerError);
  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, problem(404, "no-route", `no route ${request.method} ${request.url.split("?")[0]!.slice(0, 200)}; the API is under ${plugin.basePath ?? "/v1"}`)),
  );
  await app.register(conveyorHttp, plugin);
  return app;
}
