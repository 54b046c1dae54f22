/**
 * How many workers a queue needs: scale on lag (the oldest waiting job's age and the backlog),
 * never on CPU — I/O-bound handlers leave the CPU idle while the backlog explodes.
 *
 * The formula (docs/observability.md, "Autoscaling"):
 *
 *   busy      = ceil(activeJobs / slotsPerWorker × (1 + headroom))
 *               the workers today's throughput keeps busy (measured: jobs running now), plus headroom
 *   drain     = ceil(backlog / (jobsPerSecondPerWorker × targetAgeSeconds))
 *               the workers that clear the waiting jobs within the age target
 *   needed    = busy + drain
 *
 *   age > target                  → max(current + 1, needed)             lagging: out, at least by one
 *   scaleInBelow × target <= age  → max(current, needed)                 rising: out if needed, never in
 *   age < scaleInBelow × target   → max(needed, current − maxStepIn)     calm: in, a step at a time,
 *                                   (only when needed < current)         never below what is busy
 *
 * clamped to [minWorkers, maxWorkers], and at least 1 while jobs wait. The dead band between the
 * scale-out threshold (the target) and the scale-in one (a fraction of it), the headroom over
 * the busy workers and the one-step scale-in are what stop flapping: a fleet that just brought the
 * age under target does not shrink until the age is well below it, and never below the workers
 * its current throughput keeps busy.
 */
import { InvalidInputError } from "../core/errors.js";
import { shown } from "../core/checks.js";

export interface ScalingPolicy {
  /** The oldest-waiting-age objective, seconds. */
  targetAgeSeconds: number;
  /** Jobs one worker (process) finishes per second: measure it, e.g. rate(conveyor_jobs_completed_total[10m]) / workers. */
  jobsPerSecondPerWorker: number;
  /** Default 0 (scale to zero when idle). */
  minWorkers?: number;
  /** Default 100. */
  maxWorkers?: number;
  /** Scale in only while the oldest age is under this fraction of the target, 0 < f < 1. Default 0.5. */
  scaleInBelow?: number;
  /** Workers removed at most per evaluation. Default 1. */
  maxStepIn?: number;
  /** Handler slots of one worker (its `concurrency`). Default 10, the Worker's default. */
  slotsPerWorker?: number;
  /** Spare capacity kept over the busy workers, as a fraction. Default 0.2. */
  headroom?: number;
}

export interface ScalingObservation {
  /** Jobs due and not started (waiting, including due scheduled ones). */
  backlog: number;
  /** Age of the oldest of them, seconds (0 when none). */
  oldestAgeSeconds: number;
  /** Jobs running now (state `active`): the measured throughput, in slots. */
  activeJobs: number;
  /** Workers now (or the previous recommendation). */
  currentWorkers: number;
}

/** The desired worker count for one queue; a pure function of the policy and one observation. */
export function desiredWorkers(policy: ScalingPolicy, observation: ScalingObservation): number {
  const p = checkPolicy(policy);
  const { backlog, oldestAgeSeconds } = observation;
  const current = Math.max(0, Math.floor(observation.currentWorkers));
  // The small epsilon keeps float noise (19.999…) from adding a worker.
  const busy = Math.ceil((Math.max(0, observation.activeJobs) / p.slotsPerWorker) * (1 + p.headroom) - 1e-9);
  const drain = Math.ceil(Math.max(0, backlog) / (p.jobsPerSecondPerWorker * p.targetAgeSeconds));
  const needed = busy + drain;
  let desired: number;
  if (oldestAgeSeconds > p.targetAgeSeconds) desired = Math.max(current + 1, needed);
  else if (oldestAgeSeconds >= p.scaleInBelow * p.targetAgeSeconds) desired = Math.max(current, needed);
  else desired = needed < current ? Math.max(needed, current - p.maxStepIn) : current;
  // Work waiting needs at least one worker, whatever the minimum.
  if (backlog > 0) desired = Math.max(desired, 1);
  return Math.min(p.maxWorkers, Math.max(p.minWorkers, desired));
}

function checkPolicy(policy: ScalingPolicy): Required<ScalingPolicy> {
  const p = {
    minWorkers: 0,
    maxWorkers: 100,
    scaleInBelow: 0.5,
    maxStepIn: 1,
    slotsPerWorker: 10,
    headroom: 0.2,
    ...policy,
  };
  const positive = (name: string, v: number) => {
    if (!(Number.isFinite(v) && v > 0)) throw new InvalidInputError(`scaling policy ${name} must be a positive number; got ${shown(v)}`);
  };
  positive("targetAgeSeconds", p.targetAgeSeconds);
  positive("jobsPerSecondPerWorker", p.jobsPerSecondPerWorker);
  positive("maxStepIn", p.maxStepIn);
  positive("slotsPerWorker", p.slotsPerWorker);
  if (!(Number.isFinite(p.headroom) && p.headroom >= 0)) throw new InvalidInputError(`scaling policy headroom must be a number >= 0; got ${shown(p.headroom)}`);
  if (!(p.scaleInBelow > 0 && p.scaleInBelow < 1))
    throw new InvalidInputError(`scaling policy scaleInBelow must be between 0 and 1; got ${shown(p.scaleInBelow)}`);
  if (!(Number.isInteger(p.minWorkers) && Number.isInteger(p.maxWorkers) && p.minWorkers >= 0 && p.maxWorkers >= Math.max(1, p.minWorkers))) {
    throw new InvalidInputError(`scaling policy needs integers 0 <= minWorkers <= maxWorkers, maxWorkers >= 1; got ${p.minWorkers} and ${p.maxWorkers}`);
  }
  return p;
}
