/**
 * The web dashboard's routes, registered by `conveyorHttp` when its `dashboard` option is set.
 *
 * - `GET <path>/`: the page (an HTML shell; the app is the bundled script).
 * - `GET <path>/assets/<file>`: the bundle.
 * - `POST <path>/api/login`, `POST <path>/api/logout`, `GET <path>/api/session`: sessions (see
 *   sessions.ts).
 * - `GET <path>/api/live`: the page's Server-Sent Events stream (see live.ts).
 *
 * Everything else — listings, dead letters, replay, cancel, pause — the page does through the
 * HTTP API itself, which accepts the session cookie (and checks its CSRF token) exactly like a
 * key with the same scopes: the dashboard has no powers of its own.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Backend } from "../backend/contract.js";
import { InvalidInputError } from "../core/errors.js";
import { ANONYMOUS, presentedKey, type KeyRing, type Principal } from "../http/auth.js";
import { problem, sendProblem } from "../http/problem.js";
import { compileValidator } from "../http/schema.js";
import { NAME_SCHEMA, STORED_JOB_ID_SCHEMA } from "../http/schemas.js";
import { StringEnum, Type, type Static } from "../http/typed-schema.js";
import { toDeadJobView, toJobView, toQueueView } from "../http/views.js";
import { loadAssets, type Asset } from "./assets.js";
import { MetricsHistory } from "./history.js";
import { LiveHub } from "./live.js";
import { StoreHistory, type StoreHistoryOptions } from "./store-history.js";
import { EventTail } from "../producer/event-tail.js";
import type { QueueEvent } from "../core/queue-events.js";
import { crossSiteReason, DashboardSessions, SESSION_SECRET_ENV, type SessionOptions } from "./sessions.js";
import { shown } from "../core/checks.js";

export interface DashboardOptions {
  /** Where the dashboard is served. Default "/ui". */
  path?: string;
  /**
   * Per-minute history for the charts from workers in this process (`history.attach(worker)`).
   * Used only where the store cannot tell (`capabilities.finishedWindows` false, i.e. RabbitMQ)
   * or `storeHistory` is false. Default: an empty one.
   */
  history?: MetricsHistory;
  /**
   * Charts read from the store: every job the fleet finished, whichever process ran it (see
   * store-history.ts for the sampling and caching). `false` charts only `history`. Default: on
   * where `capabilities.finishedWindows`, with the defaults of {@link StoreHistoryOptions}.
   */
  storeHistory?: StoreHistoryOptions | false;
  /** Session secret and lifetimes (see docs/dashboard.md). */
  sessions?: SessionOptions;
  /** How often a page's live stream reads the store, ms. Default 1 000. */
  refreshMs?: number;
  /** Live streams open at once on this server. Default 500. */
  maxStreams?: number;
  /**
   * The transactional outbox's relay status for the Relay view: how many events wait and how old
   * the oldest is (an `OutboxSource`'s `lag()`), and how many were set aside. Give it together
   * with the HTTP plugin's `outbox` option (whose routes list, replay and delete the set-aside
   * events). `conveyor serve --outbox` sets both. Default: no Relay view.
   */
  relay?: RelayStatusSource;
  /**
   * Sections that other parts of Conveyor provide once present; their navigation entries stay
   * hidden until then. Default none.
   */
  sections?: { schedules?: boolean; relay?: boolean };
}

/** What the Relay view reads (see `DashboardOptions.relay`). */
export interface RelayStatusSource {
  /** Events waiting in the outbox (null when unknown) and the age of the oldest in ms (null when none waits). */
  lag(): Promise<{ backlog: number | null; oldestUnpublishedAgeMs: number | null; slotLagBytes?: number | null }>;
  /** How many events a target refused for good and were set aside. */
  deadCount(): Promise<number>;
}

export interface DashboardContext {
  backend: Backend;
  keyring: KeyRing | null;
  /** The API's full base path, e.g. "/v1". */
  apiBasePath: string;
  options: DashboardOptions;
  /** The API's error handler, so the dashboard's errors are problem documents too. */
  answerError: (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => FastifyReply;
}

const SECURITY_HEADERS = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
};

function normalizePath(value: string | undefined): string {
  const p = value ?? "/ui";
  if (!/^\/[A-Za-z0-9._~\-/]*[^/]$/.test(p))
    throw new InvalidInputError(`dashboard.path must start with "/" and not end with one, e.g. "/ui"; got ${shown(value)}`);
  return p;
}

function unauthorized(reply: FastifyReply, detail: string): FastifyReply {
  return sendProblem(reply, problem(401, "unauthorized", detail));
}

const LOGIN_BODY = Type.Object({ key: Type.String({ minLength: 1, maxLength: 512 }) }, { additionalProperties: false });
type LoginBody = Static<typeof LOGIN_BODY>;

/** `GET /api/live`: which view to stream (`queue` needs `queue=`, `job` needs `id=`). */
const LIVE_QUERY = Type.Object(
  {
    topic: StringEnum(["overview", "queue", "job", "relay"] as const),
    queue: Type.Optional(NAME_SCHEMA),
    id: Type.Optional(STORED_JOB_ID_SCHEMA),
  },
  { additionalProperties: false },
);
type LiveQuery = Static<typeof LIVE_QUERY>;

/** Registers the dashboard under its path; returns the sessions the API's auth hook consults. */
export async function registerDashboard(fastify: FastifyInstance, ctx: DashboardContext): Promise<{ sessions: DashboardSessions; path: string }> {
  const path = normalizePath(ctx.options.path);
  const sessions = new DashboardSessions(ctx.keyring, ctx.options.sessions);
  if (ctx.keyring && sessions.ephemeralSecret) {
    fastify.log.warn(
      `conveyor dashboard: no session secret configured (dashboard.sessions.secret or ${SESSION_SECRET_ENV}); using a random one, so dashboard logins end when this process restarts and are refused by other instances`,
    );
  }
  const history = ctx.options.history ?? new MetricsHistory();
  const storeHistory =
    ctx.options.storeHistory === false || !ctx.backend.capabilities.finishedWindows ? null : new StoreHistory(ctx.backend, ctx.options.storeHistory);
  /** A queue's last `minutes` per-minute samples: from the store where it can tell, else this process's workers. */
  const seriesOf = async (queue: string, minutes?: number) => (storeHistory ? storeHistory.series(queue, minutes) : history.series(queue, minutes));
  const assets = loadAssets();

  await fastify.register(
    async (scope: FastifyInstance) => {
      const onLiveError = (error: unknown) =>
        scope.log.warn({ err: error instanceof Error ? error.message : String(error) }, "conveyor dashboard: reading a live view failed; retrying");
      const hub = new LiveHub(
        { intervalMs: ctx.options.refreshMs ?? 1_000, idleRefreshMs: 15_000, heartbeatMs: 15_000, maxStreams: ctx.options.maxStreams ?? 500 },
        onLiveError,
        EventTail.of(ctx.backend, { onError: onLiveError }),
      );
      scope.setValidatorCompiler(compileValidator);
      scope.setErrorHandler(ctx.answerError);
      scope.addHook("preClose", async () => hub.close());
      scope.addHook("onSend", async (_request, reply) => {
        for (const [k, v] of Object.entries(SECURITY_HEADERS)) if (!reply.hasHeader(k)) void reply.header(k, v);
      });

      /** The principal of a dashboard request: no auth, the session cookie, or a key. */
      function principalOf(request: FastifyRequest): Principal | null {
        if (!ctx.keyring) return ANONYMOUS;
        const session = sessions.find(request);
        if (session) return session.principal;
        const presented = presentedKey(request.headers);
        return presented === null || "invalid" in presented ? null : ctx.keyring.authenticate(presented.key);
      }

      const page = (reply: FastifyReply) => {
        if (!assets) {
          return sendProblem(
            reply,
            problem(
              503,
              "dashboard-not-built",
              "the dashboard's files are missing from this installation; run npm run build (it bundles src/dashboard/client)",
            ),
          );
        }
        const v = (f: string) => `assets/${f}?v=${(assets.get(f) as Asset).hash}`;
        const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Conveyor</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${v("app.css")}">
<script type="module" src="${v("app.js")}"></script>
</head>
<body><div id="app"><p class="boot">Loading the dashboard…</p></div><noscript>The Conveyor dashboard needs JavaScript.</noscript></body>
</html>`;
        return reply.header("content-type", "text/html; charset=utf-8").header("cache-control", "no-store").send(html);
      };

      // The page's relative asset URLs need the trailing slash.
      scope.get("/", { prefixTrailingSlash: "slash" }, async (_request, reply) => page(reply));
      scope.get("", { prefixTrailingSlash: "no-slash" }, async (_request, reply) => reply.redirect(`${scope.prefix}/`, 302));

      scope.get("/assets/:file", async (request, reply) => {
        const { file } = request.params as { file: string };
        const asset = assets?.get(file);
        if (!asset) return sendProblem(reply, problem(404, "no-asset", `the dashboard has no file ${JSON.stringify(file.slice(0, 100))}`));
        const etag = `"${asset.hash}"`;
        void reply.header("content-type", asset.type).header("etag", etag).header("vary", "Accept-Encoding");
        // Versioned URLs (?v=hash) never change; the bare name is revalidated.
        void reply.header("cache-control", (request.query as { v?: string }).v === asset.hash ? "public, max-age=31536000, immutable" : "no-cache");
        if (request.headers["if-none-match"] === etag) return reply.code(304).send();
        if (/\bgzip\b/.test(String(request.headers["accept-encoding"] ?? ""))) return reply.header("content-encoding", "gzip").send(asset.gzip);
        return reply.send(asset.body);
      });

      scope.get("/api/session", async (request, reply) => {
        const session = ctx.keyring ? sessions.find(request) : null;
        const principal = ctx.keyring ? (session?.principal ?? null) : ANONYMOUS;
        const renewed = session ? sessions.renew(session) : null;
        if (renewed) void reply.header("set-cookie", sessions.cookie(renewed, request.protocol === "https"));
        return reply.header("cache-control", "no-store").send({
          authRequired: ctx.keyring !== null,
          principal: principal ? { id: principal.id, scopes: [...principal.scopes].sort() } : null,
          csrfToken: session?.csrfToken ?? null,
          apiBasePath: ctx.apiBasePath,
          historyAttached: storeHistory !== null || history.attached > 0,
          historySource: storeHistory ? "store" : history.attached > 0 ? "workers" : "none",
          sections: {
            // Schedules live in the store: shown wherever it keeps them, unless turned off.
            schedules: ctx.options.sections?.schedules ?? ctx.backend.capabilities.schedules,
            relay: ctx.options.sections?.relay ?? ctx.options.relay !== undefined,
          },
        });
      });

      scope.post(
        "/api/login",
        {
          bodyLimit: 4096,
          schema: {
            body: LOGIN_BODY,
          },
        },
        async (request, reply) => {
          const forged = crossSiteReason(request);
          if (forged) return sendProblem(reply, problem(403, "cross-site", `refused: ${forged}`));
          if (!ctx.keyring) return sendProblem(reply, problem(409, "no-auth", "this server runs without API keys; there is nothing to log in to"));
          const principal = ctx.keyring.authenticate((request.body as LoginBody).key.trim());
          if (!principal) return unauthorized(reply, "that API key is not valid; check it, or ask for a new one (conveyor serve --new-key)");
          const session = sessions.create(principal);
          return reply
            .header("set-cookie", sessions.cookie(session, request.protocol === "https"))
            .header("cache-control", "no-store")
            .send({ principal: { id: principal.id, scopes: [...principal.scopes].sort() }, csrfToken: session.csrfToken });
        },
      );

      scope.post("/api/logout", async (request, reply) => {
        const check = sessions.check(request);
        if (check.kind === "refused" && check.status === 403) return sendProblem(reply, problem(403, "forbidden", check.detail));
        // The token is self-contained: logging out removes it from the browser and this process
        // refuses it from now on; other instances accept a copy until it expires (removing the
        // key or changing the secret ends every copy everywhere).
        const session = sessions.find(request);
        if (session) sessions.end(session);
        return reply
          .header("set-cookie", sessions.cookie(null, request.protocol === "https"))
          .code(204)
          .send();
      });

      scope.get(
        "/api/live",
        {
          schema: {
            querystring: LIVE_QUERY,
          },
        },
        async (request, reply) => {
          const principal = principalOf(request);
          if (!principal) return unauthorized(reply, "log in to the dashboard, or send Authorization: Bearer <API key>");
          if (!principal.scopes.has("read")) return sendProblem(reply, problem(403, "forbidden", `API key "${principal.id}" lacks the "read" scope`));
          const q = request.query as LiveQuery;
          const admin = principal.scopes.has("admin");
          let key: string;
          let read: () => Promise<unknown>;
          let concerns: ((event: QueueEvent) => boolean) | null = () => true;
          if (q.topic === "overview") {
            key = "overview";
            read = async () => {
              const stats = await ctx.backend.stats();
              return { queues: await Promise.all(stats.map(async (s) => ({ ...toQueueView(s), history: await seriesOf(s.queue, 60) }))) };
            };
          } else if (q.topic === "relay") {
            const relay = ctx.options.relay;
            if (!relay)
              return sendProblem(
                reply,
                problem(404, "no-relay", "this server was not given an outbox to report on (conveyor serve --outbox, or the dashboard's relay option)"),
              );
            key = "relay";
            // The outbox is not the job store: no job event says it changed, so it is polled.
            concerns = null;
            read = async () => {
              const [lag, dead] = await Promise.all([relay.lag(), relay.deadCount()]);
              return { backlog: lag.backlog, oldestUnpublishedAgeMs: lag.oldestUnpublishedAgeMs, slotLagBytes: lag.slotLagBytes ?? null, dead };
            };
          } else if (q.topic === "queue") {
            if (!q.queue) return sendProblem(reply, problem(400, "invalid-request", "topic=queue needs queue=<name>"));
            const name = q.queue;
            key = `queue:${name}`;
            concerns = (event) => event.queue === name;
            read = async () => {
              const [stats] = await ctx.backend.stats(name);
              return { queue: toQueueView(stats!), history: await seriesOf(name, 60) };
            };
          } else {
            if (!q.id) return sendProblem(reply, problem(400, "invalid-request", "topic=job needs id=<job id>"));
            const id = q.id;
            // What a principal may see differs (payloads and stacks are admin-only): one topic per level.
            key = `job:${admin ? "admin" : "read"}:${id}`;
            concerns = (event) => event.jobId === id;
            read = async () => {
              const job = await ctx.backend.get(id);
              if (!job) return { job: null };
              const view = admin ? toDeadJobView(job, ctx.apiBasePath) : toJobView(job, ctx.apiBasePath);
              const lease = job.lease ? { token: job.lease.token, expiresAt: new Date(job.lease.expiresAt).toISOString(), worker: job.lease.worker } : null;
              return { job: { ...view, lease } };
            };
          }
          if (hub.full)
            return sendProblem(
              reply,
              problem(503, "too-many-streams", "this server serves as many live dashboard pages as it allows; close some, or retry later"),
              { "retry-after": "5" },
            );
          const headers: Record<string, string> = { ...SECURITY_HEADERS };
          reply.hijack();
          hub.open(request.raw, reply.raw, key, read, headers, concerns);
          return reply;
        },
      );
    },
    { prefix: path },
  );
  return { sessions, path };
}
