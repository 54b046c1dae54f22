/**
 * What the chaos runner reads from a worker's log (its stderr: JSON lines from the CLI's logger,
 * plus a few plain lines from the failpoints and the watchdog).
 */
import { existsSync, readFileSync } from "node:fs";
import type { LeaseLapseRecord, LogFacts } from "./records.js";

export interface WorkerLog extends LogFacts {
  /** Time of "received SIGTERM" (the worker's clock), or null. */
  sigtermAt: number | null;
  /** True after "exiting 0", false after "exiting 1", null when neither was logged. */
  drained: boolean | null;
  /** How the process said it died, when it did: "failpoint" or "watchdog". */
  selfKill: "failpoint" | "watchdog" | null;
  /** The log line that said so (the checker credits a failpoint or watchdog kill only with it). */
  selfKillLine: string | null;
}

export function emptyFacts(): LogFacts {
  return { settleRefused: 0, leaseLost: 0, watchdogKills: 0, failpointKills: {}, workerErrors: 0, lapses: [] };
}

export function addFacts(into: LogFacts, from: LogFacts): void {
  into.settleRefused += from.settleRefused;
  into.leaseLost += from.leaseLost;
  into.watchdogKills += from.watchdogKills;
  for (const [name, n] of Object.entries(from.failpointKills)) into.failpointKills[name] = (into.failpointKills[name] ?? 0) + n;
  into.workerErrors += from.workerErrors;
  if (from.lapses?.length) into.lapses = [...(into.lapses ?? []), ...from.lapses];
}

interface Line {
  time?: string;
  level?: string;
  msg?: string;
  workerId?: string;
  jobIds?: unknown;
  lapsedForMs?: unknown;
  tickLateMs?: unknown;
  renewalPendingMs?: unknown;
}

/** The worker's "leases lapsed" warning as a record, or null when a field is missing (never guessed). */
function lapseOf(line: Line): LeaseLapseRecord | null {
  const pid = /:(\d+):[0-9a-f]+$/.exec(line.workerId ?? "");
  const at = line.time ? Date.parse(line.time) : NaN;
  const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : null);
  const [lapsedForMs, tickLateMs, renewalPendingMs] = [num(line.lapsedForMs), num(line.tickLateMs), num(line.renewalPendingMs)];
  const jobIds = Array.isArray(line.jobIds) && line.jobIds.every((j) => typeof j === "string") ? line.jobIds : null;
  if (!pid || Number.isNaN(at) || jobIds === null || lapsedForMs === null || tickLateMs === null || renewalPendingMs === null) return null;
  return { wpid: Number(pid[1]), at, jobIds, lapsedForMs, tickLateMs, renewalPendingMs };
}

export function readWorkerLog(path: string): WorkerLog {
  const out: WorkerLog = { ...emptyFacts(), sigtermAt: null, drained: null, selfKill: null, selfKillLine: null };
  if (!existsSync(path)) return out;
  let drainedLogged = false;
  let releasedLogged = false;
  for (const text of readFileSync(path, "utf8").split("\n")) {
    const failpoint = /failpoint (\S+) reached, killing process/.exec(text);
    if (failpoint) {
      out.failpointKills[failpoint[1]!] = (out.failpointKills[failpoint[1]!] ?? 0) + 1;
      out.selfKill = "failpoint";
      out.selfKillLine = text;
      continue;
    }
    if (!text.startsWith("{")) continue;
    let line: Line;
    try {
      line = JSON.parse(text) as Line;
    } catch {
      continue;
    }
    const msg = line.msg ?? "";
    if (msg.startsWith("settle refused")) out.settleRefused++;
    else if (msg.startsWith("lease lost")) out.leaseLost++;
    else if (msg.startsWith("leases lapsed")) {
      const lapse = lapseOf(line);
      if (lapse) (out.lapses ??= []).push(lapse);
    } else if (msg.includes("watchdog limit")) {
      out.watchdogKills++;
      out.selfKill = "watchdog";
      out.selfKillLine = msg;
    } else if (msg.startsWith("received SIGTERM") && out.sigtermAt === null) out.sigtermAt = line.time ? Date.parse(line.time) : null;
    else if (msg.endsWith("exiting 0")) drainedLogged = true;
    else if (msg.endsWith("exiting 1")) releasedLogged = true;
    if (line.level === "error") out.workerErrors++;
  }
  // "exiting 0" is an info line, printed only with --verbose; "exiting 1" is a warning. So after
  // a SIGTERM, silence means drained.
  if (out.sigtermAt !== null) out.drained = releasedLogged ? false : true;
  else if (drainedLogged || releasedLogged) out.drained = !releasedLogged;
  return out;
}
