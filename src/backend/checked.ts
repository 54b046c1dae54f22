/**
 * The checking facade every backend is used through (like Oban's Engine or River's driver layer):
 * arguments are validated and defaults applied here, once, before any store sees the call, and a
 * call the store cannot do at all (a missing `StoreFeatures` entry) is refused here with
 * `UnsupportedByStoreError`. The backends' constructors return their instance wrapped by
 * {@link checkedBackend}, so the Queue, the Worker, the HTTP service and the CLI all go through it
 * whichever way they got their backend; the stores themselves trust what reaches them.
 *
 * Why one place: the per-backend copies of these checks had drifted (only SQLite refused a NaN
 * `retryDelayMs`; PostgreSQL and Redis clamped negatives to 0 and sent NaN to the store). The
 * conformance suite (test/conformance/checks.ts) feeds every store the same bad values and
 * expects the same error.
 */
import { intInRange, MAX_COUNT, positiveMs, retryDelayMs, shown } from "../core/checks.js";
import { InvalidInputError, UnsupportedByStoreError } from "../core/errors.js";
import type { FlowNodeSpec, JobSpec, Lease } from "../core/job.js";
import { checkName, checkProgress, LATEST_RUN_AT, MAX_ATTEMPTS, MAX_DELAY, MAX_PRIORITY, MIN_PRIORITY } from "../core/spec.js";
import { holdMs } from "../core/flow.js";
import type { ScheduleFiring } from "../core/schedule.js";
import type { EventPrunePolicy } from "../core/queue-events.js";
import { isKeyText, storedIdempotencyKey } from "../core/key-text.js";
import { CheckedLists } from "./checked-lists.js";
import { checkFinishedWindowArgs, checkListArgs } from "./listing.js";
import {
  DEFAULT_MAX_COMPLETED_PER_QUEUE,
  DEFAULT_MAX_DEAD_PER_QUEUE,
  DEFAULT_MAX_STALLS,
  DEFAULT_PRUNE_LIMIT,
  DEFAULT_RESCUE_LIMIT,
  type Backend,
  type Capabilities,
  type ClaimRequest,
  type Completion,
  type EnqueueOptions,
  type Failure,
  type HoldOptions,
  type ListFilter,
  type Page,
  type PrunePolicy,
  type RescueOptions,
} from "./contract.js";

/** `rescueExpired`'s options as the facade hands them to a store: checked, every default applied. */
export type ResolvedRescueOptions = Required<RescueOptions>;
/** `prune`'s policy as the facade hands it to a store: checked, every default applied. */
export type ResolvedPrunePolicy = Required<PrunePolicy>;

/** `ClaimRequest.limit` ceiling: far above any worker's concurrency plus prefetch. */
export const MAX_CLAIM_LIMIT = 100_000;
export { MAX_COUNT };

/** What a store's `rescueExpired` works with when called bare (the facade always passes every field). */
export const RESCUE_DEFAULTS: ResolvedRescueOptions = Object.freeze({ maxStalls: DEFAULT_MAX_STALLS, limit: DEFAULT_RESCUE_LIMIT });
/** What a store's `prune` works with when called bare (the facade always passes every field). */
export const PRUNE_DEFAULTS: ResolvedPrunePolicy = Object.freeze({
  maxCompletedPerQueue: DEFAULT_MAX_COMPLETED_PER_QUEUE,
  maxDeadPerQueue: DEFAULT_MAX_DEAD_PER_QUEUE,
  limit: DEFAULT_PRUNE_LIMIT,
});

const RAW = Symbol("conveyor.uncheckedBackend");

/**
 * `backend` behind the checking facade. Calls of the contract are checked, then forwarded to the
 * store with `this` the store itself (its internal calls are not checked twice); everything else
 * (a backend's own extras, `instanceof`) reads through to the store. Wrapping twice is a no-op.
 */
export function checkedBackend<B extends Backend>(backend: B): B {
  if (isChecked(backend)) return backend;
  const facade = facadeOf(backend);
  const bound = new Map<PropertyKey, unknown>();
  // A contract method assigned on the facade (a test wrapping `backend.claim` to count calls)
  // replaces the checked one for callers; the checked one keeps calling the store's own. Written
  // through to the store instead, the checked method would call the wrapper, which calls the
  // checked method again: a loop that never answers.
  const replaced = new Map<PropertyKey, unknown>();
  const proxy: B = new Proxy(backend, {
    set(target, key, value, receiver) {
      // An object built on the facade (Object.create(backend)) gets its own property, as usual.
      if (receiver !== proxy) return Reflect.set(target, key, value, receiver);
      if (typeof key === "string" && Object.hasOwn(facade, key)) {
        replaced.set(key, value);
        return true;
      }
      return Reflect.set(target, key, value, target);
    },
    // vi.spyOn and Object.defineProperty define instead of assigning: the same rule as `set`.
    defineProperty(target, key, descriptor) {
      if (typeof key === "string" && Object.hasOwn(facade, key) && "value" in descriptor) {
        replaced.set(key, descriptor.value);
        return true;
      }
      return Reflect.defineProperty(target, key, descriptor);
    },
    getOwnPropertyDescriptor(target, key) {
      if (replaced.has(key)) return { value: replaced.get(key), writable: true, enumerable: true, configurable: true };
      return Reflect.getOwnPropertyDescriptor(target, key);
    },
    deleteProperty(target, key) {
      if (replaced.delete(key)) return true;
      return Reflect.deleteProperty(target, key);
    },
    get(target, key) {
      if (key === RAW) return target;
      if (replaced.has(key)) return replaced.get(key);
      if (typeof key === "string" && Object.hasOwn(facade, key)) {
        // An optional contract method the store does not have stays absent (callers test for it).
        if (OPTIONAL_METHODS.has(key) && typeof (target as unknown as Record<string, unknown>)[key] !== "function") return undefined;
        return facade[key as keyof typeof facade];
      }
      const value: unknown = Reflect.get(target, key, target);
      if (typeof value !== "function" || key === "constructor") return value;
      let fn = bound.get(key);
      if (fn === undefined) {
        fn = (value as (...args: unknown[]) => unknown).bind(target);
        bound.set(key, fn);
      }
      return fn;
    },
  });
  return proxy;
}

/** The store behind the facade, for tests that must reach it with input the facade would refuse. */
export function uncheckedBackend<B extends Backend>(backend: B): B {
  return ((backend as unknown as Record<symbol, unknown>)[RAW] as B | undefined) ?? backend;
}

function isChecked(backend: Backend): boolean {
  return (backend as unknown as Record<symbol, unknown>)[RAW] !== undefined;
}

const OPTIONAL_METHODS: ReadonlySet<string> = new Set(["completeAndClaim", "readEvents", "latestEventCursor", "pruneEvents", "beginCompletion"]);

type ContractMethods = Omit<Backend, "description" | "capabilities" | "idempotency" | typeof Symbol.asyncDispose>;

/** The checked method of each contract call, forwarding to `store`. */
function facadeOf(store: Backend): ContractMethods & { idempotency: Backend["idempotency"] } {
  const caps = (): Capabilities => store.capabilities;
  /**
   * A job looked up by id (and, optionally, its queue): any string, since an id no job has finds
   * nothing; anything else is refused here, before a store turns it into a driver's error.
   */
  const lookup = (call: string, id: unknown, queue: unknown): [string, string | undefined] => {
    if (typeof id !== "string") throw new InvalidInputError(`${call} takes a job id (a string); got ${shown(id)}`, { field: "id" });
    if (queue !== undefined && typeof queue !== "string") {
      throw new InvalidInputError(`${call}: the queue, when given, is a queue name (a string); got ${shown(queue)}`, { field: "queue" });
    }
    return [id, queue];
  };
  const need = (call: RefusedCall, subject = ""): void => {
    const { capability } = REFUSALS[call];
    const caps_ = caps();
    if (capability === "flows" ? caps_.flows === "none" : !caps_[capability]) throw featureRefusal(store, call, subject);
  };
  const checkSpecs = (specs: readonly JobSpec[]): void => {
    // A plain loop: every enqueue passes here, a single add included.
    arrayOf(specs, "enqueue takes an array of job specs");
    const capabilities = caps();
    for (let i = 0; i < specs.length; i++) checkSpec(specs[i]!, capabilities, store.description, i);
  };
  // A worker names the same lists in every claim: each checked once (checked-lists.ts).
  const claimQueues = new CheckedLists((values) => unique(values, "queue"));
  const claimNames = new CheckedLists((values) => unique(values, "job"));
  const checkClaim = (request: ClaimRequest): ClaimRequest => ({
    ...request,
    queues: claimQueues.of(request.queues),
    names: claimNames.of(request.names),
    limit: intInRange("claim limit", request.limit, 1, MAX_CLAIM_LIMIT),
    leaseMs: positiveMs("leaseMs", request.leaseMs),
    ...(request.startsAtOnce === undefined ? {} : { startsAtOnce: intInRange("startsAtOnce", request.startsAtOnce, 0, MAX_CLAIM_LIMIT) }),
  });
  const checkFailures = (items: readonly Failure[]): Failure[] => items.map((item) => ({ ...item, retryDelayMs: retryDelayMs(item.retryDelayMs) }));
  const idempotency: Backend["idempotency"] = {
    async once(key, ttlMs) {
      need("once");
      if (typeof key !== "string" || key === "") throw new InvalidInputError(`an idempotency key must be a non-empty string; got ${shown(key)}`);
      return store.idempotency.once(storedIdempotencyKey(key), positiveMs("ttlMs", ttlMs));
    },
  };
  const methods: ContractMethods = {
    migrate: () => store.migrate(),
    close: () => store.close(),
    now: () => store.now(),
    enqueue(specs, options?: EnqueueOptions) {
      checkTx(store, options);
      checkSpecs(specs);
      return store.enqueue(specs, options);
    },
    claim: (request) => store.claim(checkClaim(request)),
    heartbeat: (leases, leaseMs) => store.heartbeat(checkLeases(leases), positiveMs("leaseMs", leaseMs)),
    complete: (items: readonly Completion[]) => store.complete(checkSettles(items)),
    completeAndClaim: (items, request) => store.completeAndClaim!(checkSettles(items), checkClaim(request)),
    fail: (items) => store.fail(checkFailures(checkSettles(items))),
    release: (leases) => store.release(checkLeases(leases)),
    progress(lease, progress) {
      checkProgress(progress);
      return store.progress(checkLease(lease), progress);
    },
    appendLogs(lease, lines) {
      if (!Array.isArray(lines) || lines.some((l) => typeof l !== "string"))
        throw new InvalidInputError(`log lines must be an array of strings; got ${describe(lines)}`);
      return store.appendLogs(checkLease(lease), lines);
    },
    logs: (id, queue) => store.logs(id, queue),
    rescueExpired: (options: RescueOptions = {}) =>
      store.rescueExpired({
        maxStalls: intInRange("maxStalls", options.maxStalls ?? DEFAULT_MAX_STALLS, 1, MAX_COUNT),
        limit: intInRange("limit", options.limit ?? DEFAULT_RESCUE_LIMIT, 1, MAX_COUNT),
      } satisfies ResolvedRescueOptions),
    promoteDue: () => store.promoteDue(),
    prune: (policy: PrunePolicy = {}) =>
      store.prune({
        maxCompletedPerQueue: intInRange("maxCompletedPerQueue", policy.maxCompletedPerQueue ?? DEFAULT_MAX_COMPLETED_PER_QUEUE, 0, MAX_COUNT),
        maxDeadPerQueue: intInRange("maxDeadPerQueue", policy.maxDeadPerQueue ?? DEFAULT_MAX_DEAD_PER_QUEUE, 0, MAX_COUNT),
        limit: intInRange("limit", policy.limit ?? DEFAULT_PRUNE_LIMIT, 1, MAX_COUNT),
      } satisfies ResolvedPrunePolicy),
    get: (id, queue) => store.get(...lookup("get", id, queue)),
    list(filter: ListFilter = {}, page: Page = {}) {
      const { limit, offset } = checkListArgs(filter, page);
      return store.list(filter, { ...page, limit, offset });
    },
    stats: (queue) => store.stats(queue),
    finishedWindow(queue, fromMs, untilMs, sampleLimit) {
      need("finishedWindow", queue);
      const args = checkFinishedWindowArgs(queue, fromMs, untilMs, sampleLimit);
      return store.finishedWindow(args.queue, args.fromMs, args.untilMs, args.sampleLimit);
    },
    cancel(id, queue) {
      need("cancel", id);
      return store.cancel(...lookup("cancel", id, queue));
    },
    replay: (id, queue) => store.replay(...lookup("replay", id, queue)),
    remove: (id, queue) => store.remove(...lookup("remove", id, queue)),
    pause(queue) {
      need("pause", queue);
      return store.pause(checkName("queue", queue));
    },
    resume(queue) {
      need("resume", queue);
      return store.resume(checkName("queue", queue));
    },
    setQueueLimits(queue, limits) {
      need("setQueueLimits", queue);
      return store.setQueueLimits(checkName("queue", queue), limits);
    },
    getQueueFlow(queue) {
      need("getQueueFlow", queue);
      return store.getQueueFlow(checkName("queue", queue));
    },
    holdQueue(queue, forMs, options: HoldOptions = {}) {
      need("holdQueue", queue);
      return store.holdQueue(checkName("queue", queue), holdMs(forMs), options);
    },
    subscribe: (listener) => store.subscribe(listener),
    scheduleUpsert(write) {
      need("scheduleUpsert", write.id);
      return store.scheduleUpsert(write);
    },
    scheduleRemove(queue, id) {
      need("scheduleRemove", id);
      return store.scheduleRemove(queue, id);
    },
    scheduleList(queue) {
      need("scheduleList");
      return store.scheduleList(queue);
    },
    scheduleFire(firing: ScheduleFiring) {
      need("scheduleFire", firing.id);
      checkSpecs(firing.jobs);
      return store.scheduleFire(firing);
    },
    enqueueFlow(nodes: readonly FlowNodeSpec[], options) {
      need("enqueueFlow");
      checkTx(store, options);
      arrayOf(nodes, "a flow is an array of nodes").forEach((node, i) => checkSpec(node.spec, caps(), store.description, i));
      return store.enqueueFlow(nodes, options);
    },
    flow(id, queue) {
      need("flow", id);
      return store.flow(id, queue);
    },
    readEvents: (cursor, limit) => store.readEvents!(cursor, intInRange("limit", limit, 1, MAX_COUNT)),
    latestEventCursor: () => store.latestEventCursor!(),
    pruneEvents: (policy?: EventPrunePolicy) => store.pruneEvents!(policy),
    beginCompletion: (lease) => store.beginCompletion!(checkLease(lease)),
  };
  // Every call answers with a promise, a refused one included: callers chain .catch() or await.
  const asynchronous = Object.fromEntries(
    Object.entries(methods as unknown as Record<string, (...args: unknown[]) => unknown>).map(([name, fn]) => [
      name,
      name === "subscribe" ? fn : async (...args: unknown[]) => fn(...args),
    ]),
  ) as unknown as ContractMethods;
  return { ...asynchronous, idempotency };
}

type Refusable = "cancel" | "pause" | "queueLimits" | "schedules" | "idempotencyKeys" | "flows" | "finishedWindows";

/**
 * The contract calls a store without some feature cannot do at all, with what to say: the
 * facade refuses them before the store is called, and a store that must still implement the
 * method (the contract has it) answers with the same error through {@link featureRefusal}.
 */
const REFUSALS = {
  cancel: {
    capability: "cancel",
    what: (id) => `cancel job ${id}`,
    instead: "have the handler check a cancellation flag in your own store, or use a backend with job records (SQLite, PostgreSQL, Redis)",
  },
  pause: {
    capability: "pause",
    what: (queue) => `pause queue ${queue} for every worker`,
    instead: "pause the workers themselves (worker.pause()) or scale them to zero",
  },
  resume: { capability: "pause", what: (queue) => `resume queue ${queue}`, instead: "its queues cannot be paused, so there is nothing to resume" },
  setQueueLimits: {
    capability: "queueLimits",
    what: (queue) => `set flow limits on queue ${queue}`,
    instead: "bound each worker's concurrency instead, or use SQLite, PostgreSQL or Redis for fleet-wide limits",
  },
  getQueueFlow: { capability: "queueLimits", what: (queue) => `read the flow limits of queue ${queue}`, instead: "it keeps none" },
  holdQueue: { capability: "queueLimits", what: (queue) => `hold queue ${queue}`, instead: "retry the job later (RetryLater without pause) instead" },
  scheduleUpsert: { capability: "schedules", what: (id) => `store schedule ${id}`, instead: "keep schedules on SQLite, PostgreSQL or Redis" },
  scheduleRemove: { capability: "schedules", what: (id) => `remove schedule ${id}`, instead: "it keeps no schedules" },
  scheduleList: { capability: "schedules", what: () => "list schedules", instead: "it keeps no schedules" },
  scheduleFire: { capability: "schedules", what: (id) => `fire schedule ${id}`, instead: "keep schedules on SQLite, PostgreSQL or Redis" },
  enqueueFlow: {
    capability: "flows",
    what: () => "store a flow",
    instead: "enqueue the parent from the children's handlers, or use a backend with job records (SQLite, PostgreSQL, Redis)",
  },
  flow: { capability: "flows", what: (id) => `tell the flow of job ${id}`, instead: "it keeps no flows" },
  finishedWindow: {
    capability: "finishedWindows",
    what: (queue) => `count the jobs of queue ${queue} finished in a time window`,
    instead: "it keeps no index of finished jobs; use SQLite, PostgreSQL or Redis for fleet-wide charts",
  },
  once: {
    capability: "idempotencyKeys",
    what: () => "record idempotency keys (ctx.once)",
    instead: "pass another store's idempotency (PostgreSQL or Redis) to this backend, or keep processed keys in your own database",
  },
} satisfies Record<string, { capability: Refusable; what: (subject: string) => string; instead: string }>;

/** A contract call some stores cannot do (`REFUSALS`). */
export type RefusedCall = keyof typeof REFUSALS;

/**
 * The `UnsupportedByStoreError` for `call` on `store`, naming the capability it lacks and what to
 * do instead; `subject` is the job, queue or schedule the call was about.
 */
export function featureRefusal(store: Pick<Backend, "description" | "capabilities">, call: RefusedCall, subject = ""): UnsupportedByStoreError {
  const { capability, what, instead } = REFUSALS[call];
  return new UnsupportedByStoreError(
    store.description,
    capability,
    `${what(JSON.stringify(subject))} (capabilities.${capability} is ${JSON.stringify(store.capabilities[capability])}); ${instead}`,
  );
}

/**
 * `{ tx }` only on a store with transactional enqueue, and only as a client with
 * `query(text, params)` (a pg PoolClient or Client, or an adapter for another driver).
 */
function checkTx(store: Pick<Backend, "description" | "capabilities">, options: Pick<EnqueueOptions, "tx"> | undefined): void {
  const tx: unknown = options?.tx;
  if (tx === undefined) return;
  if (!store.capabilities.transactionalEnqueue) {
    throw new InvalidInputError(
      `${store.description} cannot join your transaction (capabilities.transactionalEnqueue is false); enqueue without { tx }, ` +
        "or use the PostgreSQL backend for transactional enqueue, or the transactional outbox (conveyor-jobs/outbox) with a relay to this store",
    );
  }
  if (typeof tx !== "object" || tx === null || typeof (tx as { query?: unknown }).query !== "function") {
    throw new InvalidInputError(
      "enqueue { tx } must be a client inside your open transaction with a query(text, params) method: a pg " +
        "PoolClient/Client, or an adapter for your driver (see the conveyor/postgres module docs)",
    );
  }
}

function unique(values: readonly string[], kind: "queue" | "job"): string[] {
  if (!Array.isArray(values))
    throw new InvalidInputError(`claim ${kind === "job" ? "names" : "queues"} must be an array of ${kind} names; got ${describe(values)}`);
  return [...new Set(values)].map((value) => checkName(kind, value));
}

function checkLease(lease: Lease): Lease {
  if (typeof lease !== "object" || lease === null || typeof lease.jobId !== "string" || !Number.isSafeInteger(lease.token)) {
    throw new InvalidInputError(`a lease is { jobId: string, token: integer } as claim returned it; got ${describe(lease)}`);
  }
  return lease;
}

function checkLeases(leases: readonly Lease[]): readonly Lease[] {
  for (const lease of arrayOf(leases, "leases must be an array")) checkLease(lease);
  return leases;
}

function checkSettles<T extends { lease: Lease }>(items: readonly T[]): readonly T[] {
  for (const item of arrayOf(items, "settle calls take an array")) checkLease((item as Partial<T> | null)?.lease as Lease);
  return items;
}

/** `value`, when it is an array (typed callers can still hand over anything at run time). */
function arrayOf<T>(value: readonly T[], what: string): readonly T[] {
  const given: unknown = value;
  if (!Array.isArray(given)) throw new InvalidInputError(`${what}; got ${describe(value)}`);
  return value;
}

/** An integer in [min, max] (a JSON-safe one: the stores keep 64-bit integers at most). */
function inRange(value: unknown, min: number, max: number): boolean {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= min && value <= max;
}

function badSpecField(spec: JobSpec, field: string, what: string, value: unknown): InvalidInputError {
  return new InvalidInputError(`job ${JSON.stringify(spec.id)}: ${field} must be ${what}; got ${describe(value)}`, { field });
}

function checkRetention(spec: JobSpec, field: string, value: number | null): void {
  if (value !== null && !inRange(value, 0, MAX_DELAY)) throw badSpecField(spec, field, `a retention from 0 to ${MAX_DELAY} ms, or null`, value);
}

/**
 * A job spec as every store needs it: names that cannot break a Redis hash tag, text without NUL
 * (PostgreSQL refuses it, the Redis scripts use it as a separator), and integers within the
 * bounds the producer applies (`buildJobSpec`), so a hand-made spec gets the same answer from
 * every store. `field` says which job option was wrong, as the producer names it.
 */
export function checkSpec(spec: JobSpec, caps: Capabilities, store: string, index = 0): void {
  if (typeof spec !== "object" || spec === null)
    throw new InvalidInputError(`job spec ${index} must be an object built by buildJobSpec; got ${describe(spec)}`);
  checkName("queue", spec.queue);
  checkName("job", spec.name);
  if (!isKeyText(spec.id)) {
    throw badSpecField(spec, "options.jobId", "a string of 1-255 characters without control characters", spec.id);
  }
  if (typeof spec.payload !== "string" || spec.payload.includes("\0")) throw badSpecField(spec, "data", "JSON text (serialised by buildJobSpec)", spec.payload);
  if (spec.meta !== null && (typeof spec.meta !== "string" || spec.meta.includes("\0")))
    throw badSpecField(spec, "options.meta", "JSON text or null", spec.meta);
  if (!inRange(spec.priority, MIN_PRIORITY, MAX_PRIORITY))
    throw badSpecField(spec, "options.priority", `an integer from ${MIN_PRIORITY} to ${MAX_PRIORITY}`, spec.priority);
  if (spec.runAt !== null && !inRange(spec.runAt, 0, LATEST_RUN_AT))
    throw badSpecField(spec, "options.runAt", `ms since the epoch from 0 to ${LATEST_RUN_AT}, or null`, spec.runAt);
  if (!inRange(spec.delayMs, 0, MAX_DELAY)) throw badSpecField(spec, "options.delayMs", `an integer from 0 to ${MAX_DELAY} ms`, spec.delayMs);
  if (!inRange(spec.maxAttempts, 1, MAX_ATTEMPTS)) throw badSpecField(spec, "options.attempts", `an integer from 1 to ${MAX_ATTEMPTS}`, spec.maxAttempts);
  if (spec.timeoutMs !== null && !inRange(spec.timeoutMs, 1, MAX_DELAY))
    throw badSpecField(spec, "options.timeoutMs", `an integer from 1 to ${MAX_DELAY} ms, or null`, spec.timeoutMs);
  checkRetention(spec, "options.removeOnComplete", spec.retainCompletedMs);
  checkRetention(spec, "options.removeOnFail", spec.retainDeadMs);
  const b: unknown = spec.backoff;
  const backoff = b as Record<string, unknown> | null;
  const okBackoff =
    typeof b === "object" &&
    backoff !== null &&
    ((backoff.type === "fixed" && inRange(backoff.delayMs, 0, MAX_DELAY)) ||
      (backoff.type === "exponential" && inRange(backoff.delayMs, 0, MAX_DELAY) && inRange(backoff.maxDelayMs, 0, MAX_DELAY)));
  if (!okBackoff)
    throw badSpecField(
      spec,
      "options.backoff",
      `{ type: "fixed", delayMs } or { type: "exponential", delayMs, maxDelayMs } with integers from 0 to ${MAX_DELAY} ms`,
      b,
    );
  if (!caps.priorities && spec.priority !== 0) {
    throw new InvalidInputError(
      `job ${JSON.stringify(spec.id)} has priority ${spec.priority}, but ${store} has no priorities (capabilities.priorities is false); ` +
        "leave priority unset, or put urgent jobs on a queue of their own with its own workers",
      { field: "options.priority" },
    );
  }
  if (spec.dedup !== undefined) {
    const d = spec.dedup as unknown as Record<string, unknown> | null;
    if (
      typeof d !== "object" ||
      d === null ||
      typeof d.key !== "string" ||
      d.key === "" ||
      !inRange(d.ttlMs, 1, MAX_DELAY) ||
      !["drop", "extend", "replace"].includes(d.mode as string)
    ) {
      throw badSpecField(spec, "options.dedup", `{ key, ttlMs from 1 to ${MAX_DELAY}, mode "drop" | "extend" | "replace" }`, spec.dedup);
    }
    if (!caps.dedupWindows) {
      throw new UnsupportedByStoreError(
        store,
        "dedupWindows",
        `keep a dedup window for job ${JSON.stringify(spec.id)} (capabilities.dedupWindows is false); drop options.dedup, or use a backend with job records (SQLite, PostgreSQL, Redis)`,
      );
    }
  }
  if (spec.flow !== undefined && !caps.jobFlowKeys) {
    throw new InvalidInputError(
      `${store} does not store job groups or limiter keys (capabilities.jobFlowKeys is false); ` +
        "use queue limits (queue.setLimits) here, or the SQLite or PostgreSQL backend for group and limiter",
      { field: spec.flow.group !== null ? "options.group" : "options.limiter" },
    );
  }
}

function describe(value: unknown): string {
  if (typeof value === "number" || typeof value === "bigint") return String(value);
  try {
    return JSON.stringify(value) ?? typeof value;
  } catch {
    return typeof value;
  }
}
