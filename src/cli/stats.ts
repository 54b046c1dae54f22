import type { Backend, QueueStats } from "../backend/contract.js";
import type { JobRecord } from "../core/job.js";
import type { QueueFlow } from "../core/flow.js";
import { intOption, parse, UsageError, withBackend } from "./args.js";
import { duration, printJson, table } from "./format.js";
import { shown } from "../core/checks.js";

export const help = `conveyor stats --db URL [--queue NAME] [--window DURATION] [--json]

Jobs per state and the oldest waiting job's age, per queue. Alert on the age, not the depth.
Then, over the last DURATION: completions and dead letters per second, and run-time and
wait-time percentiles (p50, p95, p99) of the jobs that finished in it — the figures the
Prometheus metrics give, for a person without Prometheus.

  --window DURATION      how far back to look: 90s, 5m, 1h (default 5m; 0 leaves the window out)
  --sample N             finished jobs read per queue and state at most (default 5000)

The window is read from the finished jobs the store still keeps: jobs removed on completion are
not seen, and when retention has already pruned part of the window, rates cover the part that
is left (marked ~ with its length).`;

/** Nearest-rank percentiles of a sample, in its unit; null when empty. */
export interface Percentiles {
  p50: number;
  p95: number;
  p99: number;
}

/** What `--window` adds to a queue's line. */
export interface WindowFigures {
  /** The window asked for, ms. */
  windowMs: number;
  /** The part of it the kept jobs cover, ms (shorter when retention pruned the start). */
  coveredMs: number;
  completed: number;
  dead: number;
  completedPerSecond: number;
  deadPerSecond: number;
  /** Handler run time of the last attempt (start to finish), ms. */
  runMs: Percentiles | null;
  /** From due to the start of the last attempt, ms. */
  waitMs: Percentiles | null;
  /** True when `--sample` stopped the reading before the window's start. */
  sampled: boolean;
}

const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/;
const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };

/** "90s", "5m", "1h", "250ms", "30" (seconds) → milliseconds. */
export function parseDuration(name: string, value: string): number {
  const m = DURATION.exec(value.trim());
  if (!m) throw new UsageError(`--${name} takes a duration such as 90s, 5m or 1h; got ${shown(value)}`);
  return Math.round(Number(m[1]) * UNIT_MS[m[2] ?? "s"]!);
}

/**
 * `--window`: a duration, or a bare 0 to leave the window out. "0m" or "0.1ms" is a window no job
 * can finish in, more likely a slip than a way to say "none", so it is refused.
 */
function windowOption(value: string): number {
  if (value.trim() === "0") return 0;
  const windowMs = parseDuration("window", value);
  if (windowMs === 0) throw new UsageError(`--window ${value} is no time: give a duration such as 90s, 5m or 1h, or 0 to leave the window out`);
  return windowMs;
}

function percentiles(values: number[]): Percentiles | null {
  if (values.length === 0) return null;
  const sorted = values.slice().sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
  return { p50: at(0.5), p95: at(0.95), p99: at(0.99) };
}

/**
 * Rates and percentiles of the jobs that finished in `(now - windowMs, now]`. `kept` are the
 * finished jobs the store still has (completed and dead); when every one of them finished inside
 * the window, retention may have pruned earlier ones, so the covered span starts at the oldest.
 */
export function windowFigures(kept: readonly JobRecord[], now: number, windowMs: number, sampled: boolean): WindowFigures {
  const start = now - windowMs;
  const inWindow = kept.filter((j) => j.finishedAt !== null && j.finishedAt > start && j.finishedAt <= now);
  const anyBefore = kept.some((j) => j.finishedAt !== null && j.finishedAt <= start);
  const oldest = inWindow.reduce((min, j) => Math.min(min, j.finishedAt!), now);
  const coveredMs = anyBefore || sampled || inWindow.length === 0 ? windowMs : Math.max(1, now - oldest);
  const completed = inWindow.filter((j) => j.state === "completed");
  const dead = inWindow.filter((j) => j.state === "dead");
  return {
    windowMs,
    coveredMs,
    completed: completed.length,
    dead: dead.length,
    completedPerSecond: completed.length / (coveredMs / 1000),
    deadPerSecond: dead.length / (coveredMs / 1000),
    runMs: percentiles(completed.filter((j) => j.startedAt !== null).map((j) => j.finishedAt! - j.startedAt!)),
    waitMs: percentiles(inWindow.filter((j) => j.startedAt !== null).map((j) => Math.max(0, j.startedAt! - j.runAt))),
    sampled,
  };
}

/** Reads the kept finished jobs of a queue, newest first, until the window's start or `sample` per state. */
async function finishedJobs(backend: Backend, queue: string, since: number, sample: number): Promise<{ jobs: JobRecord[]; sampled: boolean }> {
  const jobs: JobRecord[] = [];
  let sampled = false;
  for (const state of ["completed", "dead"] as const) {
    for (let offset = 0; offset < sample;) {
      const limit = Math.min(1_000, sample - offset);
      const page = await backend.list({ queue, state }, { limit, offset });
      jobs.push(...page);
      offset += page.length;
      if (page.length < limit) break;
      // Newest first by insertion: once a whole page finished before the window, older ones did too
      // (a job inserted earlier can still finish later, so a mixed page keeps the reading going).
      if (page.every((j) => j.finishedAt !== null && j.finishedAt <= since)) break;
      if (offset >= sample) sampled = true;
    }
  }
  return { jobs, sampled };
}

const rate = (perSecond: number) => (perSecond >= 10 ? perSecond.toFixed(0) : perSecond >= 0.1 ? perSecond.toFixed(2) : perSecond.toFixed(3));
const pct = (p: Percentiles | null) => (p === null ? "-" : `${duration(p.p50)} / ${duration(p.p95)} / ${duration(p.p99)}`);

export async function run(argv: string[]): Promise<number> {
  const { values } = parse(argv, { queue: { type: "string" }, window: { type: "string" }, sample: { type: "string" } });
  if (values.help) {
    console.log(help);
    return 0;
  }
  const windowMs = typeof values.window === "string" ? windowOption(values.window) : 5 * 60_000;
  const sample = intOption("sample", values.sample, 1) ?? 5_000;
  return withBackend(values.db, async (backend) => {
    const stats = await backend.stats(values.queue as string | undefined);
    const windows = new Map<string, WindowFigures>();
    // A store without job records (RabbitMQ, Kafka) keeps no finished jobs to measure a window on.
    if (windowMs > 0 && backend.capabilities.jobRecords) {
      const now = await backend.now();
      for (const s of stats) {
        const { jobs, sampled } = await finishedJobs(backend, s.queue, now - windowMs, sample);
        windows.set(s.queue, windowFigures(jobs, now, windowMs, sampled));
      }
    }
    const flows = new Map<string, QueueFlow>();
    for (const s of backend.capabilities.queueLimits ? stats : []) {
      const flow = await backend.getQueueFlow(s.queue);
      if (flow !== null) flows.set(s.queue, flow);
    }
    if (values.json) {
      printJson(
        stats.map((s): QueueStats & { window?: WindowFigures; flow: QueueFlow | null } => ({
          ...s,
          ...(windows.has(s.queue) ? { window: windows.get(s.queue)! } : {}),
          flow: flows.get(s.queue) ?? null,
        })),
      );
      return 0;
    }
    if (stats.length === 0) {
      console.log("no queues yet");
      return 0;
    }
    console.log(
      table(
        ["queue", "waiting", "scheduled", "active", "completed", "dead", "cancelled", "oldest waiting", "paused"],
        stats.map((s) => [
          s.queue,
          s.counts.waiting,
          s.counts.scheduled,
          s.counts.active,
          s.counts.completed,
          s.counts.dead,
          s.counts.cancelled,
          duration(s.oldestWaitingAgeMs),
          s.paused ? "yes" : "no",
        ]),
      ),
    );
    if (flows.size > 0) {
      const now = await backend.now();
      console.log("\nflow control (docs/flow-control.md):");
      console.log(
        table(
          ["queue", "rate", "max running", "max running per name", "held for"],
          [...flows].map(([queue, { limits, heldUntil }]) => [
            queue,
            limits.rate === null ? "-" : `${limits.rate.max} / ${duration(limits.rate.durationMs)}`,
            limits.maxRunning ?? "-",
            Object.entries(limits.maxRunningPerName)
              .map(([name, cap]) => `${name}=${cap}`)
              .join(", ") || "-",
            heldUntil !== null && heldUntil > now ? duration(heldUntil - now) : "-",
          ]),
        ),
      );
    }
    if (windows.size > 0) {
      console.log(`\nlast ${duration(windowMs)} (finished jobs the store keeps):`);
      console.log(
        table(
          ["queue", "window", "completed/s", "dead/s", "run p50 / p95 / p99", "wait p50 / p95 / p99"],
          stats.map((s) => {
            const w = windows.get(s.queue)!;
            const span = w.coveredMs < w.windowMs ? `~${duration(w.coveredMs)}` : duration(w.windowMs);
            return [s.queue, `${span}${w.sampled ? " (sampled)" : ""}`, rate(w.completedPerSecond), rate(w.deadPerSecond), pct(w.runMs), pct(w.waitMs)];
          }),
        ),
      );
    }
    return 0;
  });
}
