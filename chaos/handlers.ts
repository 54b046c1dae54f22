/**
 * The handlers module of the chaos workers (`conveyor worker --handlers chaos/handlers.ts`, also
 * loaded by sandbox children). Each run appends a `start` record before the work and an `end`
 * record after it to an fsynced ledger of its own process, CHAOS_DIR/runs-PID.jsonl; the `end`
 * record is durable before the handler returns, so before the worker can acknowledge the job.
 */
import { join } from "node:path";
import type { Handler, Job, JobContext } from "../src/index.js";
import { AppendLog } from "./ledger.js";
import type { RunRecord } from "./records.js";

const dir = process.env.CHAOS_DIR;
const slot = process.env.CHAOS_SLOT ?? "?";
/** A sandbox child talks to its worker over IPC; a worker started by the CLI has no IPC channel. */
const wpid = typeof process.send === "function" ? process.ppid : process.pid;

let log: AppendLog | null = null;
function record(r: RunRecord): void {
  if (!dir) throw new Error("CHAOS_DIR is not set: the chaos handlers need a ledger directory");
  log ??= new AppendLog(join(dir, `runs-${process.pid}.jsonl`));
  log.append(r);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason as Error);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason as Error);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function durationOf(job: Job): number {
  const data = job.data;
  if (data && typeof data === "object" && !Array.isArray(data) && typeof data.ms === "number") return data.ms;
  return 10;
}

/**
 * A planted bug, for the tests that prove the checker can fail (test/chaos/planted.test.ts):
 * `ack-without-run:N` makes every Nth job a process takes return at once, without running or
 * writing anything, so the worker acknowledges a job that never ran (the job is gone from the
 * store, and no handler finished it: lost). Empty in every real run.
 */
const plant = /^ack-without-run:(\d+)$/.exec(process.env.CHAOS_PLANT ?? "");
const plantEvery = plant ? Number(plant[1]) : 0;
let taken = 0;

/** Wraps a job's work with its ledger records; the result names the attempt that completed. */
function recorded(work: (job: Job, ctx: JobContext) => Promise<void>): Handler {
  return async (job, ctx) => {
    if (plantEvery > 0 && ++taken % plantEvery === 0) return { planted: "ack-without-run" };
    const token = job.lease?.token ?? null;
    record({ t: "start", id: job.id, name: job.name, attempt: job.attempt, token, pid: process.pid, wpid, slot, at: Date.now() });
    try {
      await work(job, ctx);
    } catch (error) {
      const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      record({ t: "end", id: job.id, attempt: job.attempt, token, pid: process.pid, wpid, at: Date.now(), ok: false, error: message });
      throw error;
    }
    record({ t: "end", id: job.id, attempt: job.attempt, token, pid: process.pid, wpid, at: Date.now(), ok: true });
    return { attempt: job.attempt, token, pid: process.pid, wpid };
  };
}

const handlers: Record<string, Handler> = {
  work: recorded(async (job, ctx) => sleep(durationOf(job), ctx.signal)),
  slow: recorded(async (job, ctx) => sleep(durationOf(job), ctx.signal)),
  flaky: recorded(async (job, ctx) => {
    await sleep(durationOf(job), ctx.signal);
    if (job.attempt === 1) throw new Error("flaky: planned failure of the first attempt");
  }),
  "pill-throw": recorded(async (job, ctx) => {
    await sleep(durationOf(job), ctx.signal);
    throw new Error("poison: this job always throws");
  }),
  "pill-exit": recorded(async (job, ctx) => {
    await sleep(durationOf(job), ctx.signal);
    process.exit(7);
  }),
  "pill-block": recorded(async () => {
    for (;;) {
      // Blocks the event loop for good: only a sandbox kill or the watchdog ends this.
    }
  }),
  "pill-timeout": recorded(async (job) => {
    // Ignores its signal on purpose: the worker must fail the attempt at its timeout anyway.
    await sleep(durationOf(job));
  }),
};

export default handlers;
