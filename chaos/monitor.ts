/**
 * Samples job states from the store while the chaos runs, through the public Queue API, so the
 * checker can see a finished job become active again (a terminal-state regression).
 *
 * Each tick lists every non-finished job (active, waiting, scheduled) and a window of finished
 * ones: the newest, plus one page that rotates through all of them, so over a run every finished
 * job is seen finished at some point. Only changes are kept (per job, the last state and
 * attempt), which keeps a long run's sample log small.
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { Backend, JobRecord, JobState, ListFilter, Page } from "../src/index.js";
import type { FinalJob, Observation } from "./records.js";

const PAGE = 1_000;

/** Where the monitor reads jobs: one Queue, or every queue of a scenario (jobsOf). */
export interface JobSource {
  list(filter?: Omit<ListFilter, "queue">, page?: Page): Promise<JobRecord[]>;
  stats(): Promise<{ counts: Record<JobState, number> }>;
}

/** Every queue of a store (a scenario has a prefix or schema of its own), as one source. */
export function jobsOf(backend: Backend, queues: readonly string[]): JobSource {
  return {
    list: (filter = {}, page) => backend.list(filter, page),
    async stats() {
      const counts = { waiting: 0, active: 0, scheduled: 0, completed: 0, dead: 0, cancelled: 0 } as Record<JobState, number>;
      for (const queue of queues) {
        const [stats] = await backend.stats(queue);
        for (const [state, n] of Object.entries(stats?.counts ?? {})) counts[state as JobState] = (counts[state as JobState] ?? 0) + n;
      }
      return { counts };
    },
  };
}

export class Monitor {
  readonly observations: Observation[] = [];
  ticks = 0;
  failedTicks = 0;
  private readonly last = new Map<string, string>();
  private rotating = 0;
  private stopped = false;
  private loop: Promise<void> | null = null;

  constructor(
    private readonly queue: JobSource,
    private readonly intervalMs: number,
  ) {}

  start(): void {
    this.loop = (async () => {
      while (!this.stopped) {
        await this.tick();
        await sleep(this.intervalMs);
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
    await this.tick();
  }

  private observe(jobs: readonly JobRecord[], at: number): void {
    for (const j of jobs) {
      const key = `${j.state}|${j.attempt}`;
      if (this.last.get(j.id) === key) continue;
      this.last.set(j.id, key);
      this.observations.push({ id: j.id, state: j.state, attempt: j.attempt, at });
    }
  }

  private async listAll(state: JobState, maxPages: number): Promise<JobRecord[]> {
    const out: JobRecord[] = [];
    for (let page = 0; page < maxPages; page++) {
      const rows = await this.queue.list({ state }, { limit: PAGE, offset: page * PAGE });
      out.push(...rows);
      if (rows.length < PAGE) break;
    }
    return out;
  }

  async tick(): Promise<void> {
    this.ticks++;
    try {
      // The time of a sample is taken before the reads: a state seen is at least that recent.
      const at = Date.now();
      for (const state of ["active", "waiting", "scheduled"] as const) this.observe(await this.listAll(state, 5), at);
      this.observe(await this.queue.list({ state: "completed" }, { limit: 200 }), at);
      this.observe(await this.queue.list({ state: "dead" }, { limit: 200 }), at);
      const page = await this.queue.list({ state: "completed" }, { limit: PAGE, offset: this.rotating });
      this.observe(page, at);
      this.rotating = page.length < PAGE ? 0 : this.rotating + PAGE;
    } catch {
      // The store is down or a connection was cut: that is the chaos, try again next tick.
      this.failedTicks++;
    }
  }
}

/** Every job of the queue, as the checker needs it. Call when nothing changes any more. */
export async function finalJobs(queue: JobSource, filter: { state?: JobState } = {}): Promise<FinalJob[]> {
  const out: FinalJob[] = [];
  const seen = new Set<string>();
  for (let offset = 0; ; offset += PAGE) {
    const rows = await queue.list(filter, { limit: PAGE, offset });
    for (const j of rows) {
      if (seen.has(j.id)) continue;
      seen.add(j.id);
      out.push({
        id: j.id,
        name: j.name,
        state: j.state,
        attempt: j.attempt,
        maxAttempts: j.maxAttempts,
        result: j.result,
        error: j.error ? `${j.error.name}: ${j.error.message}` : null,
        history: j.history.map((h) => ({ attempt: h.attempt, pid: h.pid, startedAt: h.startedAt, finishedAt: h.finishedAt, outcome: h.outcome })),
        ...(j.state === "dead" ? { deadAt: j.finishedAt } : {}),
      });
    }
    if (rows.length < PAGE) break;
  }
  return out;
}

/** The backend's queue counts of unfinished jobs, or null when the store cannot answer. */
export async function unfinished(queue: JobSource): Promise<number | null> {
  try {
    const { counts } = await queue.stats();
    return counts.waiting + counts.active + counts.scheduled;
  } catch {
    return null;
  }
}
