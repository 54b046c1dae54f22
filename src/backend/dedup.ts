/**
 * Dedup windows (`JobOptions.dedup`): the rules every backend shares, written once.
 *
 * A backend decides each job that carries a window in the same atomic step that stores the batch
 * (an SQLite transaction, a PostgreSQL transaction with its window rows locked, the enqueue Lua
 * script), against the windows already in the store:
 *
 *   no window for (queue, key), or it has ended  -> the job is stored as usual and the window
 *                                                   (re)opens for it: ends at now + ttlMs
 *   window open, mode "drop"                     -> nothing stored; answer the window's job
 *   window open, mode "extend"                   -> nothing stored; the window ends at now + ttlMs
 *   window open, mode "replace", its job waiting -> that job takes this job's payload and run time
 *     or scheduled                                  (runAt, or now + delayMs); the window ends at
 *                                                   now + ttlMs
 *   window open, mode "replace", its job started -> as if no window: stored, window reopens for it
 *     (or finished, or gone)
 *
 * Before a batch reaches the store, jobs of the batch that share a (queue, key) are folded into
 * the first of them here (`planDedupBatch`), so each backend sees a key at most once per batch and
 * never has to order decisions within one.
 */
import { InvalidInputError } from "../core/errors.js";
import type { JobSpec } from "../core/job.js";
import type { EnqueueOptions, EnqueueResult } from "./contract.js";

/** How a job with a dedup window was settled against a window already open. */
export type DedupOutcome = "dropped" | "extended" | "replaced";

export interface DedupBatchPlan {
  /** The specs to hand to the store, in batch order (each (queue, key) at most once). */
  readonly specs: readonly JobSpec[];
  /** Maps the store's answers for `specs` back to one answer per spec of the original batch. */
  answers(stored: readonly EnqueueResult[]): EnqueueResult[];
}

/** Whether any spec asks for a dedup window. A plain loop: every enqueue passes here, and most have none. */
function hasDedupWindow(specs: readonly JobSpec[]): boolean {
  for (let i = 0; i < specs.length; i++) if (specs[i]!.dedup !== undefined) return true;
  return false;
}

// Shared by every batch without a window: no closure allocated per enqueue.
const copyOf = (stored: readonly EnqueueResult[]): EnqueueResult[] => [...stored];

/**
 * Folds repeats of one (queue, dedup key) within a batch into the first such job, as the store
 * would have decided them one after the other: a later "replace" hands its payload and run time to
 * the first job (which the store then stores or lets replace the window's job), a later "drop" or
 * "extend" is answered with the first job's outcome. The window length is the longest asked for.
 * Refuses dedup windows in an all-or-nothing batch, whose duplicates mean "refuse the batch".
 */
export function planDedupBatch(specs: readonly JobSpec[], options?: EnqueueOptions): DedupBatchPlan {
  if (!hasDedupWindow(specs)) return { specs, answers: copyOf };
  if (options?.allOrNothing === true) {
    throw new InvalidInputError(
      "a dedup window (options.dedup) cannot be part of an all-or-nothing batch (e.g. an HTTP request with an " +
        "Idempotency-Key); send the job without one of the two",
      { field: "options.dedup" },
    );
  }
  const sent: JobSpec[] = [];
  /** For each spec of the batch: its position in `sent`, and the outcome when it was folded. */
  const route: Array<{ at: number; folded: DedupOutcome | null }> = [];
  const firstOfKey = new Map<string, number>();
  for (const spec of specs) {
    const window = spec.dedup;
    const key = window === undefined ? null : JSON.stringify([spec.queue, window.key]);
    const first = key === null ? undefined : firstOfKey.get(key);
    if (first === undefined || window === undefined) {
      if (key !== null) firstOfKey.set(key, sent.length);
      route.push({ at: sent.length, folded: null });
      sent.push(spec);
      continue;
    }
    const kept = sent[first]!;
    const ttlMs = Math.max(kept.dedup!.ttlMs, window.ttlMs);
    sent[first] =
      window.mode === "replace"
        ? { ...kept, payload: spec.payload, runAt: spec.runAt, delayMs: spec.delayMs, dedup: { ...kept.dedup!, ttlMs } }
        : { ...kept, dedup: { ...kept.dedup!, ttlMs } };
    route.push({ at: first, folded: window.mode === "drop" ? "dropped" : window.mode === "extend" ? "extended" : "replaced" });
  }
  return {
    specs: sent,
    answers(stored) {
      return route.map(({ at, folded }) => {
        const answer = stored[at]!;
        return folded === null ? answer : { id: answer.id, duplicate: true, dedup: folded };
      });
    },
  };
}
