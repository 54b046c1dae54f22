/**
 * The chaos report: one table per backend, a column per scenario, a row per category; bounds
 * that broke are marked and explained below the table.
 */
import type { ScenarioResult } from "./harness.js";

const HEALTHY_DEAD_BOUND = "healthy jobs dead-lettered (each explained by faults)";

type Row = [label: string, cell: (r: ScenarioResult) => string, bound?: string];

const n = (v: number | null | undefined) => (v === null || v === undefined ? "-" : String(v));
/** A figure only one store model has (chaos/checker.ts, StoreModel): "n/a" under the other. */
const recordsOnly = (cell: (r: ScenarioResult) => string) => (r: ScenarioResult) => (r.check?.model === "broker" ? "n/a" : cell(r));
const brokerOnly = (cell: (r: ScenarioResult) => string) => (r: ScenarioResult) => (r.check && r.check.model !== "broker" ? "n/a" : cell(r));

const ROWS: Row[] = [
  ["enqueue attempts", (r) => n(r.check?.metrics.attempted)],
  ["enqueued ok", (r) => n(r.check?.metrics.enqueuedOk)],
  ["enqueue failed / unknown", (r) => (r.check ? `${r.check.metrics.enqueueFailed} / ${r.check.metrics.enqueueUnknown}` : "-")],
  ["lost", (r) => n(r.check?.metrics.lost), "lost"],
  [
    // What an asynchronous promotion lost (chaos/checker.ts, ReplicationWindowMetrics): measured, not in "lost".
    "  acked, not replicated at a kill (async)",
    (r) => {
      const w = r.check?.metrics.replicationWindow;
      return w ? `${w.lost} (${w.asynchronousKills} of ${w.kills} kills async)` : "-";
    },
  ],
  [
    "  replica at kills: max behind B / in step ms",
    (r) => {
      const w = r.check?.metrics.replicationWindow;
      return w ? `${n(w.maxBehindBytes)} / ${n(w.maxInStepAgoMs)}` : "-";
    },
  ],
  ["stranded after drain", (r) => n(r.check?.metrics.stranded), "stranded (not finished after the drain)"],
  ["unexpected", (r) => n(r.check?.metrics.unexpected), "unexpected"],
  ["recovered (unknown enqueue, ran)", (r) => n(r.check?.metrics.recovered)],
  ["duplicated (ran > designed)", (r) => n(r.check?.metrics.duplicated)],
  ["executions", (r) => n(r.check?.metrics.executions)],
  ["max executions of one job", (r) => n(r.check?.metrics.maxExecutions)],
  ["over 1 + faults that hit it", (r) => n(r.check?.metrics.execBoundBroken), "jobs over 'executions <= designed + faults that hit it'"],
  ["dead-lettered", (r) => n(r.check?.metrics.deadLettered)],
  [
    "  healthy, explained by faults",
    (r) =>
      r.check ? `${r.check.metrics.healthyDead} (<= ${r.check.bounds.find((b) => b.name === HEALTHY_DEAD_BOUND)?.limit.replace("<= ", "") ?? "?"})` : "-",
    HEALTHY_DEAD_BOUND,
  ],
  ["  healthy, unexplained (in lost)", (r) => n(r.check?.metrics.healthyDeadUnexplained)],
  ["stale acks refused", (r) => n(r.check?.metrics.staleRefused)],
  ["leases lost (handler aborted)", (r) => n(r.check?.metrics.leaseLost)],
  [
    "leases lapsed, worker said (reports / jobs)",
    (r) => {
      const l = r.check?.metrics.leaseLapses;
      return l ? `${l.reports} / ${l.jobs}` : "-";
    },
  ],
  [
    "  max tick late / renewal out, ms",
    (r) => {
      const l = r.check?.metrics.leaseLapses;
      return l ? `${n(l.maxTickLateMs)} / ${n(l.maxRenewalPendingMs)}` : "-";
    },
  ],
  ["stale acks applied", recordsOnly((r) => n(r.check?.metrics.staleApplied)), "stale acknowledgements applied"],
  ["completions without a run", recordsOnly((r) => n(r.check?.metrics.phantomCompletions)), "completions without a finished run"],
  ["terminal-state regressions", recordsOnly((r) => n(r.check?.metrics.regressions)), "terminal-state regressions"],
  ["broker: still queued after drain", brokerOnly((r) => n(r.check?.metrics.queuedAtEnd)), "stranded (not finished after the drain)"],
  ["broker: runs after dead-lettering", brokerOnly((r) => n(r.check?.metrics.runsAfterDead)), "runs after the job was dead-lettered (broker)"],
  ["broker: dead letters w/o forensics", brokerOnly((r) => n(r.check?.metrics.deadWithoutForensics)), "dead letters without forensics (broker)"],
  ["broker: cut-off runs redelivered", brokerOnly((r) => n(r.check?.metrics.redeliveries))],
  ["broker: max death->redelivered run, ms *", brokerOnly((r) => n(r.check?.metrics.maxRedeliveryMs))],
  [
    "max death->taken back, ms *",
    recordsOnly((r) => (r.check ? `${n(r.check.metrics.maxRecoveryMs)} (<= ${r.check.metrics.recoveryBoundMs})` : "-")),
    "recoveries slower than lease + rescue interval + tolerance",
  ],
  ["  same, wall clock, ms", recordsOnly((r) => n(r.check?.metrics.maxRecoveryWallMs))],
  ["max death->running again, ms *", (r) => n(r.check?.metrics.maxRunAgainMs)],
  ["recoveries measured", recordsOnly((r) => n(r.check?.metrics.recoveries))],
  ["faults: SIGKILL", (r) => n(r.check?.metrics.faults.killed)],
  ["faults: failpoint kills", (r) => n(r.check?.metrics.faults.failpoint)],
  [
    "  after claim / handler / ack",
    (r) => {
      const k = r.check?.metrics.failpointKills;
      return k ? `${k["after-claim"] ?? 0} / ${k["after-handler"] ?? 0} / ${k["after-ack"] ?? 0}` : "-";
    },
  ],
  ["faults: SIGSTOP > lease", (r) => n(r.check?.metrics.faults.stop)],
  // Only SQLite has one write lock for every process; on the other stores a stop blocks only its own worker.
  ["  of them holding the write lock (SQLite)", (r) => (r.backend === "sqlite" ? n(r.check?.metrics.stopsHoldingWriteLock) : "n/a")],
  ["faults: store crashes", (r) => n(r.check?.metrics.faults.outage)],
  ["machine stalls (runner's timer > 1 s late)", (r) => n(r.check?.metrics.machineStalls)],
  ["faults: connection cuts", (r) => n(r.check?.metrics.faults.cut)],
  ["faults: SIGTERM", (r) => n(r.check?.metrics.faults.term)],
  ["faults: pills enqueued", (r) => n(r.check?.metrics.faults.pill)],
  ["worker deaths, other causes (pills)", (r) => n(r.check?.metrics.faults["died-other"]), "worker deaths caused by pills"],
  ["worker starts failed (store down)", (r) => n(r.check?.metrics.faults["start-failed"])],
  ["worker restarts", (r) => n(r.restarts)],
  // Counted from the stored attempt history, which a broker does not keep.
  [
    "SIGTERM: jobs in flight (min-max)",
    recordsOnly((r) => (r.check?.metrics.termInFlight ? `${r.check.metrics.termInFlight.min}-${r.check.metrics.termInFlight.max}` : "-")),
  ],
  ["SIGTERM: exit 0 / exit 1", (r) => (r.check ? `${r.check.metrics.termExits.zero} / ${r.check.metrics.termExits.one}` : "-")],
  ["SIGTERM: claims after signal", (r) => n(r.check?.metrics.claimsAfterSigterm), "claims after SIGTERM"],
  ["SIGTERM: drains over grace", (r) => n(r.check?.metrics.slowDrains), "drains over grace + tolerance"],
  ["SIGTERM: wrong exit codes", (r) => n(r.check?.metrics.wrongExitCodes), "exit codes not as documented (0 drained, 1 released)"],
  ["pills not dead in limits", (r) => n(r.check?.metrics.pillsNotDead), "pills not dead within their attempts"],
  ["max healthy wait (no fault), ms *", (r) => n(r.check?.metrics.maxHealthyWaitMs), "healthy jobs (no fault hit) delayed over a lease"],
  ["drain after faults, ms", (r) => n(r.drainMs)],
  ["processes left behind", (r) => n(r.leftoverProcesses), "processes left behind after the workers exited"],
  [
    "fault kinds never exercised",
    (r) => n(r.check?.bounds.find((b) => b.name === "fault kinds that never happened")?.value),
    "fault kinds that never happened",
  ],
  ["torn ledger lines", (r) => n(r.check?.metrics.tornLines), "torn ledger lines"],
  ["faults recorded, not observed", (r) => n(r.check?.metrics.unobservedFaults), "faults recorded without the observation that proves them"],
  ["failovers / reshards / rollouts", (r) => (r.timings.length ? `${count(r, "failover")} / ${count(r, "reshard")} / ${count(r, "rolling")}` : "-")],
  ["max fault->first job completed, ms", (r) => n(maxOf(r.timings.map((t) => t.firstCompletionMs)))],
];

const count = (r: ScenarioResult, kind: string) => r.timings.filter((t) => t.kind === kind).length;
function maxOf(values: ReadonlyArray<number | null>): number | null {
  const known = values.filter((v): v is number => v !== null);
  return known.length ? Math.max(...known) : null;
}

/**
 * One line per failover, slot move or rollout: when, what, how long until the replica served
 * (or the slots moved, or the rollout ended), and until the first job claimed after it completed.
 */
export function formatTimings(results: readonly ScenarioResult[]): string {
  const lines: string[] = [];
  for (const r of results) {
    for (const t of r.timings) {
      const done = `${t.kind === "failover" ? "promoted" : t.kind === "reshard" ? "moved" : "rolled"} +${t.doneAt - t.at} ms`;
      const restored = t.restoredAt !== null ? `, redundancy back +${t.restoredAt - t.at} ms` : "";
      const first = `first job completed again +${t.firstCompletionMs ?? "never"} ms`;
      const dip = t.dip
        ? `; completions/s before ${t.dip.beforePerSec.toFixed(1)}, during ${t.dip.duringPerSec.toFixed(1)} (lowest 1 s: ${t.dip.minPerSec}), back to 90 % ${t.dip.recoveryMs === null ? "never" : `+${t.dip.recoveryMs} ms`} after`
        : "";
      lines.push(`${r.scenario} (${r.backend}) ${t.kind} at +${(t.offsetMs / 1000).toFixed(1)} s: ${done}${restored}, ${first}${dip}; ${t.detail}`);
    }
  }
  return lines.length ? ["", "Failovers, slot moves, rollouts:", ...lines].join("\n") : "";
}

function broken(r: ScenarioResult, bound: string | undefined): boolean {
  if (!bound || !r.check) return false;
  return r.check.bounds.some((b) => b.name === bound && !b.ok);
}

export function formatTable(results: readonly ScenarioResult[]): string {
  if (results.length === 0) return "";
  const header = ["", ...results.map((r) => r.scenario)];
  const body: string[][] = [];
  for (const [label, cell, bound] of ROWS) {
    body.push([label, ...results.map((r) => (r.notRun ? "" : cell(r) + (broken(r, bound) ? " ✗" : "")))]);
  }
  body.push(["verdict", ...results.map((r) => (r.notRun ? "n/a" : r.ok ? "PASS" : "FAIL"))]);
  const widths = header.map((_, i) => Math.max(...[header, ...body].map((row) => (row[i] ?? "").length)));
  const line = (row: string[]) => row.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ");
  const first = results[0]!;
  const out = [
    `Conveyor chaos: backend ${first.backend}, seed ${first.seed}, ${first.seconds} s fault phase per scenario`,
    line(header),
    widths.map((w) => "-".repeat(w)).join("  "),
    ...body.map(line),
  ];
  const notes: string[] = [];
  for (const r of results) {
    if (r.notRun) notes.push(`${r.scenario}: not run (${r.notRun})`);
    for (const why of r.check?.metrics.healthyDeadWhy ?? []) notes.push(`${r.scenario}: healthy job dead-lettered: ${why}`);
    for (const b of r.check?.bounds ?? []) {
      if (b.measured && b.value > 0) {
        notes.push(`${r.scenario}: MEASURED ${b.name}: ${b.value}`);
        for (const e of b.examples) notes.push(`    ${e}`);
      }
      if (b.ok) continue;
      notes.push(`${r.scenario}: BROKEN ${b.name} ${b.limit}: ${b.value}`);
      for (const e of b.examples) notes.push(`    ${e}`);
    }
  }
  out.push(
    "* counting only time when some worker and the store were up. Taken back: rescued or running again,",
    "  whichever came first (bounded); running again adds the wait for a free slot (not bounded).",
  );
  if (notes.length) out.push("", ...notes);
  return out.join("\n");
}
