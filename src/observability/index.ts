/**
 * `conveyor-jobs/metrics`: Prometheus metrics (needs `prom-client@15`) and OpenTelemetry tracing
 * (needs `@opentelemetry/api@1`), both optional peer dependencies, fed by the worker's event
 * stream and the `telemetry` hooks. Importing this module needs prom-client only: tracing loads
 * `@opentelemetry/api` when a ConveyorTracing is created. See docs/observability.md.
 */
export { ConveyorMetrics, DEFAULT_DURATION_BUCKETS, type MetricsOptions, type ObservableWorker, type StoreSnapshot } from "./metrics.js";
export { ConveyorTracing, formatTraceparent, parseTraceparent, type TracingOptions } from "./tracing.js";
export { desiredWorkers, type ScalingPolicy, type ScalingObservation } from "./autoscale.js";
export {
  MetricsEndpoints,
  metricsRequestListener,
  startMetricsServer,
  conveyorMetricsRoutes,
  type MetricsServer,
  type MetricsRoutesOptions,
  type ScalingEndpointOptions,
  type QueueScaling,
} from "./http.js";
export { combineTelemetry, type JobTelemetry } from "../core/telemetry.js";
