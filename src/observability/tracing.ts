/**
 * OpenTelemetry tracing for Conveyor (needs `@opentelemetry/api@1`, an optional peer dependency;
 * spans go wherever the SDK you register sends them — with none registered, the API is a no-op
 * and so is this).
 *
 * - A PRODUCER span per job at enqueue ("send <queue>"), a child of the caller's active context;
 *   an HTTP enqueue without an active span continues the request's `traceparent` header.
 * - The producer span's context is stored with the job as a W3C `traceparent` (and `tracestate`)
 *   in its metadata (`job.meta.traceparent`), on every backend alike.
 * - A CONSUMER span per attempt ("process <queue>"), a child of that stored context and linked
 *   to it, active while the handler runs: the handler's own spans (HTTP calls, queries) nest
 *   under it, and jobs it enqueues continue the same trace.
 * - Webhook deliveries carry the finished job's context, and send `traceparent` to the receiver.
 *
 * Attributes follow OpenTelemetry's messaging semantic conventions (`messaging.*`).
 */
import { createRequire } from "node:module";
import type { Attributes, Context, Span, SpanContext, Tracer } from "@opentelemetry/api";
import type { EnqueueResult } from "../backend/contract.js";
import type { JobRecord, JobSpec } from "../core/job.js";
import type { JobTelemetry } from "../core/telemetry.js";
import { ConveyorError } from "../core/errors.js";

/** The `@opentelemetry/api` module. */
type OpenTelemetryApi = typeof import("@opentelemetry/api");

/**
 * `@opentelemetry/api` is loaded on first use, not imported by this module: `conveyor-jobs/metrics`
 * re-exports this file, and a user with only prom-client installed must be able to import
 * ConveyorMetrics from it. Loaded with require (the API's CommonJS build): synchronous, so
 * `new ConveyorTracing()` stays a plain constructor. The API keeps its registered providers,
 * context manager and propagator on a global shared by its builds, so one registered through the
 * ESM build (`import { trace } from "@opentelemetry/api"`) is the one this sees.
 */
const requireHere = createRequire(import.meta.url);
let openTelemetry: OpenTelemetryApi | null | undefined;

/** The OpenTelemetry API, or null when `@opentelemetry/api` is not installed. */
export function loadOpenTelemetryApi(): OpenTelemetryApi | null {
  if (openTelemetry === undefined) {
    try {
      openTelemetry = requireHere("@opentelemetry/api") as OpenTelemetryApi;
    } catch (error) {
      const missing = (error as { code?: unknown }).code === "MODULE_NOT_FOUND" && String(error).includes("'@opentelemetry/api'");
      if (!missing) throw error;
      openTelemetry = null;
    }
  }
  return openTelemetry;
}

function openTelemetryApi(): OpenTelemetryApi {
  const api = loadOpenTelemetryApi();
  if (!api) throw new ConveyorError("ConveyorTracing needs @opentelemetry/api@1, an optional peer dependency: npm install @opentelemetry/api@1");
  return api;
}

export interface TracingOptions {
  /**
   * Tracer to use. Default: `trace.getTracer("conveyor-jobs")` from the global provider (a proxy
   * that follows a provider registered later, too).
   */
  tracer?: Tracer;
}

const TRACER_NAME = "conveyor-jobs";
const MESSAGING_SYSTEM = "conveyor";
/** W3C Trace Context's `sampled` flag (TraceFlags.SAMPLED), the only flag a traceparent carries over. */
const SAMPLED_FLAG = 0x01;
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** `traceparent` of a span context (W3C Trace Context, version 00). */
export function formatTraceparent(sc: SpanContext): string {
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}

/** The remote span context a stored `traceparent` names, or null when absent or malformed. */
export function parseTraceparent(value: unknown, tracestate?: unknown): SpanContext | null {
  if (typeof value !== "string") return null;
  const m = TRACEPARENT.exec(value.trim());
  if (!m || /^0+$/.test(m[1]!) || /^0+$/.test(m[2]!)) return null;
  const sc: SpanContext = { traceId: m[1]!, spanId: m[2]!, traceFlags: parseInt(m[3]!, 16) & SAMPLED_FLAG, isRemote: true };
  if (typeof tracestate === "string" && tracestate.length > 0) sc.traceState = openTelemetryApi().createTraceState(tracestate);
  return sc;
}

/**
 * Conveyor's OpenTelemetry instrumentation; give it as `telemetry` to Queue, Worker, conveyorHttp
 * and WebhookDispatcher. The constructor throws a ConveyorError naming the package to install when
 * `@opentelemetry/api` is missing.
 */
export class ConveyorTracing implements JobTelemetry {
  private readonly tracer: Tracer;
  private readonly api: OpenTelemetryApi;

  constructor(options: TracingOptions = {}) {
    this.api = openTelemetryApi();
    this.tracer = options.tracer ?? this.api.trace.getTracer(TRACER_NAME);
  }

  async enqueue(specs: readonly JobSpec[], store: (specs: readonly JobSpec[]) => Promise<EnqueueResult[]>): Promise<EnqueueResult[]> {
    const { context, SpanKind } = this.api;
    const tracer = this.tracer;
    const parent = context.active();
    const spans: Span[] = [];
    let recording = false;
    for (const spec of specs) {
      const span = tracer.startSpan(`send ${spec.queue}`, { kind: SpanKind.PRODUCER, attributes: producerAttributes(spec) }, parent);
      recording ||= span.isRecording();
      spans.push(span);
    }
    // No SDK (or not sampled): nothing to store, nothing to end but no-op spans.
    if (!recording) return store(specs);
    const traced = specs.map((spec, i) => withTraceContext(spec, spans[i]!.spanContext()));
    try {
      const results = await store(traced);
      results.forEach((r, i) => {
        spans[i]?.setAttribute("conveyor.job.duplicate", r.duplicate);
        if (r.id !== specs[i]?.id) spans[i]?.setAttribute("messaging.message.id", r.id);
      });
      return results;
    } catch (error) {
      for (const span of spans) failSpan(this.api, span, error);
      throw error;
    } finally {
      for (const span of spans) span.end();
    }
  }

  async attempt(job: JobRecord, run: () => Promise<unknown>): Promise<unknown> {
    const { context, ROOT_CONTEXT, SpanKind, trace } = this.api;
    const tracer = this.tracer;
    const producer = parseTraceparent(job.meta?.traceparent, job.meta?.tracestate);
    const parent: Context = producer ? trace.setSpanContext(ROOT_CONTEXT, producer) : context.active();
    const span = tracer.startSpan(
      `process ${job.queue}`,
      { kind: SpanKind.CONSUMER, attributes: consumerAttributes(job), ...(producer ? { links: [{ context: producer }] } : {}) },
      parent,
    );
    if (!span.isRecording()) return run();
    try {
      return await context.with(trace.setSpan(parent, span), run);
    } catch (error) {
      failSpan(this.api, span, error);
      throw error;
    } finally {
      span.end();
    }
  }

  request(headers: Readonly<Record<string, string | string[] | undefined>>, next: () => void): void {
    const { context, propagation, trace } = this.api;
    // An HTTP instrumentation already made the request's span the active one: keep it.
    if (trace.getSpan(context.active())) return next();
    const extracted = propagation.extract(context.active(), headers);
    if (!trace.getSpan(extracted)) return next();
    context.with(extracted, next);
  }

  outgoing(headers: Record<string, string>): void {
    const { context, trace } = this.api;
    const span = trace.getSpan(context.active());
    if (!span || !span.isRecording()) return;
    const sc = span.spanContext();
    headers.traceparent = formatTraceparent(sc);
    const state = sc.traceState?.serialize();
    if (state) headers.tracestate = state;
  }
}

/** The messaging semantic-convention attributes both span kinds carry. */
function messagingAttributes(operation: "send" | "process", queue: string, jobId: string, jobName: string): Attributes {
  return {
    "messaging.system": MESSAGING_SYSTEM,
    "messaging.operation.type": operation,
    "messaging.operation.name": operation === "send" ? "enqueue" : "process",
    "messaging.destination.name": queue,
    "messaging.message.id": jobId,
    "conveyor.job.name": jobName,
  };
}

function producerAttributes(spec: JobSpec): Attributes {
  return { ...messagingAttributes("send", spec.queue, spec.id, spec.name), "messaging.message.body.size": Buffer.byteLength(spec.payload, "utf8") };
}

function consumerAttributes(job: JobRecord): Attributes {
  return { ...messagingAttributes("process", job.queue, job.id, job.name), "conveyor.job.attempt": job.attempt, "conveyor.job.max_attempts": job.maxAttempts };
}

function failSpan(api: OpenTelemetryApi, span: Span, error: unknown): void {
  const e = error instanceof Error ? error : new Error(String(error));
  span.recordException(e);
  span.setAttribute("error.type", e.name || "Error");
  span.setStatus({ code: api.SpanStatusCode.ERROR, message: e.message });
}

/** The spec with the producer span's context in its metadata (`traceparent`, `tracestate`). */
function withTraceContext(spec: JobSpec, sc: SpanContext): JobSpec {
  const meta = spec.meta === null ? {} : (JSON.parse(spec.meta) as Record<string, unknown>);
  meta.traceparent = formatTraceparent(sc);
  const state = sc.traceState?.serialize();
  if (state) meta.tracestate = state;
  else delete meta.tracestate;
  return { ...spec, meta: JSON.stringify(meta) };
}
