/**
 * `conveyor-jobs/http`: the HTTP service of Conveyor (needs `fastify@5`, an optional peer dependency).
 *
 * - `conveyorHttp`: Fastify plugin to mount in your app; `createServer`: a standalone server.
 * - The 202 Accepted contract: enqueue answers at once with where to follow the job.
 * - Status, Server-Sent Events, cancel, queue operations, dead letters, OpenAPI at /v1/openapi.json.
 * - Webhooks signed in the Standard Webhooks format; `verifyWebhook` for receivers.
 */
export { conveyorHttp, type ConveyorHttpOptions, type CorsOptions, type EventStreamOptions } from "./plugin.js";
export { createServer, type ServerOptions } from "./app.js";
export { hashApiKey, generateApiKey, parseApiKeySpec, type ApiKeyConfig, type Scope, type Principal } from "./auth.js";
export {
  WebhookDispatcher,
  verifyWebhook,
  signWebhook,
  generateWebhookSecret,
  WebhookVerificationError,
  WebhookDeliveryError,
  DELIVERY_JOB_NAME,
  type WebhookOptions,
  type WebhookSubscription,
  type WebhookEvent,
  type WebhookEventType,
  type VerifyOptions,
  type DeliveryData,
} from "./webhooks.js";
export { SsrfGuard, SsrfError, deniedReason, type SsrfPolicy } from "./ssrf.js";
export { DurationEstimator, type EstimatorOptions } from "./estimate.js";
export { transitions, type Transition, type TransitionReason } from "./sse.js";
export type { JobView, DeadJobView, QueueView } from "./views.js";
export type { Problem, FieldError } from "./problem.js";
export { MetricsHistory, type HistoryOptions, type MinuteSample } from "../dashboard/history.js";
export type { DashboardOptions } from "../dashboard/plugin.js";
