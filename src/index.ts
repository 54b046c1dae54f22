/**
 * Conveyor: durable background jobs for TypeScript.
 *
 * Glossary
 * - job: a named unit of work with a small JSON payload, stored until it finishes.
 * - queue: a named lane of jobs; workers choose the queues they take from.
 * - handler: the function that runs a job; its return value is the job's result.
 * - worker: claims jobs, runs handlers with a concurrency limit, settles the outcome.
 * - lease: a worker's time-limited claim on a job, renewed by heartbeats and identified by a
 *   fencing token; an acknowledgement under a stale token is refused.
 * - backend: the store (SQLite, PostgreSQL, Redis) behind one contract.
 * - dead: the dead-letter state: attempts exhausted or an unrecoverable error; replayable.
 */
export { Queue, type QueueOptions, type AddOptions, type AddResult, type BulkJob, type FlowJob, type FlowAdded } from "./producer/queue.js";
export { Worker, type WorkerOptions, type Handlers, type MaintenanceOptions, type CloseOptions, type CloseResult } from "./runtime/worker.js";
export { installShutdownSignals, type Closeable, type SignalOptions } from "./runtime/shutdown.js";
export { Maintenance, type MaintenanceSettings } from "./maintenance/maintenance.js";
export { Scheduler, fireDueSchedules, type SchedulerOptions, type SchedulerPass, type FiredTick, type ScheduleStore } from "./maintenance/scheduler.js";
export { tickMetaOf } from "./core/schedule.js";
export type {
  ScheduleOptions,
  ScheduleInfo,
  ScheduleDefinition,
  MisfireOption,
  MisfirePolicy,
  Misfire,
  ScheduleJobOptions,
  TickMeta,
} from "./core/schedule.js";
export type { RepeatOptions } from "./producer/queue.js";
export {
  defineJob,
  type Job,
  type JobContext,
  type Handler,
  type BoundHandler,
  type JobDefinition,
  type PayloadSchema,
  type PayloadOf,
  type SchemaResult,
  type SchemaIssue,
  type TypedJobRecord,
  type DefineJobOptions,
  type HandlerSettings,
} from "./core/define.js";
export * from "./core/errors.js";
export type { WorkerEvents } from "./core/events.js";
export { combineTelemetry, type JobTelemetry } from "./core/telemetry.js";
export type * from "./core/job.js";
export { JOB_STATES, TERMINAL_STATES } from "./core/job.js";
export type { Json } from "./core/json.js";
export { consoleLogger, silentLogger, type Logger } from "./core/logger.js";
export { backoffDelay, decideRetry, DEFAULT_BACKOFF, type BackoffFunction, type RetryDecision } from "./core/retry.js";
export type { JobOptions, BackoffOption, RetentionOption, JobDefaults, DedupOption } from "./core/spec.js";
export { systemClock, FakeClock, type Clock } from "./core/clock.js";
export type * from "./backend/contract.js";
export { JOB_LOG_MAX_LINES, JOB_LOG_MAX_LINE_LENGTH, type JobLogLine } from "./core/job-log.js";
export { QUEUE_EVENT_TYPES, type QueueEvent, type QueueEventType, type QueueEventFilter, type EventPrunePolicy } from "./core/queue-events.js";
export { followEvents, type FollowEventsOptions } from "./producer/events.js";
export { normalizeQueueLimits, type QueueLimits, type RateLimit, type QueueFlow, type StoredQueueLimits } from "./core/flow.js";
