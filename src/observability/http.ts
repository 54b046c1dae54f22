/**
 * Serving the metrics: `/metrics` (Prometheus text format) and `/scaling` (per-queue backlog and
 * oldest age as JSON, shaped for KEDA's `metrics-api` scaler), as
 * - a plain Node request listener (`metricsRequestListener`), for any http server;
 * - a standalone listener on its own port (`startMetricsServer`), as `conveyor worker
 *   --metrics-port` and `conveyor serve --metrics-port` run it;
 * - a Fastify plugin (`conveyorMetricsRoutes`) to mount in your own app.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { FastifyPluginAsync } from "fastify";
import { desiredWorkers, type ScalingPolicy } from "./autoscale.js";
import type { ConveyorMetrics, StoreSnapshot } from "./metrics.js";

export interface ScalingEndpointOptions {
  /** With a policy, each queue's answer includes `desiredWorkers` (see autoscale.ts). Default none. */
  policy?: ScalingPolicy;
}

/** One queue as `/scaling` reports it. */
export interface QueueScaling {
  queue: string;
  /** Due jobs not started: waiting, including due scheduled ones. */
  backlog: number;
  /** Seconds; 0 when none waits. */
  oldestWaitingAgeSeconds: number;
  active: number;
  paused: boolean;
  /** Only with a scaling policy. */
  desiredWorkers?: number;
}

type Answer = { status: number; contentType: string; body: string };

/**
 * Answers `/metrics` and `/scaling` for one ConveyorMetrics; stateful only in the last
 * recommendation per queue, kept for at most the metrics' `maxLabelSets` queues (the least
 * recently evaluated is forgotten first and starts again from `minWorkers`): any key that may
 * enqueue can create queues. One store snapshot is one evaluation of the policy: asking again
 * while the snapshot is cached (`storeCacheMs`) returns the same answer, so how fast the fleet
 * steps out or in does not depend on how many clients poll `/scaling`, or how often.
 */
export class MetricsEndpoints {
  /** In order of evaluation, least recent first; at most the metrics' `maxLabelSets` entries. */
  private readonly lastRecommendation = new Map<string, { basedOn: StoreSnapshot; desiredWorkers: number }>();

  constructor(
    private readonly metrics: ConveyorMetrics,
    private readonly scaling: ScalingEndpointOptions = {},
  ) {}

  /** How many queues' last recommendations are kept now (at most the metrics' `maxLabelSets`). */
  get rememberedQueues(): number {
    return this.lastRecommendation.size;
  }

  async metricsText(): Promise<Answer> {
    return { status: 200, contentType: this.metrics.contentType, body: await this.metrics.metrics() };
  }

  /** `queue` null: every queue, `{ queues: [...] }`; else that queue's object (404 when unknown). */
  async scalingJson(queue: string | null): Promise<Answer> {
    let snapshot;
    try {
      snapshot = await this.metrics.storeSnapshot();
    } catch (error) {
      return json(503, { error: `the store's statistics are unavailable: ${(error as Error).message}` });
    }
    const all = snapshot.queues.map((q) => this.describe(snapshot, q.queue, q.counts.waiting, (q.oldestWaitingAgeMs ?? 0) / 1000, q.counts.active, q.paused));
    if (queue === null) return json(200, { queues: all });
    const one = all.find((q) => q.queue === queue);
    if (!one) return json(404, { error: `no queue named ${JSON.stringify(queue)} in the store; known: ${all.map((q) => q.queue).join(", ") || "(none)"}` });
    return json(200, one);
  }

  private describe(basedOn: StoreSnapshot, queue: string, backlog: number, oldestWaitingAgeSeconds: number, active: number, paused: boolean): QueueScaling {
    const out: QueueScaling = { queue, backlog, oldestWaitingAgeSeconds, active, paused };
    if (this.scaling.policy) {
      const last = this.lastRecommendation.get(queue);
      // This snapshot was evaluated already: the same answer, not one more step.
      if (last && last.basedOn === basedOn) {
        out.desiredWorkers = last.desiredWorkers;
        return out;
      }
      const current = last?.desiredWorkers ?? this.scaling.policy.minWorkers ?? 0;
      // A paused queue's backlog cannot be worked off: more workers would only idle.
      out.desiredWorkers = paused
        ? desiredWorkers(this.scaling.policy, { backlog: 0, oldestAgeSeconds: 0, activeJobs: active, currentWorkers: current })
        : desiredWorkers(this.scaling.policy, { backlog, oldestAgeSeconds: oldestWaitingAgeSeconds, activeJobs: active, currentWorkers: current });
      // Re-inserted so the map's order is least recently evaluated first.
      this.lastRecommendation.delete(queue);
      this.lastRecommendation.set(queue, { basedOn, desiredWorkers: out.desiredWorkers });
      for (const oldest of this.lastRecommendation.keys()) {
        if (this.lastRecommendation.size <= this.metrics.maxLabelSets) break;
        this.lastRecommendation.delete(oldest);
      }
    }
    return out;
  }

  /** Routes a GET by path; null for a path this does not serve. */
  async answer(method: string, url: string): Promise<Answer | null> {
    let parsed: URL;
    try {
      parsed = new URL(url, "http://localhost");
    } catch {
      // A request target no URL parser accepts (`GET //[`) is the client's error, not ours.
      return json(400, { error: `not a valid request path: ${JSON.stringify(url)}; this listener serves GET /metrics and GET /scaling[?queue=NAME]` });
    }
    if (parsed.pathname !== "/metrics" && parsed.pathname !== "/scaling") return null;
    if (method !== "GET" && method !== "HEAD") return json(405, { error: `${parsed.pathname} answers GET only` });
    if (parsed.pathname === "/metrics") return this.metricsText();
    const queues = parsed.searchParams.getAll("queue");
    if (queues.length > 1) return oneQueueOnly();
    return this.scalingJson(queues[0] ?? null);
  }
}

/** `?queue=a&queue=b` is ambiguous: an answer for one of them, or all, would be a guess. */
function oneQueueOnly(): Answer {
  return json(400, { error: "give at most one queue: /scaling?queue=NAME for one queue, or /scaling without queue for every queue" });
}

function json(status: number, value: unknown): Answer {
  return { status, contentType: "application/json; charset=utf-8", body: JSON.stringify(value) };
}

/** A Node request listener serving `/metrics` and `/scaling`; other paths get 404. */
export function metricsRequestListener(metrics: ConveyorMetrics, scaling: ScalingEndpointOptions = {}): (req: IncomingMessage, res: ServerResponse) => void {
  const endpoints = new MetricsEndpoints(metrics, scaling);
  return (req, res) => {
    void endpoints
      .answer(req.method ?? "GET", req.url ?? "/")
      .then((a) => a ?? json(404, { error: "not found; this listener serves GET /metrics and GET /scaling[?queue=NAME]" }))
      .catch((error: unknown) => json(500, { error: `collecting metrics failed: ${String(error)}` }))
      .then((a) => {
        res.writeHead(a.status, { "content-type": a.contentType, "cache-control": "no-store" });
        res.end(req.method === "HEAD" ? undefined : a.body);
      });
  };
}

export interface MetricsServer {
  readonly server: Server;
  /** host:port it listens on. */
  readonly address: AddressInfo;
  close(): Promise<void>;
}

/**
 * Listens on its own port for Prometheus and KEDA. `port`: the TCP port, 0 for any free one
 * (required); `host`: the interface, default "127.0.0.1" (give "0.0.0.0" in a pod); `scaling`:
 * the `/scaling` policy, default none (no `desiredWorkers`).
 */
export async function startMetricsServer(
  metrics: ConveyorMetrics,
  options: { port: number; host?: string; scaling?: ScalingEndpointOptions },
): Promise<MetricsServer> {
  const server = createServer(metricsRequestListener(metrics, options.scaling));
  // Prometheus scrapes keep connections alive; do not let them hold a shutdown.
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host ?? "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  return {
    server,
    address: server.address() as AddressInfo,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** Options of `conveyorMetricsRoutes`. */
export interface MetricsRoutesOptions {
  metrics: ConveyorMetrics;
  scaling?: ScalingEndpointOptions;
}

/**
 * Fastify plugin: `GET /metrics` and `GET /scaling` under the prefix you register it with, e.g.
 * `app.register(conveyorMetricsRoutes, { metrics, prefix: "/internal" })`. No authentication of
 * its own: register it behind yours, or serve it on a separate port.
 */
export const conveyorMetricsRoutes: FastifyPluginAsync<MetricsRoutesOptions> = async (app, options) => {
  const endpoints = new MetricsEndpoints(options.metrics, options.scaling);
  const send = (a: Answer, reply: import("fastify").FastifyReply) =>
    reply.code(a.status).header("content-type", a.contentType).header("cache-control", "no-store").send(a.body);
  app.get("/metrics", async (_request, reply) => send(await endpoints.metricsText(), reply));
  app.get("/scaling", async (request, reply) => {
    const q = (request.query as { queue?: unknown }).queue;
    if (Array.isArray(q)) return send(oneQueueOnly(), reply);
    return send(await endpoints.scalingJson(typeof q === "string" ? q : null), reply);
  });
};
