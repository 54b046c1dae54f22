/**
 * How many workers a queue needs: scale on lag (the oldest waiting job's age and the backlog),
 * never on CPU — I/O-bound handlers leave the CPU idle while the backlog explodes.
 *
 * The formula (docs/observability.md, "Autoscaling"):
 *
 *   capacity  = ceil(backlog / (jobsPerSecondPerWorker × targetAgeSeconds))
 *               workers that clear the current backlog within the age target
 *   lagging   = oldestAgeSeconds > targetAgeSeconds
 *   calm      = oldestAgeSeconds < scaleInBelow × targetAgeSeconds
 *
 *   lagging          → max(current + 1, capacity)         scale out, at least by one
 *   capacity > current → capacity                          the backlog outgrows the fleet: out
 *   calm             → max(capacity, current − maxStepIn)  scale in, a step at a time
 *   otherwise        → current                             the dead band: hold
 *
 * clamped to [minWorkers, maxWorkers]. The dead band between the scale-out threshold (the target)
 * and the scale-in one (a fraction of it) is what stops flapping: a fleet that just brought the
 * age under target does not shrink until the age is well below it.
 */
import { InvalidInputError } from "../core/errors.js";

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
}

export interface ScalingObservation {
  /** Jobs due and not started (waiting, including due scheduled ones). */
  backlog: number;
  /** Age of the oldest of them, seconds (0 when none). */
  oldestAgeSeconds: number;
  /** Workers now (or the previous recommendation). */
  currentWorkers: number;
}

/** The desired worker count for one queue; a pure function of the policy and one observation. */
export function desiredWorkers(policy: ScalingPolicy, observation: ScalingObservation): number {
  const p = checkPolicy(policy);
  const { backlog, oldestAgeSeconds } = observation;
  const current = Math.max(0, Math.floor(observation.currentWorkers));
  const capacity = Math.ceil(Math.max(0, backlog) / (p.jobsPerSecondPerWorker * p.targetAgeSeconds));
  let desired: number;
  if (oldestAgeSeconds > p.targetAgeSeconds) desired = Math.max(current + 1, capacity);
  else if (capacity > current) desired = capacity;
  else if (oldestAgeSeconds < p.scaleInBelow * p.targetAgeSeconds) desired = Math.max(capacity, current - p.maxStepIn);
  else desired = current;
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
    ...policy,
  };
  const positive = (name: string, v: number) => {
    if (!(Number.isFinite(v) && v > 0)) throw new InvalidInputError(`scaling policy ${name} must be a positive number; got ${JSON.stringify(v)}`);
  };
  positive("targetAgeSeconds", p.targetAgeSeconds);
  positive("jobsPerSecondPerWorker", p.jobsPerSecondPerWorker);
  positive("maxStepIn", p.maxStepIn);
  if (!(p.scaleInBelow > 0 && p.scaleInBelow < 1)) throw new InvalidInputError(`scaling policy scaleInBelow must be between 0 and 1; got ${JSON.stringify(p.scaleInBelow)}`);
  if (!(Number.isInteger(p.minWorkers) && Number.isInteger(p.maxWorkers) && p.minWorkers >= 0 && p.maxWorkers >= Math.max(1, p.minWorkers))) {
    throw new InvalidInputError(`scaling policy needs integers 0 <= minWorkers <= maxWorkers, maxWorkers >= 1; got ${p.minWorkers} and ${p.maxWorkers}`);
  }
  return p;
}
