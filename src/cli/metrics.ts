/**
 * The metrics flags shared by `conveyor worker` and `conveyor serve`: parsed and checked before
 * anything starts; prom-client (an optional peer) is loaded only when `--metrics-port` is given.
 */
import type { Backend } from "../backend/contract.js";
import type { ScalingPolicy } from "../observability/autoscale.js";
import type { MetricsServer } from "../observability/http.js";
import type { ConveyorMetrics } from "../observability/metrics.js";
import { intOption, positiveNumberOption, UsageError, type Options } from "./args.js";

export const METRICS_OPTIONS: Options = {
  "metrics-port": { type: "string" },
  "metrics-host": { type: "string" },
  "metrics-store-cache-ms": { type: "string" },
  "metrics-no-store": { type: "boolean" },
  "scale-target-age-seconds": { type: "string" },
  "scale-jobs-per-second": { type: "string" },
  "scale-min-workers": { type: "string" },
  "scale-max-workers": { type: "string" },
};

export const METRICS_HELP = `  --metrics-port N       serve Prometheus metrics at http://HOST:N/metrics and per-queue
                         backlog and oldest age for KEDA at /scaling?queue=NAME (needs prom-client)
  --metrics-host HOST    interface of the metrics listener (default 127.0.0.1; 0.0.0.0 in a pod)
  --metrics-store-cache-ms N
                         reuse one store statistics query for N ms across scrapes (default 5000,
                         at least 1000)
  --metrics-no-store     leave out the store gauges (depth, oldest age) and /scaling: per-process
                         figures only. For big fleets on PostgreSQL, where each scrape's query
                         scans the backlog: let one process (conveyor serve) report the store
  --scale-target-age-seconds S, --scale-jobs-per-second R
                         with both, /scaling also answers desiredWorkers: the oldest-age target
                         S (seconds) and the jobs one worker finishes per second R (measured)
  --scale-min-workers N, --scale-max-workers N
                         bounds of desiredWorkers (default 0 and 100)`;

export interface MetricsSettings {
  port: number;
  host: string;
  storeCacheMs: number | undefined;
  policy: ScalingPolicy | undefined;
  /** Export the store gauges (false with --metrics-no-store). */
  store: boolean;
}

/** Checks the metrics flags; null when `--metrics-port` is absent (and then no other may be given). */
export function metricsSettings(values: Record<string, unknown>): MetricsSettings | null {
  const port = intOption("metrics-port", values["metrics-port"], 0);
  const targetAgeSeconds = positiveNumberOption("scale-target-age-seconds", values["scale-target-age-seconds"]);
  const jobsPerSecondPerWorker = positiveNumberOption("scale-jobs-per-second", values["scale-jobs-per-second"]);
  const minWorkers = intOption("scale-min-workers", values["scale-min-workers"], 0);
  const maxWorkers = intOption("scale-max-workers", values["scale-max-workers"], 1);
  const storeCacheMs = intOption("metrics-store-cache-ms", values["metrics-store-cache-ms"], 1_000);
  const store = values["metrics-no-store"] !== true;
  if (port === undefined) {
    const stray = Object.keys(METRICS_OPTIONS).find((k) => k !== "metrics-port" && values[k] !== undefined);
    if (stray) throw new UsageError(`--${stray} needs --metrics-port`);
    return null;
  }
  if (!store && (storeCacheMs !== undefined || targetAgeSeconds !== undefined)) {
    throw new UsageError("--metrics-no-store leaves out the store's figures: --metrics-store-cache-ms and the --scale-* options need them");
  }
  if ((targetAgeSeconds === undefined) !== (jobsPerSecondPerWorker === undefined)) {
    throw new UsageError("--scale-target-age-seconds and --scale-jobs-per-second go together: desiredWorkers needs both");
  }
  if (targetAgeSeconds === undefined && (minWorkers !== undefined || maxWorkers !== undefined)) {
    throw new UsageError("--scale-min-workers and --scale-max-workers need --scale-target-age-seconds and --scale-jobs-per-second");
  }
  if (minWorkers !== undefined && maxWorkers !== undefined && minWorkers > maxWorkers) {
    throw new UsageError(`--scale-min-workers (${minWorkers}) is above --scale-max-workers (${maxWorkers})`);
  }
  const policy: ScalingPolicy | undefined =
    targetAgeSeconds === undefined || jobsPerSecondPerWorker === undefined
      ? undefined
      : { targetAgeSeconds, jobsPerSecondPerWorker, ...(minWorkers !== undefined ? { minWorkers } : {}), ...(maxWorkers !== undefined ? { maxWorkers } : {}) };
  const host = typeof values["metrics-host"] === "string" ? values["metrics-host"] : "127.0.0.1";
  return { port, host, storeCacheMs, policy, store };
}

/** Loads the observability module, or explains which peer dependency is missing. */
async function loadObservability(): Promise<typeof import("../observability/metrics.js") & typeof import("../observability/http.js")> {
  try {
    // Not the index: tracing's peer (@opentelemetry/api) is not needed to serve metrics.
    return { ...(await import("../observability/metrics.js")), ...(await import("../observability/http.js")) };
  } catch (error) {
    if ((error as { code?: unknown }).code === "ERR_MODULE_NOT_FOUND" && String(error).includes("prom-client")) {
      throw new UsageError("--metrics-port needs prom-client, an optional peer dependency: npm install prom-client@15");
    }
    throw error;
  }
}

/** The metrics of one CLI process, before its listener starts. */
export async function createMetrics(settings: MetricsSettings, backend: Backend): Promise<{ metrics: ConveyorMetrics; listen: () => Promise<MetricsServer> }> {
  const obs = await loadObservability();
  const metrics = new obs.ConveyorMetrics({
    ...(settings.store ? { backend } : {}),
    ...(settings.storeCacheMs !== undefined ? { storeCacheMs: settings.storeCacheMs } : {}),
  });
  const scaling = settings.policy ? { policy: settings.policy } : {};
  return { metrics, listen: () => obs.startMetricsServer(metrics, { port: settings.port, host: settings.host, scaling }) };
}

/**
 * OpenTelemetry tracing when `@opentelemetry/api` is installed, else null. Without an SDK
 * registered (e.g. `NODE_OPTIONS="--import ./otel.mjs"`) its spans are no-ops and cost nothing.
 */
export async function loadTracing(): Promise<import("../observability/tracing.js").ConveyorTracing | null> {
  const { ConveyorTracing, loadOpenTelemetryApi } = await import("../observability/tracing.js");
  // The module loads without the API (it requires it on first use): ask whether it is installed.
  return loadOpenTelemetryApi() ? new ConveyorTracing() : null;
}
