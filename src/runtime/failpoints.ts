/**
 * Test-only crash points. `CONVEYOR_FAILPOINTS=after-handler` (or `after-handler:5` for the 5th
 * time it is reached; several comma-separated) makes the worker process SIGKILL itself at that
 * point, so tests can crash a worker exactly between "did the work" and "acknowledged".
 * Unset, this costs one Map lookup on an empty map.
 */
export type FailpointName =
  /** Jobs claimed, handler not started. */
  | "after-claim"
  /** Handler returned, acknowledgement not sent. */
  | "after-handler"
  /** Acknowledgement applied by the store, worker not yet told. */
  | "after-ack"
  /** Outbox relay: the target confirmed a batch, the outbox does not know yet. */
  | "relay-after-publish";

const armed = new Map<string, number>();
for (const entry of (process.env.CONVEYOR_FAILPOINTS ?? "").split(",")) {
  const [name, nth] = entry.trim().split(":");
  if (name) armed.set(name, nth ? Math.max(1, Number(nth)) : 1);
}

export function failpoint(name: FailpointName): void {
  if (armed.size === 0) return;
  const remaining = armed.get(name);
  if (remaining === undefined) return;
  if (remaining > 1) {
    armed.set(name, remaining - 1);
    return;
  }
  process.stderr.write(`conveyor: failpoint ${name} reached, killing process ${process.pid}\n`);
  process.kill(process.pid, "SIGKILL");
}
