/**
 * `conveyorHttp`: the Fastify plugin. Mount it in your own Fastify app:
 *
 * ```ts
 * import Fastify from "fastify";
 * import { conveyorHttp } from "conveyor-jobs/http";
 * const app = Fastify({ logger: true });
 * await app.register(conveyorHttp, { backend, apiKeys: [{ id: "web", sha256: "…", scopes: ["enqueue", "read"] }] });
 * await app.listen({ port: 3000 });
 * ```
 *
 * Everything the plugin installs — validator, error and not-found handlers, authentication and
 * CORS hooks — lives in its own encapsulated scope under `basePath`: your other routes are not
 * affected.
 */
import type { FastifyError, FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import type { Backend } from "../backend/contract.js";
import type { JobSpec } from "../core/job.js";
import type { JobDefinition } from "../core/define.js";
import type { JobTelemetry } from "../core/telemetry.js";
import { AmbiguousJobIdError, InvalidInputError, StoreUnavailableError, UnsupportedByStoreError } from "../core/errors.js";
import { MAX_JSON_DEPTH, nestedDeeperThan } from "../core/json.js";
import { ANONYMOUS, KeyRing, presentedKey, StreamTokens, type ApiKeyConfig, type Principal } from "./auth.js";
import type { HttpContext, RouteAccess, RouteSpec } from "./context.js";
import { EnqueueBatcher } from "./batcher.js";
import { IdDeriver } from "./derived-ids.js";
import { DurationEstimator, type EstimatorOptions } from "./estimate.js";
import { buildOpenApi, type OpenApiInfo } from "./openapi.js";
import { payloadJsonSchemas } from "./payload-schemas.js";
import { DOCS_CSP, docsPage, loadDocsAssets } from "./api-docs.js";
import { HttpProblem, problem, sendProblem } from "./problem.js";
import { enqueueRoutes } from "./routes/enqueue.js";
import { jobRoutes } from "./routes/jobs.js";
import { queueRoutes } from "./routes/queues.js";
import { eventRoutes } from "./routes/events.js";
import { compileValidator, RequestValidationError } from "./schema.js";
import { problemResponse } from "./schemas.js";
import { Type } from "./typed-schema.js";
import { JobWatcher, type OpenStream } from "./sse.js";
import type { WebhookDispatcher } from "./webhooks.js";
import { registerDashboard, type DashboardOptions } from "../dashboard/plugin.js";
import type { OutboxDeadLetters } from "../outbox/dead.js";
import { outboxRoutes } from "./routes/outbox.js";
import { scheduleRoutes } from "./routes/schedules.js";
import { shown } from "../core/checks.js";

export interface CorsOptions {
  /**
   * Origins allowed to call the API from a browser: exact origins such as
   * "https://app.example.com", or "*" for any origin. No default: CORS is off unless given.
   * Credentials (cookies) are never allowed: the API authenticates with bearer keys and tokens.
   */
  origins: readonly string[] | "*";
  /** How long browsers may cache a preflight answer, in seconds. Default 600. */
  maxAgeSeconds?: number;
}

export interface EventStreamOptions {
  /** How often open streams look at their job, ms (one store read per watched job per poll). Default 200. */
  pollIntervalMs?: number;
  /** Comment lines this often keep proxies from closing idle streams, ms. Default 15 000. */
  heartbeatMs?: number;
  /** Reconnect delay advertised to EventSource clients, ms. Default 2 000. */
  retryMs?: number;
  /** Streams open at once on this server; more are refused with 503. Default 1 000. */
  maxStreams?: number;
}

export interface ConveyorHttpOptions {
  /** Where jobs are stored. */
  backend: Backend;
  /**
   * API keys with their scopes; see `auth.ts`. `false` turns authentication off (every request
   * may do everything): only behind your own authentication, or on a loopback interface.
   * Required, so that running without keys is a decision.
   */
  apiKeys: readonly ApiKeyConfig[] | false;
  /**
   * Job definitions (`defineJob`) whose payload schemas validate enqueued data (422 with field
   * errors) and whose default options apply. Default none.
   */
  jobs?: readonly JobDefinition<unknown>[];
  /**
   * Accept job names that are not in `jobs`. Default: true when `jobs` is empty, false otherwise
   * (a registry is a whitelist).
   */
  allowUnregisteredJobs?: boolean;
  /** Path prefix of every route. Default "/v1". */
  basePath?: string;
  /** Largest enqueue body, in bytes; larger ones get 413. Also the payload limit. Default 262 144 (256 KiB). */
  maxBodyBytes?: number;
  /** Largest bulk enqueue body, in bytes. Default 4 194 304 (4 MiB). */
  maxBulkBodyBytes?: number;
  /** Most jobs in one bulk request. Default 1 000. */
  maxBulkJobs?: number;
  /** Browser access. Default off. */
  cors?: CorsOptions | false;
  /**
   * Enables `options.callbackUrl` at enqueue (validated by its SSRF guard). The plugin does not
   * start it: call `webhooks.start()` in the process that should deliver.
   */
  webhooks?: WebhookDispatcher;
  /**
   * The outbox's set-aside events (`OutboxDeadLetters.postgres(pool)` / `.sqlite(db)` from
   * conveyor-jobs/outbox): adds the admin routes under /outbox/dead. Default: no outbox routes.
   */
  outbox?: OutboxDeadLetters;
  /**
   * Secret that signs event-stream tokens, at least 32 bytes. Default: random per process, so a
   * token only works on the instance that made it; set the same secret on every instance behind
   * a load balancer.
   */
  streamTokenSecret?: string;
  /**
   * Keys the HMAC that derives job ids from Idempotency-Key headers (`idem_…`), so no one can
   * compute another key's ids: at least 32 bytes, the same on every instance. Default:
   * `streamTokenSecret` when given, else a key derived from the requesting API key's configured
   * `sha256` (stable across restarts and instances; rotating that key changes its ids), else
   * (only with `apiKeys: false`) a plain SHA-256. The `idem_` prefix is reserved either way.
   * Changing it lets a retry that spans the change store its job a second time.
   */
  idSecret?: string;
  /** Lifetime of event-stream tokens, ms. Default 600 000 (10 min). */
  streamTokenTtlMs?: number;
  /** Server-Sent Events tuning. */
  events?: EventStreamOptions;
  /**
   * Group commit: store the jobs of concurrent enqueue requests with one backend call (see
   * `batcher.ts`); each request is still answered only once its jobs are committed. Default true.
   */
  batchEnqueues?: boolean;
  /** Duration estimate tuning (`estimatedDurationSeconds`). */
  estimate?: EstimatorOptions;
  /** Title and version of the OpenAPI document. */
  openapi?: OpenApiInfo;
  /**
   * Interactive API docs (Swagger UI over this API's OpenAPI document) at `<prefix>/docs`, served
   * from the package's own files, public like the document. Default true.
   */
  apiDocs?: boolean;
  /**
   * The web dashboard (docs/dashboard.md): `true` or options serve it, by default at "/ui". Its
   * login sets a session cookie that this API then accepts like the key it stands for. Default off.
   */
  dashboard?: DashboardOptions | boolean;
  /**
   * Counts and traces enqueued jobs (see `conveyor-jobs/metrics`); with tracing, a request's
   * `traceparent` header becomes the parent of its jobs' producer spans. Default none.
   */
  telemetry?: JobTelemetry;
}

const HEALTH_RESPONSE = Type.Object({ status: Type.Unsafe<"ok">({ const: "ok" }) });

const EXPOSED_HEADERS = "Location, Retry-After, Idempotent-Replayed";
const ALLOWED_HEADERS = "Authorization, Content-Type, Idempotency-Key, Last-Event-ID, X-API-Key";
const OTHER_BODY_LIMIT = 1024 * 1024;
/** Routes without a HEAD twin: a HEAD request must not open a long-lived stream. */
const LONG_LIVED = new Set(["streamJobEvents", "streamQueueEvents"]);

function positive(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < 1) throw new InvalidInputError(`conveyorHttp option ${name} must be a positive integer; got ${shown(value)}`);
  return value;
}

function normalizeBasePath(value: string | undefined): string {
  const p = value ?? "/v1";
  if (p === "" || p === "/") return "";
  if (!/^\/[A-Za-z0-9._~\-/]*[^/]$/.test(p)) throw new InvalidInputError(`basePath must start with "/" and not end with one, e.g. "/v1"; got ${shown(value)}`);
  return p;
}

/** Query parameter names that carry credentials, matched on the decoded, lower-cased name. */
const CREDENTIAL_PARAMETER = /token|key|secret|passw|pwd|auth|credential|signature|^sig$|session|jwt|bearer/;
/** A Conveyor API key (`cvk_…`) wherever it appears. */
const API_KEY_TEXT = /cvk_[A-Za-z0-9_-]+/g;

/**
 * Percent-decodes what a reader of the log could decode, for matching only: each `%XX` of an
 * ASCII character on its own, so one malformed escape (`%ZZ`, which makes decodeURIComponent
 * throw) cannot hide `cvk%5F…` beside it, and again while that changes the text (`%255F`).
 */
function decodeForMatching(text: string): string {
  let decoded = text.replace(/\+/g, " ");
  for (let round = 0; round < 4; round++) {
    const next = decoded.replace(/%([0-7][0-9A-Fa-f])/g, (_escape, hex: string) => String.fromCharCode(parseInt(hex, 16)));
    if (next === decoded) break;
    decoded = next;
  }
  return decoded;
}

/**
 * Strips credentials from a URL before it reaches a log line: the value of every query parameter
 * whose name, once percent-decoded (`access%5Ftoken` is `access_token`), looks like a credential,
 * and any API key (`cvk_…`, even one wrongly sent in a query string or a path).
 */
export function redactUrl(url: string): string {
  const hash = url.indexOf("#");
  const withoutFragment = hash >= 0 ? url.slice(0, hash) : url;
  const q = withoutFragment.indexOf("?");
  const path = q >= 0 ? withoutFragment.slice(0, q) : withoutFragment;
  const redactKeys = (text: string) => (decodeForMatching(text).match(API_KEY_TEXT) ? "[redacted]" : text.replace(API_KEY_TEXT, "[redacted]"));
  if (q < 0) return redactKeys(path);
  const query = withoutFragment
    .slice(q + 1)
    .split("&")
    .map((pair) => {
      const eq = pair.indexOf("=");
      const name = eq >= 0 ? pair.slice(0, eq) : pair;
      if (CREDENTIAL_PARAMETER.test(decodeForMatching(name).toLowerCase())) return eq >= 0 ? `${name}=[redacted]` : name;
      return eq >= 0 ? `${name}=${redactKeys(pair.slice(eq + 1))}` : redactKeys(pair);
    })
    .join("&");
  return `${redactKeys(path)}?${query}`;
}

/** Request serializer for logs: never headers, never tokens in URLs. */
export function safeRequestSerializer(req: FastifyRequest): Record<string, unknown> {
  return { method: req.method, url: redactUrl(req.url), remoteAddress: req.ip };
}

/** Fastify's JSON parser, its callback form. */
type JsonParser = (request: FastifyRequest, body: string, done: (error: Error | null, value?: unknown) => void) => void;

/**
 * Parses JSON bodies with Fastify's parser, whose prototype-poisoning protection refuses keys
 * named __proto__ and constructor.prototype, except that:
 * - an empty body on a route that takes none is no body, whatever its Content-Type says;
 * - a refusal says whether the JSON is invalid or only poisoned (Fastify says "invalid" of both).
 */
function readJsonBodies(instance: FastifyInstance): void {
  const parse = instance.getDefaultJsonParser("error", "error") as JsonParser;
  instance.removeContentTypeParser("application/json");
  instance.addContentTypeParser("application/json", { parseAs: "string" }, (request, body, done) => {
    const text = body as string;
    if (text.length === 0 && request.routeOptions.schema?.body === undefined) return done(null, undefined);
    parse(request, text, (error, value) => {
      if ((error as FastifyError | null)?.code !== "FST_ERR_CTP_INVALID_JSON_BODY") return done(error, value);
      done(
        isJson(text)
          ? new HttpProblem(
              400,
              "invalid-json",
              "keys named __proto__, and constructor keys holding a prototype key, are refused anywhere in the body (prototype-poisoning protection); rename them",
            )
          : new HttpProblem(400, "invalid-json", "the body is not valid JSON; send a JSON object"),
      );
    });
  });
}

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

function hasBody(request: FastifyRequest): boolean {
  const length = request.headers["content-length"];
  return request.headers["transfer-encoding"] !== undefined || (length !== undefined && length !== "0");
}

/** True for no Content-Encoding, or only `identity` (RFC 9110: the body as it is). */
function isIdentity(encoding: string | undefined): boolean {
  return encoding === undefined || encoding.split(",").every((coding) => /^\s*(identity)?\s*$/i.test(coding));
}

export const conveyorHttp: FastifyPluginAsync<ConveyorHttpOptions> = async (fastify, options) => {
  if (!options?.backend) throw new InvalidInputError("conveyorHttp needs { backend, apiKeys }");
  if (options.apiKeys === undefined) {
    throw new InvalidInputError("conveyorHttp needs apiKeys: a list of { id, sha256, scopes } (see hashApiKey), or false to run without authentication");
  }
  const keyring = options.apiKeys === false ? null : new KeyRing(options.apiKeys);
  const basePath = normalizeBasePath(options.basePath);
  const jobs = new Map<string, JobDefinition<unknown>>();
  for (const def of options.jobs ?? []) {
    if (jobs.has(def.name)) throw new InvalidInputError(`two job definitions named "${def.name}" in conveyorHttp's jobs; keep one`);
    jobs.set(def.name, def);
  }
  // Before the dashboard registers its routes, so that they parse bodies the same way.
  readJsonBodies(fastify);
  fastify.addHook("preParsing", async (request) => {
    if (hasBody(request) && !isIdentity(request.headers["content-encoding"])) {
      throw new HttpProblem(
        415,
        "unsupported-content-encoding",
        "request bodies must not be content-encoded; send the JSON as is (Content-Encoding: identity, or none)",
      );
    }
  });
  const cors = options.cors ? options.cors : null;
  const events = options.events ?? {};
  const principals = new WeakMap<FastifyRequest, Principal>();
  const streams = new Set<OpenStream>();
  const dashboard = options.dashboard
    ? await registerDashboard(fastify, {
        backend: options.backend,
        keyring,
        apiBasePath: `${fastify.prefix}${basePath}`,
        options: options.dashboard === true ? {} : options.dashboard,
        answerError,
      })
    : null;

  await fastify.register(
    async (scope: FastifyInstance) => {
      const batcher = options.batchEnqueues === false ? null : new EnqueueBatcher(options.backend);
      const store = (specs: readonly JobSpec[]) => (batcher ? batcher.enqueue(specs) : options.backend.enqueue(specs));
      const telemetry = options.telemetry ?? null;
      const ctx: HttpContext = {
        backend: options.backend,
        enqueue: telemetry?.enqueue ? (specs) => telemetry.enqueue!(specs, store) : store,
        enqueueAllOrNothing: (specs) => {
          // Not through the batcher: its group commits would mix this batch with other requests'.
          const whole = (batch: readonly JobSpec[]) => options.backend.enqueue(batch, { allOrNothing: true });
          return telemetry?.enqueue ? telemetry.enqueue(specs, whole) : whole(specs);
        },
        basePath: scope.prefix,
        jobs,
        strictJobNames: !(options.allowUnregisteredJobs ?? jobs.size === 0),
        estimator: new DurationEstimator(options.backend, options.estimate),
        maxBodyBytes: positive("maxBodyBytes", options.maxBodyBytes, 256 * 1024),
        maxBulkBodyBytes: positive("maxBulkBodyBytes", options.maxBulkBodyBytes, 4 * 1024 * 1024),
        maxBulkJobs: positive("maxBulkJobs", options.maxBulkJobs, 1_000),
        webhooks: options.webhooks ?? null,
        tokens: new StreamTokens(options.streamTokenSecret),
        derivedIds: new IdDeriver(
          options.idSecret ?? options.streamTokenSecret,
          options.idSecret !== undefined ? "idSecret" : "streamTokenSecret",
          (id) => keyring?.keyHashOf(id) ?? null,
        ),
        streamTokenTtlMs: positive("streamTokenTtlMs", options.streamTokenTtlMs, 600_000),
        watcher: new JobWatcher(options.backend, positive("events.pollIntervalMs", events.pollIntervalMs, 200), (error) =>
          scope.log.warn({ err: error instanceof Error ? error.message : String(error) }, "conveyor: polling a job for its event stream failed; retrying"),
        ),
        streams,
        sse: {
          heartbeatMs: positive("events.heartbeatMs", events.heartbeatMs, 15_000),
          retryMs: positive("events.retryMs", events.retryMs, 2_000),
          maxStreams: positive("events.maxStreams", events.maxStreams, 1_000),
        },
        principal: (request) => principals.get(request) ?? (keyring ? { id: "nobody", scopes: new Set() } : ANONYMOUS),
      };

      if (telemetry?.request) {
        const enter = telemetry.request.bind(telemetry);
        // Callback style, and after the body is read: the route handler runs inside `done`, so
        // inside the request's trace context (body parsing would leave an earlier context behind).
        scope.addHook("preHandler", (request, _reply, done) => enter(request.headers, done));
      }
      /** The methods routes take at a concrete path (none when no route matches it); set once the routes are known. */
      let allowedMethods: (path: string) => string[] = () => [];

      scope.setValidatorCompiler(compileValidator);
      // The API speaks JSON only: anything else (Fastify also parses text/plain) is a 415.
      if (scope.hasContentTypeParser("text/plain")) scope.removeContentTypeParser("text/plain");

      scope.setErrorHandler(answerError);

      // Before anything walks the body (the schema check, request fingerprints, the payload
      // check, JSON.stringify), all of them recursive: a body nested thousands of levels deep
      // would overflow the stack and answer 500.
      scope.addHook("preValidation", async (request) => {
        if (request.body !== null && typeof request.body === "object" && nestedDeeperThan(request.body, MAX_JSON_DEPTH + 8)) {
          throw new HttpProblem(400, "invalid-json", `the body nests arrays or objects more than ${MAX_JSON_DEPTH} levels deep; flatten the payload`);
        }
      });

      scope.setNotFoundHandler((request, reply) => {
        const rawPath = request.url.split("?")[0] ?? "";
        const path = redactUrl(rawPath).slice(0, 200);
        // A known path asked with a method it does not have: 405 with the methods it has.
        const allowed = allowedMethods(rawPath);
        if (allowed.length > 0) {
          return sendProblem(reply, problem(405, "method-not-allowed", `${path} does not take ${request.method}; it takes ${allowed.join(", ")}`), {
            allow: allowed.join(", "),
          });
        }
        return sendProblem(reply, problem(404, "no-route", `no route ${request.method} ${path}; the API is described at ${ctx.basePath}/openapi.json`));
      });

      // CORS first, so that even a 401 is readable by the browser that made the request.
      if (cors) {
        const allowAll = cors.origins === "*";
        const allowed = new Set(allowAll ? [] : cors.origins);
        const originOk = (origin: string | undefined): origin is string => typeof origin === "string" && (allowAll || allowed.has(origin));
        scope.addHook("onRequest", async (request, reply) => {
          const origin = request.headers.origin;
          if (!originOk(origin)) return;
          void reply.header("access-control-allow-origin", allowAll ? "*" : origin);
          if (!allowAll) void reply.header("vary", "Origin");
          void reply.header("access-control-expose-headers", EXPOSED_HEADERS);
        });
        scope.options("/*", { config: { conveyorAccess: "public" } }, async (request, reply) => {
          if (originOk(request.headers.origin)) {
            void reply
              .header("access-control-allow-methods", "GET, POST, PUT, DELETE")
              .header("access-control-allow-headers", ALLOWED_HEADERS)
              .header("access-control-max-age", String(cors.maxAgeSeconds ?? 600));
          }
          return reply.code(204).send();
        });
      }

      scope.addHook("onRequest", async (request, reply) => {
        const access = (request.routeOptions.config as { conveyorAccess?: RouteAccess } | undefined)?.conveyorAccess;
        if (access === undefined || access === "public") return;
        if (!keyring) {
          principals.set(request, ANONYMOUS);
          return;
        }
        // A credential the request names itself (an API key header, or a stream token on a job's
        // event stream) decides alone: a stale dashboard cookie, sent by the browser to every path
        // of the origin, must not block it, nor may a valid cookie stand in for a bad one.
        let principal: Principal | null = null;
        const presented = presentedKey(request.headers);
        const token = access === "events" ? (request.query as { access_token?: unknown }).access_token : undefined;
        const jobId = (request.params as { id?: unknown }).id;
        if (presented !== null && "invalid" in presented) return unauthorized(reply, "the Authorization header must be Bearer followed by one API key");
        if (presented !== null) {
          principal = keyring.authenticate(presented.key);
          if (!principal) return unauthorized(reply, "the API key is not valid; check it, or ask for a new one");
        } else if (token !== undefined && typeof jobId === "string") {
          principal = typeof token === "string" ? ctx.tokens.verify(token, jobId) : null;
          // A revoked key's tokens are revoked with it.
          if (principal && !keyring.scopesOf(principal.id)?.has("read")) principal = null;
          if (!principal)
            return unauthorized(
              reply,
              "the access_token is not valid for this job, it expired, or the key that asked for it was revoked; get a new one from POST /jobs/{id}/events/token",
            );
        } else if (dashboard) {
          // The dashboard's session cookie, with its CSRF checks (see dashboard/sessions.ts).
          const session = dashboard.sessions.check(request);
          if (session.kind === "refused")
            return sendProblem(reply, problem(session.status, session.status === 401 ? "unauthorized" : "forbidden", session.detail));
          if (session.kind === "ok") {
            principal = session.principal;
            if (session.renewed) void reply.header("set-cookie", dashboard.sessions.cookie(session.renewed, request.protocol === "https"));
          }
        }
        if (!principal) {
          return unauthorized(
            reply,
            access === "events"
              ? "send Authorization: Bearer <API key>, or ?access_token= from POST /jobs/{id}/events/token (for browsers)"
              : "send Authorization: Bearer <API key>",
          );
        }
        const needed = access === "events" ? "read" : access;
        if (!principal.scopes.has(needed)) {
          return sendProblem(reply, problem(403, "forbidden", `API key "${principal.id}" lacks the "${needed}" scope this route needs`));
        }
        principals.set(request, principal);
      });

      scope.addHook("preClose", async () => {
        // Open event streams would keep the server from closing.
        for (const s of [...streams]) s.close();
        ctx.watcher.close();
      });

      const routes: RouteSpec[] = [
        ...enqueueRoutes(ctx),
        ...jobRoutes(ctx),
        ...queueRoutes(ctx),
        ...eventRoutes(ctx),
        ...scheduleRoutes(ctx),
        ...(options.outbox ? outboxRoutes(options.outbox) : []),
      ];
      routes.push(
        {
          method: "GET",
          url: "/health",
          operationId: "health",
          summary: "Liveness and store reachability",
          tags: ["meta"],
          access: "public",
          schema: {},
          responses: {
            200: { description: "Up, and the store answers.", schema: HEALTH_RESPONSE },
            503: problemResponse("The store does not answer."),
          },
          handler: async (_request, reply) => {
            try {
              await options.backend.now();
            } catch {
              throw new HttpProblem(503, "store-unavailable", "the job store does not answer; see the server log", { headers: { "retry-after": "5" } });
            }
            return reply.header("cache-control", "no-store").send({ status: "ok" });
          },
        },
        {
          method: "GET",
          url: "/openapi.json",
          operationId: "openapi",
          summary: "This document",
          tags: ["meta"],
          access: "public",
          schema: {},
          responses: { 200: { description: "OpenAPI 3.1." } },
          handler: async (_request, reply) => reply.send(openapi),
        },
      );
      const openapi = buildOpenApi(routes, ctx.basePath, options.openapi, payloadJsonSchemas(ctx.jobs));
      // The 405 check must match exactly the paths the router matches: a path it routes nowhere
      // (a trailing "/", unless the instance ignores those) is a 404, not a 405 naming the very
      // method that was used.
      const config = scope.initialConfig;
      const trailingSlash = (config.routerOptions?.ignoreTrailingSlash ?? config.ignoreTrailingSlash) === true ? "/?" : "";
      const routePatterns = routes.map((route) => ({
        method: route.method,
        head: route.method === "GET" && !LONG_LIVED.has(route.operationId),
        pattern: new RegExp(
          `^${escapeRegExp(scope.prefix)}${route.url
            .split("/")
            .map((part) => (part.startsWith(":") ? "[^/]+" : escapeRegExp(part)))
            .join("/")}${trailingSlash}$`,
        ),
      }));
      allowedMethods = (path: string): string[] => {
        const methods = new Set<string>();
        for (const r of routePatterns) {
          if (!r.pattern.test(path)) continue;
          methods.add(r.method);
          if (r.head) methods.add("HEAD");
        }
        if (methods.size > 0 && cors) methods.add("OPTIONS");
        return [...methods];
      };

      const docsAssets = options.apiDocs === false ? null : loadDocsAssets(ctx.basePath);
      if (docsAssets) {
        const page = docsPage(ctx.basePath);
        scope.get("/docs", { config: { conveyorAccess: "public" } }, async (_request, reply) =>
          reply.type("text/html; charset=utf-8").header("content-security-policy", DOCS_CSP).header("cache-control", "no-cache").send(page),
        );
        scope.get("/docs/:file", { config: { conveyorAccess: "public" } }, async (request, reply) => {
          const asset = docsAssets.get((request.params as { file: string }).file);
          if (!asset) throw new HttpProblem(404, "no-route", `no such file of the API docs; open ${ctx.basePath}/docs`);
          const gzip = /\bgzip\b/.test(String(request.headers["accept-encoding"] ?? ""));
          void reply.type(asset.type).header("cache-control", "public, max-age=3600").header("vary", "Accept-Encoding");
          return gzip ? reply.header("content-encoding", "gzip").send(asset.gzip) : reply.send(asset.body);
        });
      }

      for (const route of routes) {
        scope.route({
          method: route.method,
          url: route.url,
          schema: route.schema,
          bodyLimit: route.bodyLimit ?? OTHER_BODY_LIMIT,
          config: { conveyorAccess: route.access, conveyorBodyTooLargeAdvice: route.bodyTooLargeAdvice },
          // The events stream is long-lived; a HEAD request must not open one.
          exposeHeadRoute: !LONG_LIVED.has(route.operationId),
          logSerializers: { req: safeRequestSerializer },
          handler: (request, reply) => route.handler(request, reply),
        });
      }
    },
    { prefix: basePath },
  );
};

/**
 * The error handler of the API (and of `createServer`'s root): every error becomes a problem
 * document; 4xx keep their status; anything else is logged (without headers or tokens) and
 * answered 500, or 503 when the store is busy or unreachable.
 */
export function answerError(error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  if (error instanceof HttpProblem) return sendProblem(reply, error.toJSON(), error.headers);
  if (error instanceof RequestValidationError) {
    return sendProblem(reply, problem(400, "invalid-request", error.message, [...error.issues]));
  }
  if (error instanceof InvalidInputError) return sendProblem(reply, problem(422, "invalid-input", error.message));
  if (error instanceof AmbiguousJobIdError) {
    return sendProblem(
      reply,
      problem(
        409,
        "ambiguous-job-id",
        `job id ${JSON.stringify(error.jobId)} exists in several queues on this store; add ?queue=<the job's queue> (the job's links carry it)`,
      ),
    );
  }
  if (error instanceof UnsupportedByStoreError) {
    return sendProblem(reply, problem(501, "not-supported-by-store", error.message, undefined, { capability: error.capability }));
  }
  const status = typeof error.statusCode === "number" ? error.statusCode : 500;
  if (status >= 400 && status < 500) {
    switch (error.code) {
      case "FST_ERR_CTP_BODY_TOO_LARGE": {
        const { bodyLimit, config, url } = request.routeOptions;
        const advice = (config as { conveyorBodyTooLargeAdvice?: string } | undefined)?.conveyorBodyTooLargeAdvice;
        return sendProblem(
          reply,
          problem(
            413,
            "body-too-large",
            `the body is larger than the limit of ${url === undefined ? "this route" : `${request.method} ${url}`}, ${bodyLimit} bytes; ${advice ?? "send only what the route takes"}`,
          ),
        );
      }
      case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
        return sendProblem(reply, problem(415, "unsupported-media-type", "send the body as JSON with Content-Type: application/json"));
      case "FST_ERR_CTP_EMPTY_JSON_BODY":
        return sendProblem(reply, problem(400, "invalid-json", "the body is empty; send a JSON object"));
      case "FST_ERR_CTP_INVALID_JSON_BODY":
        return sendProblem(reply, problem(400, "invalid-json", `the body is not valid JSON: ${error.message}`));
    }
    if (error instanceof SyntaxError) return sendProblem(reply, problem(400, "invalid-json", `the body is not valid JSON: ${error.message}`));
    return sendProblem(reply, problem(status, "bad-request", error.message));
  }
  // Log the error, never the request's headers or tokens.
  request.log.error(
    { err: { name: error.name, message: error.message, stack: error.stack }, reqId: request.id, url: redactUrl(request.url) },
    "conveyor: request failed",
  );
  if (error instanceof StoreUnavailableError) {
    return sendProblem(reply, problem(503, "store-unavailable", "the job store is busy or unreachable; retry shortly"), { "retry-after": "1" });
  }
  return sendProblem(reply, problem(500, "internal", `the server failed to handle the request (request id ${request.id}); its log has the details`));
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

function unauthorized(reply: FastifyReply, detail: string): FastifyReply {
  return sendProblem(reply, problem(401, "unauthorized", detail), { "www-authenticate": 'Bearer realm="conveyor"' });
}
