/**
 * One process of the `schedule` chaos scenario (chaos/schedule-scenario.ts starts and kills them):
 *
 *   node --import tsx chaos/schedule-node.ts <db-url> <role: worker|scheduler> <skew ms> <ledger dir>
 *
 * A `worker` is a real Worker (its scheduler loop on, the default) running the ticks' jobs; a
 * `scheduler` runs only the scheduler loop, as `conveyor serve` does. The process's store clock is
 * the system clock shifted by <skew ms> (injected into the backend, so on every store the
 * process's "now" is off by that much: on SQLite that is the real situation, on PostgreSQL and
 * Redis it is the worst case of clients that disagree about time).
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
import { Scheduler } from "../src/maintenance/scheduler.js";
import { Worker } from "../src/runtime/worker.js";
import { AppendLog } from "./ledger.js";
import { SCHEDULE_LEASE_MS, SCHEDULE_QUEUE, type FiredRecord, type RunRecord } from "./schedule-scenario.js";

async function main(): Promise<void> {
  const [url, role, skewText, dir] = process.argv.slice(2);
  if (!url || (role !== "worker" && role !== "scheduler") || skewText === undefined || !dir) {
    throw new Error("usage: schedule-node.ts <db-url> worker|scheduler <skew ms> <ledger dir>");
  }
  const skewMs = Number(skewText);
  const backend = await openBackend(url, { clock: { now: () => Date.now() + skewMs } });
  const fired = new AppendLog(join(dir, `fired-${process.pid}.jsonl`));
  // Every firing this process wins is recorded with the store's answer, whoever called it (the
  // worker's own scheduler loop or the scheduler-only loop): wrapped before either starts.
  const fire = backend.scheduleFire.bind(backend);
  backend.scheduleFire = async (firing) => {
    const result = await fire(firing);
    if (result.fired) fired.append({ t: Date.now(), pid: process.pid, id: firing.id, tickAt: firing.tickAt, jobs: result.jobs } satisfies FiredRecord);
    return result;
  };
  if (role === "scheduler") {
    new Scheduler(backend, { refreshMs: 2_000 }, { onError: () => undefined }).start();
  } else {
    const runs = new AppendLog(join(dir, `runs-${process.pid}.jsonl`));
    new Worker({
      backend,
      queues: SCHEDULE_QUEUE,
      concurrency: 4,
      leaseMs: SCHEDULE_LEASE_MS,
      pollIntervalMs: 250,
      logger: silentLogger,
      maintenance: { rescueIntervalMs: 1_000 },
      scheduler: { refreshMs: 2_000 },
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
