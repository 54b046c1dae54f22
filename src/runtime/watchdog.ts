import { Worker as Thread } from "node:worker_threads";

/**
 * Notices when this process's event loop stops (a handler stuck in a synchronous loop, a
 * pathological regex) and kills the process, so the orchestrator restarts it instead of leaving a
 * worker that holds jobs and does nothing, forever.
 *
 * Why kill: a blocked loop cannot run heartbeats, so its leases expire and the jobs run elsewhere
 * anyway; keeping the process would only let it finish a job twice. The job that blocked is
 * quarantined in `dead` after it stalls `maxStalls` times in a row.
 *
 * The check runs on a separate thread (a blocked main thread cannot watch itself) and shares one
 * Int32 cell with the main thread: the main thread stamps it, the thread reads it.
 *
 * A loop that has not turned is not always blocked: on a machine short of CPU (a loaded node, a
 * throttled container) the main thread may simply not be scheduled, or run its ordinary work a
 * few milliseconds per second, and look stopped for seconds. Killing it then turns a slow worker
 * into a crash loop. So the watchdog also reads the process's CPU time: it kills when the loop has
 * not turned for `stallMs` and the process was busy on the CPU for at least half of that meanwhile
 * (a handler spinning in synchronous code burns CPU the whole time, however starved), or when the
 * loop has not turned for `STALL_WITHOUT_CPU_FACTOR` × `stallMs` whatever the CPU did (a handler
 * stuck in a synchronous wait, which uses none).
 */
export interface WatchdogOptions {
  /**
   * How long the event loop may stay blocked, busy on the CPU, before the process is killed, ms
   * (a loop that turned no CPU meanwhile gets `STALL_WITHOUT_CPU_FACTOR` times as long).
   */
  stallMs: number;
  /** How often the main thread stamps the shared cell, ms. Default 100. */
  tickMs?: number;
  /** Signal sent to the process. Default SIGKILL (nothing in a stuck process can be trusted to clean up). */
  signal?: NodeJS.Signals;
}

/** A loop stopped without using the CPU (a synchronous wait, or a starved process) is killed after this many × stallMs. */
export const STALL_WITHOUT_CPU_FACTOR = 10;

const THREAD_SOURCE = `
const { workerData } = require("node:worker_threads");
const cell = new Int32Array(workerData.buffer);
// Process CPU time (every thread; this one uses next to none), ms.
const cpuMs = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1000; };
let last = Atomics.load(cell, 0);
let lastChange = Date.now();
let cpuAtChange = cpuMs();
let lastTick = lastChange;
setInterval(() => {
  const now = Date.now();
  // This thread itself did not run for a long while: the whole process was suspended (SIGSTOP,
  // a frozen container or VM) or the clock jumped. That is not a blocked event loop: measure anew,
  // or the main thread, resumed at the same instant, is killed before it can stamp the cell.
  const suspended = now - lastTick > workerData.stallMs / 2;
  lastTick = now;
  const v = Atomics.load(cell, 0);
  if (v !== last || suspended) { last = v; lastChange = now; cpuAtChange = cpuMs(); return; }
  const stoppedMs = now - lastChange;
  if (stoppedMs <= workerData.stallMs) return;
  const busyMs = cpuMs() - cpuAtChange;
  if (busyMs >= workerData.stallMs / 2 || stoppedMs > workerData.stallMs * workerData.withoutCpuFactor) {
    require("node:fs").writeSync(2, JSON.stringify({ time: new Date().toISOString(), level: "error",
      msg: "event loop blocked for " + stoppedMs + " ms, " + Math.round(busyMs) + " ms of it on the CPU (watchdog limit " + workerData.stallMs +
        " ms): killing the process so it can be restarted; its jobs will be rescued", pid: process.pid }) + "\\n");
    process.kill(process.pid, workerData.signal);
  }
}, Math.max(10, Math.min(250, Math.floor(workerData.stallMs / 4))));
`;

/** Starts the watchdog; the returned function stops it. */
export function startWatchdog(options: WatchdogOptions): () => Promise<void> {
  const buffer = new SharedArrayBuffer(4);
  const cell = new Int32Array(buffer);
  const thread = new Thread(THREAD_SOURCE, {
    eval: true,
    workerData: { buffer, stallMs: options.stallMs, withoutCpuFactor: STALL_WITHOUT_CPU_FACTOR, signal: options.signal ?? "SIGKILL" },
  });
  thread.unref();
  const stamp = setInterval(() => Atomics.add(cell, 0, 1), options.tickMs ?? 100);
  stamp.unref();
  return async () => {
    clearInterval(stamp);
    await thread.terminate();
  };
}
