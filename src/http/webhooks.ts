/**
 * Webhooks: a job's `callbackUrl` and per-queue / per-job-name subscriptions, delivered as
 * Conveyor jobs and signed in the Standard Webhooks format (https://www.standardwebhooks.com).
 *
 * Events. `job.completed` (data: the job's status view, with its result) and `job.dead` (with
 * its error). Body: `{ "type", "timestamp", "data" }`.
 *
 * Deliveries are jobs. Each (target, job, event) becomes one job named `webhook.deliver` on the
 * `conveyor.webhooks` queue, with a deterministic id (`whk_` + a hash of target, job id, event
 * and replay count). So deliveries are retried with backoff (default 12 attempts, exponential
 * full jitter from 5 s up to 1 h), dead-lettered when they run out, visible and replayable with
 * the usual tools, and enqueuing the same delivery twice stores it once. The id is also the
 * `webhook-id` header, constant across retries: receivers deduplicate on it.
 *
 * Who enqueues deliveries, and the at-least-once argument:
 * 1. `attach(worker)`: in the process that completed the job, right after the store accepted
 *    the outcome (`job:completed`, `job:dead`). Fast, but a crash between the two loses it...
 * 2. ...so `start()` also runs a sweeper: every `sweepIntervalMs` (default 5 s) it lists the
 *    completed and dead jobs of every queue (up to 1000 per queue and state, the default
 *    retention count) that finished within `sweepWindowMs` (default 15 min) and enqueues their
 *    deliveries. Duplicates collapse on the deterministic id. The sweeper also covers jobs
 *    finished by worker processes that know nothing about webhooks (`conveyor worker`).
 * A job that finished while no sweeper ran for longer than the window gets no webhook; delivery
 * jobs are kept at least 24 h after they finish, longer than the window, so a sweep never
 * re-sends a delivery that already succeeded. Receivers must still deduplicate on `webhook-id`:
 * a delivery whose response was lost is sent again.
 *
 * Where subscriptions live. In configuration (`subscriptions`), the same in every process that
 * dispatches: every backend can "store" them, they are reviewed like code, and a secret never
 * sits in a database. Dynamic subscription management would need a table in every backend; it is
 * not part of this version.
 *
 * Signing: `webhook-signature: v1,<base64 HMAC-SHA256(secret, "<id>.<timestamp>.<body>")>`, one
 * signature per configured secret separated by spaces, so a secret can be rotated without
 * downtime: add the new secret first, roll receivers over, then drop the old one.
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { Backend } from "../backend/contract.js";
import type { BoundHandler, Job } from "../core/define.js";
import { ConveyorError, InvalidInputError, RetryLater, UnrecoverableError } from "../core/errors.js";
import type { JobRecord, JobSpec } from "../core/job.js";
import type { Json } from "../core/json.js";
import { consoleLogger, type Logger } from "../core/logger.js";
import type { JobTelemetry } from "../core/telemetry.js";
import { buildJobSpec, type BackoffOption } from "../core/spec.js";
import { Worker, type CloseOptions, type CloseResult, type WorkerOptions } from "../runtime/worker.js";
import { IdDeriver, WEBHOOK_ID_PREFIX } from "./derived-ids.js";
import { guardedPost, SsrfError, SsrfGuard } from "./ssrf.js";
import { toJobView, type JobView } from "./views.js";

// ---------------------------------------------------------------- signing

const SECRET_PREFIX = "whsec_";

/** A new signing secret: `whsec_` and the base64 of 32 random bytes. */
export function generateWebhookSecret(): string {
  return SECRET_PREFIX + randomBytes(32).toString("base64");
}

function secretKey(secret: string): Buffer {
  if (typeof secret !== "string" || secret.length === 0) throw new InvalidInputError("a webhook secret must be a non-empty string like whsec_<base64>");
  const b64 = secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret;
  const key = Buffer.from(b64, "base64");
  if (key.length < 16 || key.toString("base64").replace(/=+$/, "") !== b64.replace(/=+$/, "")) {
    throw new InvalidInputError("a webhook secret must be whsec_ followed by base64 of at least 16 bytes (generateWebhookSecret() makes one)");
  }
  return key;
}

function signOne(key: Buffer, id: string, timestamp: number, body: string | Uint8Array): string {
  const mac = createHmac("sha256", key);
  mac.update(`${id}.${timestamp}.`);
  mac.update(body);
  return mac.digest("base64");
}

/**
 * The `webhook-signature` header value for a message: `v1,<signature>` per secret, separated by
 * spaces. `timestamp` in seconds since the epoch.
 */
export function signWebhook(secrets: string | readonly string[], message: { id: string; timestamp: number; body: string }): string {
  const list = typeof secrets === "string" ? [secrets] : secrets;
  if (list.length === 0) throw new InvalidInputError("signWebhook needs at least one secret");
  return list.map((s) => `v1,${signOne(secretKey(s), message.id, message.timestamp, message.body)}`).join(" ");
}

/** A received webhook that failed verification; `message` says which check. */
export class WebhookVerificationError extends ConveyorError {
  override name = "WebhookVerificationError";
}

export interface VerifyOptions {
  /** Largest accepted difference between the message's timestamp and now, in seconds. Default 300. */
  toleranceSeconds?: number;
  /** Now, ms since the epoch. Default Date.now(). */
  now?: number;
}

type HeaderBag = Headers | Record<string, string | string[] | undefined>;

function header(headers: HeaderBag, name: string): string | undefined {
  if (typeof (headers as Headers).get === "function") return (headers as Headers).get(name) ?? undefined;
  const bag = headers as Record<string, string | string[] | undefined>;
  const key = Object.keys(bag).find((k) => k.toLowerCase() === name);
  const v = key === undefined ? undefined : bag[key];
  return Array.isArray(v) ? v[0] : v;
}

/**
 * Verifies a Standard Webhooks message for receivers: `webhook-id`, `webhook-timestamp` within
 * the tolerance, and a `v1` signature made with one of `secrets` over the exact raw `body`.
 * Returns the parsed JSON body; throws WebhookVerificationError otherwise.
 *
 * ```ts
 * app.post("/hooks/conveyor", { config: { rawBody: true } }, (req, reply) => {
 *   const event = verifyWebhook(process.env.CONVEYOR_WEBHOOK_SECRET!, req.headers, req.rawBody);
 * });
 * ```
 * Pass the body exactly as received (string or bytes): re-serialising parsed JSON changes it.
 */
export function verifyWebhook(
  secretOrSecrets: string | readonly string[],
  headers: HeaderBag,
  body: string | Uint8Array,
  options: VerifyOptions = {},
): unknown {
  const secrets = typeof secretOrSecrets === "string" ? [secretOrSecrets] : secretOrSecrets;
  if (secrets.length === 0) throw new InvalidInputError("verifyWebhook needs at least one secret");
  const keys = secrets.map(secretKey);
  const id = header(headers, "webhook-id");
  const ts = header(headers, "webhook-timestamp");
  const sig = header(headers, "webhook-signature");
  if (!id || !ts || !sig) throw new WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature header");
  if (!/^\d{1,12}$/.test(ts)) throw new WebhookVerificationError("webhook-timestamp is not a number of seconds");
  const timestamp = Number(ts);
  const tolerance = options.toleranceSeconds ?? 300;
  const now = Math.floor((options.now ?? Date.now()) / 1000);
  if (now - timestamp > tolerance) throw new WebhookVerificationError(`message timestamp is more than ${tolerance} s old (replayed or delayed message)`);
  if (timestamp - now > tolerance) throw new WebhookVerificationError(`message timestamp is more than ${tolerance} s in the future (check the clocks)`);
  const expected = keys.map((k) => Buffer.from(signOne(k, id, timestamp, body), "utf8"));
  let ok = false;
  for (const versioned of sig.split(" ")) {
    const comma = versioned.indexOf(",");
    if (comma < 0 || versioned.slice(0, comma) !== "v1") continue;
    const given = Buffer.from(versioned.slice(comma + 1), "utf8");
    for (const e of expected) {
      if (given.length === e.length && timingSafeEqual(given, e)) ok = true;
    }
  }
  if (!ok) throw new WebhookVerificationError("no signature matches (wrong secret, or the body was changed: verify the raw bytes)");
  const text = typeof body === "string" ? body : Buffer.from(body).toString("utf8");
  try {
    return text === "" ? null : (JSON.parse(text) as unknown);
  } catch {
    throw new WebhookVerificationError("the signed body is not JSON");
  }
}

// ---------------------------------------------------------------- events and deliveries

export type WebhookEventType = "job.completed" | "job.dead";
export const WEBHOOK_EVENT_TYPES: readonly WebhookEventType[] = ["job.completed", "job.dead"];

/** The body of every delivery. */
export interface WebhookEvent {
  type: WebhookEventType;
  /** When the event was produced, ISO 8601. */
  timestamp: string;
  data: Omit<JobView, "links">;
}

/** Webhooks sent for every matching job, configured per process. */
export interface WebhookSubscription {
  /** Identifies the subscription in delivery jobs. Letters, digits, `.`, `_`, `-`. */
  id: string;
  url: string;
  /** Queues whose jobs it covers: a name, several, or "*" (every queue). Default "*". */
  queues?: string | readonly string[];
  /** Job names it covers. Default: all. */
  names?: readonly string[];
  /** Events it receives. Default both. */
  events?: readonly WebhookEventType[];
  /** Its own signing secrets; default the dispatcher's `secrets`. */
  secrets?: readonly string[];
}

export interface WebhookOptions {
  backend: Backend;
  /**
   * Keys the hash in delivery job ids (`whk_…`, also the `webhook-id` header), so nobody can
   * compute a delivery's id from the job id: at least 32 bytes, the same in every process that
   * dispatches. Default none (a plain SHA-256; the `whk_` prefix is reserved for deliveries either
   * way). Changing it re-sends deliveries the sweep finds within its window under new ids.
   */
  idSecret?: string;
  /**
   * Signing secrets (`whsec_…`), used for callback URLs and subscriptions without their own. All
   * of them sign every message; list the new one first while rotating. At least one.
   */
  secrets: readonly string[];
  subscriptions?: readonly WebhookSubscription[];
  /** Host names, IPs and CIDR ranges exempt from the SSRF guard (internal receivers). Default none. */
  allow?: readonly string[];
  /** Deliver to plain-http URLs that are not allow-listed. Default false. */
  allowHttp?: boolean;
  /** Queue of the delivery jobs. Default "conveyor.webhooks". */
  queue?: string;
  /** Attempts per delivery. Default 12. */
  attempts?: number;
  /** Backoff between attempts. Default exponential full jitter, 5 s base, 1 h cap. */
  backoff?: BackoffOption;
  /** Per-request timeout, ms. Default 10 000. */
  requestTimeoutMs?: number;
  /** Sweep period, ms; 0 turns the sweeper off. Default 5 000. */
  sweepIntervalMs?: number;
  /** How far back a sweep looks for finished jobs, ms. Default 900 000 (15 min). */
  sweepWindowMs?: number;
  /** Default JSON lines on stderr (warnings and errors). */
  logger?: Logger;
  /**
   * Tracing (see `conveyor-jobs/metrics`): deliveries run as consumer spans in the finished job's
   * trace and send its `traceparent` header to the receiver. Default none.
   */
  telemetry?: JobTelemetry;
}

/** The data of a `webhook.deliver` job. Holds no secret: the handler looks it up by `target`. */
export interface DeliveryData {
  /** "callback" or "subscription:<id>". */
  target: string;
  url: string;
  event: WebhookEvent;
}

export const DELIVERY_JOB_NAME = "webhook.deliver";
const DAY_MS = 24 * 60 * 60 * 1000;

/** Thrown by a delivery whose receiver answered with a non-2xx status; retried. */
export class WebhookDeliveryError extends ConveyorError {
  override name = "WebhookDeliveryError";
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The callback URL a job carries (`meta.conveyor.callbackUrl`), if any. */
export function callbackUrlOf(job: Pick<JobRecord, "meta">): string | null {
  const c = job.meta?.conveyor;
  if (c && typeof c === "object" && !Array.isArray(c) && typeof c.callbackUrl === "string") return c.callbackUrl;
  return null;
}

/**
 * Turns finished jobs into delivery jobs and delivers them. See the module comment.
 *
 * ```ts
 * const webhooks = new WebhookDispatcher({ backend, secrets: [process.env.WEBHOOK_SECRET!] });
 * webhooks.attach(worker);   // optional: dispatch at once from this worker's events
 * webhooks.start();          // sweeper + a delivery worker in this process
 * await webhooks.close();
 * ```
 */
export class WebhookDispatcher {
  readonly queue: string;
  readonly guard: SsrfGuard;
  private readonly backend: Backend;
  private readonly secrets: readonly string[];
  private readonly ids: IdDeriver;
  private readonly subscriptions: readonly WebhookSubscription[];
  private readonly attempts: number;
  private readonly backoff: BackoffOption;
  private readonly requestTimeoutMs: number;
  private readonly sweepIntervalMs: number;
  private readonly sweepWindowMs: number;
  private readonly logger: Logger;
  private readonly telemetry: JobTelemetry | null;
  /** Delivery ids already enqueued (or found duplicate) by this process; bounded. */
  private readonly ensured = new Set<string>();
  private sweepTimer: NodeJS.Timeout | null = null;
  private sweeping: Promise<number> | null = null;
  private worker: Worker | null = null;
  private readonly detachers: Array<() => void> = [];
  private closed = false;

  constructor(options: WebhookOptions) {
    if (!options?.backend) throw new InvalidInputError("new WebhookDispatcher() needs { backend, secrets }");
    const secrets: readonly string[] = options.secrets;
    if (!isList(secrets) || secrets.length === 0) {
      throw new InvalidInputError("webhooks need at least one signing secret: secrets: [generateWebhookSecret()] (keep it in your secret store)");
    }
    secrets.forEach(secretKey);
    this.backend = options.backend;
    this.secrets = [...secrets];
    this.ids = new IdDeriver(options.idSecret, "WebhookOptions.idSecret");
    this.guard = new SsrfGuard({ allow: options.allow ?? [], allowHttp: options.allowHttp ?? false });
    const ids = new Set<string>();
    this.subscriptions = (options.subscriptions ?? []).map((s, i) => {
      if (typeof s?.id !== "string" || !/^[A-Za-z0-9._-]{1,64}$/.test(s.id))
        throw new InvalidInputError(`subscriptions[${i}].id must be 1-64 letters, digits, ".", "_" or "-"`);
      if (ids.has(s.id)) throw new InvalidInputError(`subscriptions[${i}].id "${s.id}" is used twice`);
      ids.add(s.id);
      this.guard.checkUrl(s.url);
      if (s.events?.some((e) => !WEBHOOK_EVENT_TYPES.includes(e)))
        throw new InvalidInputError(`subscriptions[${i}].events may list ${WEBHOOK_EVENT_TYPES.join(", ")}`);
      s.secrets?.forEach(secretKey);
      return s;
    });
    this.queue = options.queue ?? "conveyor.webhooks";
    this.attempts = options.attempts ?? 12;
    this.backoff = options.backoff ?? { type: "exponential", delayMs: 5_000, maxDelayMs: 3_600_000 };
    this.requestTimeoutMs = options.requestTimeoutMs ?? 10_000;
    this.sweepIntervalMs = options.sweepIntervalMs ?? 5_000;
    this.sweepWindowMs = options.sweepWindowMs ?? 15 * 60_000;
    this.logger = options.logger ?? consoleLogger();
    this.telemetry = options.telemetry ?? null;
  }

  /** Validates a callback URL given at enqueue (no DNS yet: that happens at delivery). */
  checkCallbackUrl(url: string): string {
    return this.guard.checkUrl(url).href;
  }

  /** The delivery handler, for a Worker on `this.queue`. */
  handlers(): BoundHandler<unknown>[] {
    return [
      {
        name: DELIVERY_JOB_NAME,
        schema: null,
        run: (job: Job<unknown>, ctx) => this.deliver(job as Job<DeliveryData>, ctx.signal),
        timeoutMs: this.requestTimeoutMs + 5_000,
      },
    ];
  }

  /** Enqueues deliveries as soon as `worker` reports a job completed or dead. Returns a detach function. */
  attach(worker: Worker): () => void {
    const onFinished = (job: JobRecord) => {
      if (job.queue === this.queue) return;
      // Read the stored record: it carries finishedAt and the result as the store has them.
      void this.backend
        .get(job.id)
        .then((stored) => this.dispatch([stored ?? job]))
        .catch((error: unknown) => this.logger.error({ jobId: job.id, err: String(error) }, "could not enqueue webhook deliveries; the sweeper will retry"));
    };
    const completed = ({ job, result }: { job: JobRecord; result: Json }) => onFinished({ ...job, state: "completed", result });
    const dead = ({ job }: { job: JobRecord }) => onFinished({ ...job, state: "dead" });
    worker.on("job:completed", completed);
    worker.on("job:dead", dead);
    const detach = () => {
      worker.off("job:completed", completed);
      worker.off("job:dead", dead);
    };
    this.detachers.push(detach);
    return detach;
  }

  /**
   * Starts the sweeper and a delivery Worker in this process. `workerOptions` tune that worker
   * (default concurrency 10; its maintenance timers are on unless you pass `maintenance: false`).
   */
  start(workerOptions: Partial<Omit<WorkerOptions, "backend" | "queues" | "handlers">> = {}): Worker {
    if (this.closed) throw new InvalidInputError("this WebhookDispatcher was closed; create a new one");
    if (this.worker) return this.worker;
    this.worker = new Worker({
      logger: this.logger,
      ...(this.telemetry ? { telemetry: this.telemetry } : {}),
      ...workerOptions,
      backend: this.backend,
      queues: this.queue,
      handlers: this.handlers(),
    });
    if (this.sweepIntervalMs > 0) this.scheduleSweep(0);
    return this.worker;
  }

  private scheduleSweep(delayMs: number): void {
    if (this.closed) return;
    this.sweepTimer = setTimeout(() => {
      void this.sweep()
        .catch((error: unknown) => this.logger.error({ err: String(error) }, "webhook sweep failed; retrying at the next interval"))
        .finally(() => this.scheduleSweep(this.sweepIntervalMs));
    }, delayMs);
  }

  /** One sweep: enqueues the missing deliveries of recently finished jobs. Resolves with how many were new. */
  sweep(): Promise<number> {
    this.sweeping ??= this.sweepOnce().finally(() => (this.sweeping = null));
    return this.sweeping;
  }

  private async sweepOnce(): Promise<number> {
    const now = await this.backend.now();
    const since = now - this.sweepWindowMs;
    let added = 0;
    for (const stats of await this.backend.stats()) {
      if (stats.queue === this.queue || this.closed) continue;
      for (const state of ["completed", "dead"] as const) {
        if (stats.counts[state] === 0) continue;
        const jobs = await this.backend.list({ queue: stats.queue, state }, { limit: 1_000 });
        added += await this.dispatch(jobs.filter((j) => j.finishedAt !== null && j.finishedAt >= since));
      }
    }
    return added;
  }

  /** Enqueues the deliveries of these finished jobs; resolves with how many were new. */
  async dispatch(jobs: readonly JobRecord[]): Promise<number> {
    const specs: JobSpec[] = [];
    for (const job of jobs) {
      if (job.queue === this.queue) continue;
      const type: WebhookEventType | null = job.state === "completed" ? "job.completed" : job.state === "dead" ? "job.dead" : null;
      if (!type) continue;
      for (const target of this.targets(job, type)) {
        const id = deliveryId(this.ids, target.key, job, type);
        if (this.ensured.has(id)) continue;
        const { links: _links, ...data } = toJobView(job, "");
        const event: WebhookEvent = { type, timestamp: new Date(job.finishedAt ?? Date.now()).toISOString(), data };
        const delivery: DeliveryData = { target: target.key, url: target.url, event };
        specs.push(
          buildJobSpec({
            queue: this.queue,
            name: DELIVERY_JOB_NAME,
            data: delivery,
            options: {
              jobId: id,
              attempts: this.attempts,
              backoff: this.backoff,
              // Kept longer than the sweep window, so a sweep never re-sends a finished delivery.
              removeOnComplete: { ageMs: Math.max(DAY_MS, 2 * this.sweepWindowMs) },
              removeOnFail: { ageMs: 7 * DAY_MS },
              // The finished job's trace context, so its deliveries join its trace.
              meta: { ...traceContextOf(job), conveyor: { webhookFor: job.id } },
            },
            maxPayloadBytes: 4 * 1024 * 1024,
          }),
        );
      }
    }
    if (specs.length === 0) return 0;
    const results = await this.backend.enqueue(specs);
    if (this.ensured.size > 100_000) this.ensured.clear();
    for (const r of results) this.ensured.add(r.id);
    return results.filter((r) => !r.duplicate).length;
  }

  private targets(job: JobRecord, type: WebhookEventType): Array<{ key: string; url: string }> {
    const out: Array<{ key: string; url: string }> = [];
    const callback = callbackUrlOf(job);
    if (callback) out.push({ key: "callback", url: callback });
    for (const s of this.subscriptions) {
      const queues = s.queues ?? "*";
      const queueOk = queues === "*" || (typeof queues === "string" ? queues === job.queue : queues.includes(job.queue) || queues.includes("*"));
      if (!queueOk) continue;
      if (s.names && !s.names.includes(job.name)) continue;
      if (s.events && !s.events.includes(type)) continue;
      out.push({ key: `subscription:${s.id}`, url: s.url });
    }
    return out;
  }

  private secretsFor(target: string): readonly string[] {
    if (target === "callback") return this.secrets;
    const id = target.startsWith("subscription:") ? target.slice("subscription:".length) : null;
    const sub = id === null ? undefined : this.subscriptions.find((s) => s.id === id);
    if (!sub) throw new UnrecoverableError(`webhook target "${target}" is no longer configured; re-add the subscription and replay this delivery`);
    return sub.secrets ?? this.secrets;
  }

  /** Sends one delivery; throws to retry, UnrecoverableError when retrying cannot help. */
  private async deliver(job: Job<DeliveryData>, signal: AbortSignal): Promise<Json> {
    const { target, url, event } = job.data ?? ({} as Partial<DeliveryData>);
    if (typeof url !== "string" || typeof target !== "string" || !event)
      throw new UnrecoverableError("malformed webhook delivery job: needs { target, url, event }");
    const secrets = this.secretsFor(target);
    const body = JSON.stringify(event);
    const timestamp = Math.floor(Date.now() / 1000);
    const headers: Record<string, string> = {
      "content-type": "application/json",
      "user-agent": "Conveyor-Webhooks/1",
      "webhook-id": job.id,
      "webhook-timestamp": String(timestamp),
      "webhook-signature": signWebhook(secrets, { id: job.id, timestamp, body }),
    };
    this.telemetry?.outgoing?.(headers);
    let result;
    try {
      result = await guardedPost(this.guard, url, body, headers, { timeoutMs: this.requestTimeoutMs, signal });
    } catch (error) {
      if (error instanceof SsrfError)
        throw new UnrecoverableError(`${error.message}. Add the host to the webhook allow-list if it is trusted, then replay this delivery.`);
      throw error;
    }
    const { status } = result;
    if (status >= 200 && status < 300) return { status, attempt: job.attempt };
    // Error messages are stored and logged: leave out the query string, which may hold a token.
    const shown = withoutQuery(url);
    const snippet = result.bodySnippet.replace(/\s+/g, " ").slice(0, 200);
    if (status === 410) throw new UnrecoverableError(`${shown} answered 410 Gone: the receiver asked to stop; remove the callback or subscription`);
    if (status === 429 || status === 503) {
      const retryAfter = Number(result.headers["retry-after"]);
      if (Number.isFinite(retryAfter) && retryAfter >= 0)
        throw new RetryLater(Math.min(3_600_000, retryAfter * 1000), `${shown} answered ${status}; retrying after ${retryAfter} s as it asked`);
    }
    const location = typeof result.headers.location === "string" ? withoutQuery(result.headers.location) : "the final URL";
    const redirect = status >= 300 && status < 400 ? ` (redirects are not followed; point the webhook at ${location})` : "";
    throw new WebhookDeliveryError(status, `${shown} answered ${status}${redirect}${snippet ? `: ${snippet}` : ""}`);
  }

  /**
   * Stops the sweeper, detaches from workers and closes the delivery worker (draining it, or
   * releasing unfinished deliveries after its grace period, as `Worker.close` does).
   */
  async close(options: CloseOptions = {}): Promise<CloseResult> {
    this.closed = true;
    if (this.sweepTimer) clearTimeout(this.sweepTimer);
    this.sweepTimer = null;
    for (const d of this.detachers.splice(0)) d();
    await this.sweeping?.catch(() => undefined);
    return (await this.worker?.close(options)) ?? { drained: true, releasedJobIds: [] };
  }
}

/** `traceparent` and `tracestate` of a job's metadata (stored by tracing at enqueue), if any. */
function traceContextOf(job: Pick<JobRecord, "meta">): { [key: string]: Json } {
  const out: { [key: string]: Json } = {};
  for (const key of ["traceparent", "tracestate"]) {
    const value = job.meta?.[key];
    if (typeof value === "string") out[key] = value;
  }
  return out;
}

function withoutQuery(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname}`;
  } catch {
    return "(invalid URL)";
  }
}

/** Array.isArray without narrowing a typed list to any[] (configuration may come from JSON). */
function isList(value: unknown): boolean {
  return Array.isArray(value);
}

function deliveryId(ids: IdDeriver, targetKey: string, job: JobRecord, type: WebhookEventType): string {
  // A job completes once, and dies at most once per replay: (job, event, replays) names the
  // occurrence without the finish time, which the worker's event and the store may see differently.
  return ids.derive(WEBHOOK_ID_PREFIX, [targetKey, job.id, type, String(job.replays)]);
}
