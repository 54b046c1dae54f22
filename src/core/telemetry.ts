import type { EnqueueResult } from "../backend/contract.js";
import type { JobRecord, JobSpec } from "./job.js";

/**
 * Hooks that let metrics and tracing (`conveyor-jobs/metrics`) see the two moments the worker's
 * event stream cannot: a job being enqueued (in the producer's context, before the store has it),
 * and a handler running (so a tracing span can be the active context of the handler's own calls).
 * Everything else is observed through the event stream.
 *
 * Given as `telemetry` to `Queue`, `Worker` and `conveyorHttp`. Every hook is optional; each one
 * that is present must call its continuation exactly once and return what it returns.
 */
export interface JobTelemetry {
  /**
   * Wraps storing a batch of jobs. May add metadata (trace context) to each spec; must call
   * `store` once with specs in the same order, and return its results.
   */
  enqueue?(specs: readonly JobSpec[], store: (specs: readonly JobSpec[]) => Promise<EnqueueResult[]>): Promise<EnqueueResult[]>;
  /** Wraps one attempt of a handler (`run` calls it); runs in the worker, around the handler only. */
  attempt?(job: JobRecord, run: () => Promise<unknown>): Promise<unknown>;
  /**
   * HTTP: runs the rest of a request (`next`) in the trace context its headers carry
   * (`traceparent`), so jobs it enqueues join the caller's trace.
   */
  request?(headers: Readonly<Record<string, string | string[] | undefined>>, next: () => void): void;
  /** Adds the current trace context (`traceparent`) to an outgoing request's headers (webhook deliveries). */
  outgoing?(headers: Record<string, string>): void;
}

/** Several telemetry hooks as one (metrics and tracing together); the first given is outermost. */
export function combineTelemetry(...parts: ReadonlyArray<JobTelemetry | null | undefined>): JobTelemetry {
  const list = parts.filter((p): p is JobTelemetry => p !== null && p !== undefined);
  const enqueuers = list.filter((p) => typeof p.enqueue === "function");
  const attempts = list.filter((p) => typeof p.attempt === "function");
  const requests = list.filter((p) => typeof p.request === "function");
  const outgoing = list.filter((p) => typeof p.outgoing === "function");
  const combined: JobTelemetry = {};
  if (enqueuers.length > 0) {
    combined.enqueue = (specs, store) =>
      enqueuers.reduceRight<(s: readonly JobSpec[]) => Promise<EnqueueResult[]>>((next, t) => (s) => t.enqueue!(s, next), store)(specs);
  }
  if (attempts.length > 0) {
    combined.attempt = (job, run) => attempts.reduceRight<() => Promise<unknown>>((next, t) => () => t.attempt!(job, next), run)();
  }
  if (requests.length > 0) {
    combined.request = (headers, next) => requests.reduceRight<() => void>((n, t) => () => t.request!(headers, n), next)();
  }
  if (outgoing.length > 0) combined.outgoing = (headers) => outgoing.forEach((t) => t.outgoing!(headers));
  return combined;
}
