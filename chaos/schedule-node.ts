/**
 * One process of the `schedule` chaos scenario (chaos/schedule-scenario.ts starts and kills them):
 *
 *   node --import tsx chaos/schedule-node.ts <db-url> <role: worker|scheduler> <skew ms> <ledger dir>
 *
 * A `worker` is a real Worker running the ticks' jobs (with the scheduler loop a Worker runs by
 * default); a `scheduler` runs only the scheduler loop, as `conveyor serve` does. With a non-zero
 * <skew ms> the process's scheduler sees the store's time shifted by that much (its own loop,
 * over a clock that is off), while leases keep the store's clock.
 *
 * Ledgers (fsynced JSON lines, chaos/ledger.ts), one file per process:
 * - fired-<pid>.jsonl: every firing this process won, with the store's answer for each job
 *   (`duplicate: true` would mean a second firing of a tick got past the compare-and-set);
 * - runs-<pid>.jsonl: `start` and `end` of every handler run.
 * It prints "ready" on stdout once its scheduler runs.
 */
import { join } from "node:path";
import { openBackend } from "../src/backend/open.js";
import { silentLogger } from "../src/core/logger.js";
import { tickMetaOf } from "../src/core/schedule.js";
import { Scheduler, type ScheduleStore } from "../src/maintenance/scheduler.js";
import { Worker } from "../src/runtime/worker.js";
import { AppendLog } from "./ledger.js";
import { SCHEDULE_LEASE_MS, SCHEDULE_QUEUE, type FiredRecord, type RunRecord } from "./schedule-scenario.js";

async function main(): Promise<void> {
  const [url, role, skewText, dir] = process.argv.slice(2);
  if (!url || (role !== "worker" && role !== "scheduler") || skewText === undefined || !dir) {
    throw new Error("usage: schedule-node.ts <db-url> worker|scheduler <skew ms> <ledger dir>");
  }
  const skewMs = Number(skewText);
  // The store keeps its own clock for leases and enqueues (the server's on PostgreSQL and Redis,
  // this process's on SQLite): only this process's scheduler sees time skewed, as a scheduler on a
  // host whose clock is off would decide which ticks are due.
  const backend = await openBackend(url);
  const fired = new AppendLog(join(dir, `fired-${process.pid}.jsonl`));
  // Every firing this process wins is recorded with the store's answer, whoever called it (the
  // worker's own scheduler loop or a separate one): wrapped before either starts.
  const fire = backend.scheduleFire.bind(backend);
  backend.scheduleFire = async (firing) => {
    const result = await fire(firing);
    if (result.fired) fired.append({ t: Date.now(), pid: process.pid, id: firing.id, tickAt: firing.tickAt, jobs: result.jobs } satisfies FiredRecord);
    return result;
  };
  const skewed: ScheduleStore = {
    now: async () => (await backend.now()) + skewMs,
    scheduleList: (queue) => backend.scheduleList(queue),
    scheduleFire: (firing) => backend.scheduleFire(firing),
  };
  // Unskewed workers run the scheduler loop a Worker runs by default; the others run their own
  // loop over the skewed clock.
  const ownLoop = role === "scheduler" || skewMs !== 0;
  if (ownLoop) new Scheduler(skewed, { refreshMs: 2_000 }, { onError: () => undefined }).start();
  if (role === "worker") {
    const runs = new AppendLog(join(dir, `runs-${process.pid}.jsonl`));
    new Worker({
      backend,
      queues: SCHEDULE_QUEUE,
      concurrency: 4,
      leaseMs: SCHEDULE_LEASE_MS,
      pollIntervalMs: 250,
      logger: silentLogger,
      maintenance: { rescueIntervalMs: 1_000 },
      scheduler: ownLoop ? false : { refreshMs: 2_000 },
      handlers: {
        tick: async (job) => {
          const meta = tickMetaOf(job)!;
          const record = { pid: process.pid, id: job.id, schedule: meta.id, tick: meta.tick, attempt: job.attempt };
          runs.append({ type: "start", t: Date.now(), ...record } satisfies RunRecord);
          await new Promise((resolve) => setTimeout(resolve, 20 + Math.floor(Math.random() * 200)));
          runs.append({ type: "end", t: Date.now(), ...record } satisfies RunRecord);
          return { tick: meta.tick };
        },
      },
    });
  }
  // The scheduler's timers never hold a process open by themselves; this one lives until killed.
  setInterval(() => undefined, 1 << 30);
  process.stdout.write("ready\n");
}

main().catch((error: unknown) => {
  process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
  process.exit(1);
});
