/**
 * Shared vocabulary of the conformance suite: the factory a backend provides, the per-test
 * context, and small builders (`spec`, `worker`, `claim`) so each test reads as the behaviour it
 * checks.
 */
import { expect, it } from "vitest";
import type { Backend, Capabilities, ClaimedJob, SqlClient, StoreFeatures } from "../../src/backend/contract.js";
import type { FakeClock } from "../../src/core/clock.js";
import type { ErrorInfo, JobRecord, JobSpec, JobState, WorkerIdentity } from "../../src/core/job.js";
import { buildJobSpec, type JobOptions } from "../../src/core/spec.js";

/** How the suite obtains stores. Every `make` call is a fresh, isolated, migrated store. */
export interface BackendFactory {
  /**
   * What the backend must report as `capabilities`. The suite checks the backend reports exactly
   * this, and uses it to choose capability-dependent tests while collecting them (before any
   * backend exists).
   */
  capabilities: Capabilities;
  make(clock: FakeClock): Promise<Backend>;
  /** A second connection to the SAME store as the last `make`, for concurrency across connections. */
  openSecond?(clock: FakeClock): Promise<Backend>;
  /** Required when `capabilities.transactionalCompletion`: how a handler writes through `tx.client`. */
  completionProbe?: CompletionProbe;
}

/**
 * Backend-specific SQL for the transactional-completion tests: a table the "handler" writes a
 * marker into through `CompletionTransaction.client`, read back outside any job transaction.
 */
export interface CompletionProbe {
  /** Creates an empty marker table in the current store (run once per test). */
  setup(backend: Backend): Promise<void>;
  /** Records `marker` through the job's transaction client. */
  write(client: SqlClient, marker: string): Promise<void>;
  /** Every committed marker, read outside any job transaction. */
  read(backend: Backend): Promise<string[]>;
}

/** What each test sees: the current test's store and clock. */
export interface SuiteContext {
  readonly b: Backend;
  readonly clock: FakeClock;
  readonly factory: BackendFactory;
  /** Opens a second connection to the current store; closed after the test. Needs `openSecond`. */
  second(): Promise<Backend>;
}

export const QUEUE = "q";
export const NAME = "job";
/** Lease length the tests use unless they say otherwise. */
export const LEASE_MS = 30_000;

/** `buildJobSpec` input flattened: queue, name and data next to the job options. */
export type SpecInput = JobOptions & { queue?: string; name?: string; data?: unknown };

/** A validated JobSpec for queue "q", job name "job", payload `{}` unless overridden. */
export function spec(input: SpecInput = {}): JobSpec {
  const { queue = QUEUE, name = NAME, data = {}, ...options } = input;
  return buildJobSpec({ queue, name, data, options });
}

/** Enqueues one job and returns its id (asserting it was not a duplicate). */
export async function enqueueOne(b: Backend, input: SpecInput = {}): Promise<string> {
  const [result] = await b.enqueue([spec(input)]);
  expect(result?.duplicate).toBe(false);
  return result!.id;
}

/** Enqueues `count` jobs built by `make(i)` in one call; returns their ids in order. */
export async function enqueueMany(b: Backend, count: number, make: (i: number) => SpecInput = () => ({})): Promise<string[]> {
  const results = await b.enqueue(Array.from({ length: count }, (_, i) => spec(make(i))));
  return results.map((r) => r.id);
}

/** A worker identity with a distinct host and pid per id, so history records can be told apart. */
export function worker(id: string): WorkerIdentity {
  let pid = 1000;
  for (const ch of id) pid += ch.charCodeAt(0);
  return { id: `worker-${id}`, host: `host-${id}`, pid };
}

export const A = worker("A");
export const B = worker("B");
export const C = worker("C");

export interface ClaimInput {
  queues?: readonly string[];
  names?: readonly string[];
  worker?: WorkerIdentity;
  limit?: number;
  leaseMs?: number;
}

/** `claim` with the suite's defaults: queue "q", name "job", worker A, limit 1, LEASE_MS. */
export async function claim(b: Backend, input: ClaimInput = {}): Promise<ClaimedJob[]> {
  return b.claim({
    queues: input.queues ?? [QUEUE],
    names: input.names ?? [NAME],
    worker: input.worker ?? A,
    limit: input.limit ?? 1,
    leaseMs: input.leaseMs ?? LEASE_MS,
  });
}

/** Claims and expects exactly one job. */
export async function claimOne(b: Backend, input: ClaimInput = {}): Promise<ClaimedJob> {
  return one(await claim(b, input));
}

/** `get` that fails the test when the job does not exist. */
export async function mustGet(b: Backend, id: string): Promise<JobRecord> {
  const job = await b.get(id);
  if (job === null) throw new Error(`expected job ${id} to exist, but get() returned null`);
  return job;
}

/** The only element of `items`, failing the test when there is not exactly one. */
export function one<T>(items: readonly T[]): T {
  expect(items).toHaveLength(1);
  return items[0]!;
}

/** The element at `index`, failing the test when it is missing. */
export function at<T>(items: readonly T[], index: number): T {
  expect(items.length).toBeGreaterThan(index);
  return items[index]!;
}

/** An error as a handler would report it. */
export function errorInfo(message: string, name = "Error"): ErrorInfo {
  return { name, message, stack: `${name}: ${message}\n    at handler (app.ts:10:5)\n    at run (worker.ts:99:3)` };
}

/** Total number of jobs across every queue and state. */
export async function totalJobs(b: Backend): Promise<number> {
  let total = 0;
  for (const s of await b.stats()) for (const n of Object.values(s.counts)) total += n;
  return total;
}

/** Counts of one queue, failing the test when stats does not report it. */
export async function countsOf(b: Backend, queue = QUEUE): Promise<Record<JobState, number>> {
  const stats = await b.stats(queue);
  return one(stats).counts;
}

/** Counts with every state zero except the ones given. */
export function counts(nonZero: Partial<Record<JobState, number>> = {}): Record<JobState, number> {
  return { scheduled: 0, waiting: 0, "waiting-children": 0, active: 0, completed: 0, dead: 0, cancelled: 0, ...nonZero };
}

/** A test body, as `it` takes it. */
type TestBody = () => Promise<void> | void;

/**
 * `it` for a test that needs store features (`StoreFeatures`) a backend may lack: skipped by name
 * on such a backend, its title ending in `[needs feature, …]`, and run unchanged on the others.
 * `skipBecause` adds a condition of the test's own (no second connection, say): when it is a
 * reason, the test is skipped with that reason at the end of its title, `[skipped: …]`.
 */
export function itNeeds(
  t: SuiteContext,
  features: ReadonlyArray<keyof StoreFeatures>,
  skipBecause: string | false = false,
): (title: string, body: TestBody, timeout?: number) => void {
  const lacking = features.filter((f) => !t.factory.capabilities[f]);
  return (title, body, timeout) => {
    if (lacking.length > 0) it.skip(`${title} [needs ${lacking.join(", ")}]`, body, timeout);
    else if (skipBecause !== false) it.skip(`${title} [skipped: ${skipBecause}]`, body, timeout);
    else it(title, body, timeout);
  };
}
