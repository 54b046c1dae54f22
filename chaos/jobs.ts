/**
 * The chaos job mix: kinds, their options, and how many executions each needs by design.
 */
import type { JobKind } from "./records.js";
import type { Prng } from "./prng.js";

export const CHAOS_QUEUE = "chaos";

export interface KindSpec {
  /** Attempts allowed. Healthy jobs get plenty, so injected faults do not exhaust them. */
  attempts: number;
  /** Executions when nothing fails around the job. */
  designed: number;
  /** Per-attempt time limit, ms, or none. */
  timeoutMs: number | null;
  /** Fixed retry delay, ms. */
  backoffMs: number;
}

export const KINDS: Readonly<Record<JobKind, KindSpec>> = {
  /** Sleeps a little, honouring the abort signal: the healthy majority. */
  work: { attempts: 10, designed: 1, timeoutMs: null, backoffMs: 100 },
  /** Fails its first attempt on purpose, then succeeds: designed to run twice. */
  flaky: { attempts: 10, designed: 2, timeoutMs: null, backoffMs: 200 },
  /** A long job (seconds): keeps workers busy when they are told to stop. */
  slow: { attempts: 10, designed: 1, timeoutMs: null, backoffMs: 100 },
  /** Poison: always throws. */
  "pill-throw": { attempts: 3, designed: 3, timeoutMs: null, backoffMs: 100 },
  /** Poison: calls process.exit in the middle of the job. */
  "pill-exit": { attempts: 3, designed: 3, timeoutMs: 5_000, backoffMs: 100 },
  /** Poison: blocks the event loop forever. */
  "pill-block": { attempts: 3, designed: 3, timeoutMs: 1_500, backoffMs: 100 },
  /** Poison: ignores its abort signal and runs far past its timeout. */
  "pill-timeout": { attempts: 3, designed: 3, timeoutMs: 1_000, backoffMs: 100 },
};

export const HEALTHY_KINDS: readonly JobKind[] = ["work", "flaky", "slow"];

export type Mix = Partial<Record<JobKind, number>>;

/** The payload of a job of `kind`, drawn from the producer's stream. */
export function payloadFor(kind: JobKind, prng: Prng): { kind: JobKind; ms: number } {
  switch (kind) {
    case "work":
    case "flaky":
      return { kind, ms: prng.int(20, 250) };
    case "slow":
      return { kind, ms: prng.int(2_500, 5_000) };
    case "pill-timeout":
      return { kind, ms: 4_000 };
    default:
      return { kind, ms: prng.int(10, 100) };
  }
}
