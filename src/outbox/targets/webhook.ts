/**
 * Target: an HTTP endpoint, as a Standard Webhooks delivery (the same signing and SSRF guard as
 * Conveyor's job webhooks, src/http/webhooks.ts and src/http/ssrf.ts). Body:
 * `{"type": topic, "timestamp": ISO time, "data": payload}`; headers `webhook-id` (the outbox id:
 * receivers dedup on it), `webhook-timestamp`, `webhook-signature`, and the event's own.
 *
 * 2xx: published. 408, 425, 429, 5xx, timeouts and network errors: retried. Any other status
 * (400, 404, 410, 413, 422, a 3xx: redirects are not followed): refused for good, set aside.
 * Events of one key are sent one after another; different keys up to `concurrency` at a time.
 */
import { InvalidInputError } from "../../core/errors.js";
import { guardedPost, SsrfGuard, type SsrfPolicy } from "../../http/ssrf.js";
import { signWebhook } from "../../http/webhooks.js";
import type { OutboxEvent } from "../event.js";
import { outboxHeaders, RejectedEventError, type PublishOutcome, type Target } from "../target.js";
import { shown } from "../../core/checks.js";

/** Options of {@link WebhookTarget}. */
export interface WebhookTargetOptions {
  /** The receiver's URL (https, or http to an allow-listed host). */
  url: string;
  /** Signing secret(s), `whsec_…` (generateWebhookSecret() makes one). The first signs; all are sent while rotating. */
  secrets: string | readonly string[];
  /** Hosts and ranges the SSRF guard lets through (internal receivers). Default none. */
  ssrf?: SsrfPolicy;
  /** Per request, in ms. Default 10000. */
  timeoutMs?: number;
  /** Requests in flight at once (one per key at a time). Default 8. */
  concurrency?: number;
}

const RETRYABLE = new Set([408, 425, 429]);

export class WebhookTarget implements Target {
  readonly description: string;
  private readonly url: string;
  private readonly secrets: readonly string[];
  private readonly guard: SsrfGuard;
  private readonly timeoutMs: number;
  private readonly concurrency: number;

  constructor(options: WebhookTargetOptions) {
    this.guard = new SsrfGuard(options.ssrf);
    // Refuses a URL the guard would never let through at construction, not event by event.
    const url = this.guard.checkUrl(options.url);
    this.url = options.url;
    this.secrets = typeof options.secrets === "string" ? [options.secrets] : [...(options.secrets ?? [])];
    // Checks the secrets' format now.
    signWebhook(this.secrets, { id: "probe", timestamp: 0, body: "" });
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.concurrency = options.concurrency ?? 8;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1)
      throw new InvalidInputError(`concurrency must be an integer >= 1; got ${shown(options.concurrency)}`);
    this.description = `webhook:${url.origin}${url.pathname}`;
  }

  async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
    const outcomes: PublishOutcome[] = new Array<PublishOutcome>(events.length);
    // One lane per key (keyless events each get their own), run `concurrency` lanes at a time.
    const lanes = new Map<string, number[]>();
    events.forEach((event, i) => {
      const lane = event.key === null ? `\0${i}` : event.key;
      const list = lanes.get(lane);
      if (list) list.push(i);
      else lanes.set(lane, [i]);
    });
    const queue = [...lanes.values()];
    const runLane = async (indexes: number[]) => {
      let failed: Error | null = null;
      for (const i of indexes) {
        if (failed !== null) {
          outcomes[i] = { status: "retry", error: failed };
          continue;
        }
        outcomes[i] = await this.send(events[i]!);
        if (outcomes[i].status === "retry") failed = (outcomes[i] as { error: Error }).error;
      }
    };
    const workers = Array.from({ length: Math.min(this.concurrency, queue.length) }, async () => {
      for (let lane = queue.shift(); lane !== undefined; lane = queue.shift()) await runLane(lane);
    });
    await Promise.all(workers);
    return outcomes;
  }

  private async send(event: OutboxEvent): Promise<PublishOutcome> {
    const timestamp = Math.floor(Date.now() / 1000);
    const body = `{"type":${JSON.stringify(event.topic)},"timestamp":${JSON.stringify(new Date(event.createdAt).toISOString())},"data":${event.payloadText}}`;
    const headers: Record<string, string> = {
      ...outboxHeaders(event),
      "content-type": "application/json",
      "user-agent": "Conveyor-Outbox/1",
      "webhook-id": event.id,
      "webhook-timestamp": String(timestamp),
      "webhook-signature": signWebhook(this.secrets, { id: event.id, timestamp, body }),
    };
    let status: number;
    let snippet: string;
    try {
      const result = await guardedPost(this.guard, this.url, body, headers, { timeoutMs: this.timeoutMs });
      status = result.status;
      snippet = result.bodySnippet.replace(/\s+/g, " ").slice(0, 200);
    } catch (error) {
      // Network errors, timeouts, DNS, and a host that resolves into a refused range: the
      // configuration or the network must change, not the event; keep it and retry.
      return { status: "retry", error: error as Error };
    }
    if (status >= 200 && status < 300) return { status: "published" };
    const message = `${this.description} answered ${status}${snippet ? `: ${snippet}` : ""}`;
    if (status >= 500 || RETRYABLE.has(status)) return { status: "retry", error: new Error(message) };
    return { status: "rejected", error: new RejectedEventError(message) };
  }

  async close(): Promise<void> {}
}
