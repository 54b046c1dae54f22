import type { ChildProcess } from "node:child_process";

/**
 * Sends `signal` to a server's process (with `send`, e.g. to its whole process group) and resolves
 * once it exited; at once when it already has. `forceAfterMs`: a graceful stop that hangs that
 * long turns into SIGKILL. `resendEveryMs`: the signal is sent again that often until the process
 * exits (for a server that drops a SIGTERM it cannot act on yet, rather than postponing it).
 */
export async function signalAndWait(
  proc: ChildProcess | null,
  signal: NodeJS.Signals,
  options: { send?: (proc: ChildProcess, signal: NodeJS.Signals) => void; forceAfterMs?: number; resendEveryMs?: number } = {},
): Promise<void> {
  if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return;
  const send = options.send ?? ((p, s) => void p.kill(s));
  const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
  send(proc, signal);
  const timer = options.forceAfterMs === undefined ? undefined : setTimeout(() => send(proc, "SIGKILL"), options.forceAfterMs);
  const again = options.resendEveryMs === undefined ? undefined : setInterval(() => send(proc, signal), options.resendEveryMs);
  await exited;
  clearTimeout(timer);
  clearInterval(again);
}
