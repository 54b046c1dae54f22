/**
 * The final state of a store that keeps no job records (RabbitMQ: `capabilities.jobRecords` is
 * false, docs/amqp.md), built from what the harness observes independently of the workers' and
 * the broker's word about a job's state:
 *
 * - completed: a handler wrote an `end ok` record for it (the handlers' ledger, fsynced before
 *   the worker may acknowledge). A worker that acknowledges without running, or drops a message
 *   after a failed run, leaves no such record: its job is then neither completed nor anywhere in
 *   the broker, so it is lost;
 * - dead: its dead letter was read from `<prefix>~Q~dead` at the end (with the forensics the
 *   backend wrote: error, attempts with worker pid and times);
 * - waiting: its message is still in the work queue or a delay queue after the drain (stranded).
 *
 * A job in the dead queue is dead even when some run of it ended ok (an acknowledgement lost to
 * a fault, the job run again and failed for good); one still queued is waiting likewise.
 */
import type { FinalJob, RunRecord } from "./records.js";

export interface BrokerEvidence {
  /** The dead letters, as the backend's `list({ state: "dead" })` reads them. */
  dead: FinalJob[];
  /** Job ids of the messages left in the work and delay queues after the workers exited. */
  queued: string[];
  /** The handlers' ledger. */
  runs: RunRecord[];
}

export function brokerFinal(evidence: BrokerEvidence): FinalJob[] {
  const out = new Map<string, FinalJob>();
  for (const d of evidence.dead) out.set(d.id, d);
  for (const id of evidence.queued) {
    if (out.has(id)) continue;
    out.set(id, { id, name: "", state: "waiting", attempt: 0, maxAttempts: 0, result: null, error: null, history: [] });
  }
  for (const r of evidence.runs) {
    if (r.t !== "end" || !r.ok || out.has(r.id)) continue;
    out.set(r.id, { id: r.id, name: "", state: "completed", attempt: r.attempt, maxAttempts: 0, result: null, error: null, history: [] });
  }
  return [...out.values()];
}
