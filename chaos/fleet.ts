/**
 * The chaos runner's process supervisor: three `conveyor worker` processes started through the
 * CLI and one producer, restarted when they die (as an orchestrator would), and the faults that
 * act on processes (SIGKILL, SIGSTOP/SIGCONT, SIGTERM). Every fault is recorded as it happened.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { AppendLog } from "./ledger.js";
import { readWorkerLog } from "./logs.js";
import type { Prng } from "./prng.js";
import type { ProducerConfig } from "./producer.js";
import type { DeathCause, FaultEvent, TermObservation } from "./records.js";
import { failpointFor, queueName, WORKER, type ScenarioDef } from "./scenarios.js";

export const ROOT = fileURLToPath(new URL("..", import.meta.url));

const RESTART_DELAY_MS = 500;
const MAX_RESTART_DELAY_MS = 4_000;
/** A process that lived less than this before dying counts towards a crash loop (longer restart delay). */
const SHORT_LIFE_MS = 2_000;
/** Beyond the grace period, how long a SIGTERMed worker may take before it is SIGKILLed. */
export const TERM_TOLERANCE_MS = 5_000;

type SlotState = "down" | "up" | "stopped" | "terminating";

interface Slot {
  index: number;
  name: string;
  sandbox: boolean;
  child: ChildProcess | null;
  pid: number;
  incarnation: number;
  startedAt: number;
  state: SlotState;
  logPath: string;
  /** Set by the runner just before it kills the process, so the death is attributed. */
  cause: DeathCause | null;
  stoppedAt: number | null;
  /** /proc showed the process stopped (state T) after the SIGSTOP: the stop is observed. */
  stopSeen: boolean;
  /** Seen stopped while holding the store's one write lock (FleetOptions.holdsWriteLock). */
  stopHeldWriteLock: boolean;
  /** Start of the current stretch of availability, or null while unavailable. */
  availableSince: number | null;
  /** The current process said it started ("conveyor worker … on …"): its rescuer runs. */
  ready: boolean;
  /** The failpoint the current process was started with (it kills itself there), or null. */
  failpoint: string | null;
  readyPoll: NodeJS.Timeout | null;
  contTimer: NodeJS.Timeout | null;
  term: { sentAt: number; forced: boolean; killTimer: NodeJS.Timeout | null } | null;
  restartDelayMs: number;
  restartTimer: NodeJS.Timeout | null;
}

export interface FleetOptions {
  dir: string;
  url: string;
  def: ScenarioDef;
  /** Stream for the failpoints of worker starts. */
  prng: Prng;
  events: AppendLog;
  producer: Omit<ProducerConfig, "incarnation" | "url" | "dir">;
  /** A planted bug for the workers (CHAOS_PLANT, chaos/handlers.ts): tests only, to prove the checker fails. */
  plant?: string;
  /** Whether a (stopped) process holds the store's one write lock (Store.holdsWriteLock); absent: no such lock. */
  holdsWriteLock?: (pid: number) => boolean;
}

export class Fleet {
  readonly faults: FaultEvent[] = [];
  readonly terms: TermObservation[] = [];
  readonly sandboxedPids: number[] = [];
  readonly workerLogs: string[] = [];
  /** When each worker process was up and able to work (spawned, not stopped, not shutting down). */
  readonly available: Array<{ wpid: number; from: number; to: number }> = [];
  readonly slots: Slot[];
  restarts = 0;
  /** Failpoints are armed only while faults are on. */
  faultsOn = true;
  private running = true;
  private producer: ChildProcess | null = null;
  private producerIncarnation = 0;
  private producerExited: Promise<void> = Promise.resolve();
  private producerWanted = true;
  private producerRestart: NodeJS.Timeout | null = null;
  /** How long every process stays down in a SQLite store crash. */
  private crashDownMs = RESTART_DELAY_MS;
  private readonly logDir: string;

  constructor(private readonly options: FleetOptions) {
    this.logDir = join(options.dir, "logs");
    mkdirSync(this.logDir, { recursive: true });
    this.slots = Array.from({ length: options.def.workers ?? WORKER.slots }, (_, index) => ({
      index,
      name: `w${index}`,
      sandbox: options.def.sandboxSlots.includes(index),
      child: null,
      pid: 0,
      incarnation: 0,
      startedAt: 0,
      state: "down",
      logPath: "",
      cause: null,
      stoppedAt: null,
      stopSeen: false,
      stopHeldWriteLock: false,
      availableSince: null,
      ready: false,
      failpoint: null,
      readyPoll: null,
      contTimer: null,
      term: null,
      restartDelayMs: RESTART_DELAY_MS,
      restartTimer: null,
    }));
  }

  private available_(slot: Slot, at: number): void {
    if (slot.ready && slot.state === "up" && slot.availableSince === null) slot.availableSince = at;
  }

  /** Watches a starting worker's log for its start line: from then on it is available. */
  private watchReady(slot: Slot, child: ChildProcess): void {
    const poll = setInterval(() => {
      if (slot.child !== child) {
        clearInterval(poll);
        return;
      }
      let text = "";
      try {
        text = readFileSync(slot.logPath, "utf8");
      } catch {
        return;
      }
      if (!text.includes("conveyor worker ")) return;
      clearInterval(poll);
      slot.readyPoll = null;
      slot.ready = true;
      const at = Date.now();
      this.event({ t: "ready", slot: slot.name, wpid: slot.pid, at });
      this.available_(slot, at);
    }, 50);
    slot.readyPoll = poll;
  }

  private unavailable(slot: Slot, at: number): void {
    if (slot.availableSince === null) return;
    this.available.push({ wpid: slot.pid, from: slot.availableSince, to: at });
    slot.availableSince = null;
  }

  private event(e: object): void {
    this.append({ ...e, at: (e as { at?: number }).at ?? Date.now() });
  }

  /** The event log; an exit reported after the run closed it is dropped, not thrown. */
  private append(e: object): void {
    if (this.options.events.closed) return;
    this.options.events.append(e);
  }

  /** Records a fault that happened (also those the runner causes outside the fleet). */
  record(f: FaultEvent): void {
    this.fault(f);
  }

  private fault(f: FaultEvent): void {
    this.faults.push(f);
    this.append(f);
  }

  start(): void {
    for (const slot of this.slots) this.spawnWorker(slot);
    this.spawnProducer();
  }

  // ------------------------------------------------------------------ workers

  private spawnWorker(slot: Slot): void {
    if (!this.running) return;
    slot.restartTimer = null;
    slot.incarnation++;
    slot.logPath = join(this.logDir, `${slot.name}-${slot.incarnation}.log`);
    this.workerLogs.push(slot.logPath);
    const failpoint = this.faultsOn ? failpointFor(this.options.def, this.options.prng) : null;
    slot.failpoint = failpoint;
    const args = [
      "--import",
      "tsx",
      "src/cli/bin.ts",
      "worker",
      "--db",
      this.options.url,
      "--queue",
      queueName(slot.index % (this.options.def.queues ?? 1)),
      "--handlers",
      "chaos/handlers.ts",
      "--concurrency",
      String(WORKER.concurrency),
      "--lease-ms",
      String(WORKER.leaseMs),
      "--rescue-interval-ms",
      String(WORKER.rescueIntervalMs),
      "--poll-interval-ms",
      String(WORKER.pollIntervalMs),
      "--shutdown-grace-ms",
      String(WORKER.shutdownGraceMs),
      ...(slot.sandbox ? ["--sandbox"] : []),
      // One worker claims ahead of its free slots, so every fault also hits jobs that are held
      // by a worker but not started (rescued after their lease, released on SIGTERM).
      ...(slot.index === WORKER.prefetchSlot ? ["--prefetch", String(WORKER.prefetch)] : []),
    ];
    const fd = openSync(slot.logPath, "a");
    const child = spawn(process.execPath, args, {
      cwd: ROOT,
      env: {
        ...process.env,
        CHAOS_DIR: this.options.dir,
        CHAOS_SLOT: slot.name,
        CHAOS_PLANT: this.options.plant ?? "",
        ...(failpoint ? { CONVEYOR_FAILPOINTS: failpoint } : { CONVEYOR_FAILPOINTS: "" }),
      },
      stdio: ["ignore", fd, fd],
    });
    closeSync(fd);
    slot.child = child;
    slot.pid = child.pid ?? 0;
    slot.startedAt = Date.now();
    slot.state = "up";
    slot.cause = null;
    slot.term = null;
    slot.stoppedAt = null;
    slot.ready = false;
    this.watchReady(slot, child);
    if (slot.sandbox) this.sandboxedPids.push(slot.pid);
    this.event({ t: "spawn", slot: slot.name, wpid: slot.pid, incarnation: slot.incarnation, failpoint, sandbox: slot.sandbox });
    child.once("exit", (code, signal) => this.onWorkerExit(slot, child, code, signal));
  }

  private onWorkerExit(slot: Slot, child: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    if (slot.child !== child) return;
    const at = Date.now();
    const wpid = slot.pid;
    const wasReady = slot.ready;
    this.unavailable(slot, at);
    if (slot.readyPoll) clearInterval(slot.readyPoll);
    slot.readyPoll = null;
    slot.ready = false;
    slot.child = null;
    if (slot.contTimer) clearTimeout(slot.contTimer);
    slot.contTimer = null;
    const log = readWorkerLog(slot.logPath);
    if (slot.stoppedAt !== null) {
      // A SIGSTOP never seen to take hold before the process died (another fault, or its own
      // watchdog, killed it first) is no fault: it is kept as evidence, and its death covers it.
      if (slot.stopSeen) this.fault({ t: "stop", slot: slot.name, wpid, from: slot.stoppedAt, to: at, seen: true, ...this.lockNote(slot) });
      else this.event({ t: "stop-missed", slot: slot.name, wpid, from: slot.stoppedAt, at });
      slot.stoppedAt = null;
    }
    // A death is attributed only to what shows: the runner's SIGKILL when the process died of a
    // SIGKILL, a failpoint or watchdog when the process said so in its log.
    const causeOf = (fallback: DeathCause): DeathCause => {
      if (slot.cause !== null && (slot.cause !== "killed" || signal === "SIGKILL")) return slot.cause;
      return log.selfKill ?? fallback;
    };
    const said = log.selfKillLine;
    const term = slot.term;
    if (term) {
      if (term.killTimer) clearTimeout(term.killTimer);
      // A clean exit after the signal, or one the harness had to force: both are judged.
      // Killed by something else meanwhile (a store crash): that is a death, not a shutdown.
      const judged = code !== null || term.forced;
      if (this.running && judged) {
        this.fault({ t: "term", slot: slot.name, wpid, from: term.sentAt, to: at, code, signal });
        this.terms.push({
          slot: slot.name,
          wpid,
          sentAt: term.sentAt,
          receivedAt: log.sigtermAt,
          exitAt: term.forced ? null : at,
          code,
          signal,
          loggedDrained: log.drained,
          forced: term.forced,
        });
      } else if (this.running) {
        this.fault({ t: "death", slot: slot.name, wpid, at, cause: causeOf("unknown"), code, signal, said });
      }
    } else if (this.running || !(code === 0 || code === 1)) {
      const cause = causeOf(code !== null ? (wasReady ? "exited" : "start-failed") : "unknown");
      this.fault({ t: "death", slot: slot.name, wpid, at, cause, code, signal, said });
    }
    slot.state = "down";
    slot.term = null;
    if (!this.running) return;
    // Restart like an orchestrator, backing off when the process keeps dying young.
    const lived = at - slot.startedAt;
    slot.restartDelayMs = lived < SHORT_LIFE_MS ? Math.min(MAX_RESTART_DELAY_MS, slot.restartDelayMs * 2) : RESTART_DELAY_MS;
    this.restarts++;
    slot.restartTimer = setTimeout(() => this.spawnWorker(slot), slot.cause === "store-crash" ? this.crashDownMs : slot.restartDelayMs);
  }

  /**
   * The first slot from `preferred` on that is up (not down, stopped or shutting down); with
   * `started`, only one whose worker has started (SIGTERM before that meets Node's default action:
   * the CLI installs its handlers once the backend is open).
   */
  target(preferred: number, started = false, avoidFailpoints = false): Slot | null {
    // A SIGTERM aimed at a worker with a failpoint armed can end in the failpoint's own kill
    // while the worker drains, and the run then never sees a SIGTERM exit: prefer one without.
    for (const pass of avoidFailpoints ? [true, false] : [false]) {
      for (let i = 0; i < this.slots.length; i++) {
        const slot = this.slots[(preferred + i) % this.slots.length]!;
        if (pass && slot.failpoint !== null) continue;
        if (slot.state === "up" && slot.child && (!started || slot.ready)) return slot;
      }
    }
    return null;
  }

  /** SIGKILLs the slot's process; true when the signal was delivered. */
  kill(slot: Slot, cause: DeathCause = "killed"): boolean {
    if (!slot.child) return false;
    slot.cause = cause;
    this.event({ t: "kill", slot: slot.name, wpid: slot.pid, cause });
    return slot.child.kill("SIGKILL");
  }

  /**
   * SIGSTOP for `forMs`, then SIGCONT. Resolves true once the process is seen stopped, false when
   * it was not up, or died before the stop was seen (then nothing is recorded as a fault, and the
   * caller may aim the fault at another worker).
   */
  async stop(slot: Slot, forMs: number): Promise<boolean> {
    if (!slot.child || slot.state !== "up") return false;
    slot.child.kill("SIGSTOP");
    slot.state = "stopped";
    slot.stoppedAt = Date.now();
    slot.stopSeen = false;
    slot.stopHeldWriteLock = false;
    const child = slot.child;
    this.unavailable(slot, slot.stoppedAt);
    slot.contTimer = setTimeout(() => this.cont(slot), forMs);
    // Signals are delivered asynchronously, and a loaded machine may take a while: look until the
    // process shows stopped, it is gone, or SIGCONT comes (which looks once more).
    for (let waited = 0; waited < forMs; waited += 20) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      if (slot.child !== child || slot.stoppedAt === null) return slot.stopSeen;
      if (processState(slot.pid) === "T") this.seenStopped(slot);
      if (slot.stopSeen) return true;
    }
    return slot.stopSeen;
  }

  cont(slot: Slot): void {
    if (slot.contTimer) clearTimeout(slot.contTimer);
    slot.contTimer = null;
    if (!slot.child || slot.stoppedAt === null) return;
    const from = slot.stoppedAt;
    if (!slot.stopSeen && processState(slot.pid) === "T") this.seenStopped(slot);
    const seen = slot.stopSeen;
    slot.child.kill("SIGCONT");
    const to = Date.now();
    slot.stoppedAt = null;
    slot.state = "up";
    this.available_(slot, to);
    this.fault({ t: "stop", slot: slot.name, wpid: slot.pid, from, to, seen, ...this.lockNote(slot) });
  }

  /**
   * The process is frozen: what locks it holds cannot change until the SIGCONT, so one look at
   * them now tells whether the whole store is blocked for the stop's length (SQLite's one writer).
   */
  private seenStopped(slot: Slot): void {
    slot.stopSeen = true;
    slot.stopHeldWriteLock = this.options.holdsWriteLock?.(slot.pid) ?? false;
  }

  private lockNote(slot: Slot): { heldWriteLock?: true } {
    return slot.stopHeldWriteLock ? { heldWriteLock: true } : {};
  }

  /**
   * SIGTERM; SIGKILL (and judged "forced") when it outlives the checker's widest limit: grace + a
   * lease (acknowledgements wait for a store that is down) + tolerance.
   */
  term(slot: Slot): void {
    if (!slot.child || slot.state !== "up") return;
    const child = slot.child;
    slot.state = "terminating";
    this.unavailable(slot, Date.now());
    slot.term = {
      sentAt: Date.now(),
      forced: false,
      killTimer: setTimeout(
        () => {
          if (slot.child !== child || !slot.term) return;
          slot.term.forced = true;
          child.kill("SIGKILL");
        },
        WORKER.shutdownGraceMs + WORKER.leaseMs + TERM_TOLERANCE_MS,
      ),
    };
    child.kill("SIGTERM");
  }

  /**
   * A rollout: SIGTERM every worker in turn, as a Deployment with maxUnavailable 1 does; the next
   * only once the previous one's replacement has started (printed its start line). Resolves with
   * the rollout's window.
   */
  async rollingRestart(): Promise<{ from: number; to: number; restarted: number }> {
    const from = Date.now();
    let restarted = 0;
    const waitReady = async (slot: Slot, notPid: number) => {
      const deadline = Date.now() + 60_000;
      while (!(slot.child && slot.ready && slot.state === "up" && slot.pid !== notPid)) {
        if (!this.running || Date.now() > deadline) return false;
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      return true;
    };
    for (const slot of this.slots) {
      if (!this.running) break;
      if (!(await waitReady(slot, 0))) continue;
      const pid = slot.pid;
      this.term(slot);
      restarted++;
      await waitReady(slot, pid);
    }
    return { from, to: Date.now(), restarted };
  }

  /**
   * SQLite's "store crash": every process that has the database open dies at once (SIGKILL), and
   * comes back after `downMs`. Returns the outage window.
   */
  crashAll(downMs: number): { from: number; to: number; killed: number } {
    this.crashDownMs = downMs;
    const from = Date.now();
    let killed = 0;
    for (const slot of this.slots) {
      if (slot.term?.killTimer) clearTimeout(slot.term.killTimer);
      slot.term = null;
      if (slot.child && this.kill(slot, "store-crash")) killed++;
    }
    if (this.producer) {
      this.event({ t: "kill", slot: "producer", pid: this.producer.pid, cause: "store-crash" });
      if (this.producer.kill("SIGKILL")) killed++;
    }
    return { from, to: from + downMs, killed };
  }

  // ------------------------------------------------------------------ producer

  private spawnProducer(): void {
    this.producerRestart = null;
    if (!this.producerWanted) return;
    const incarnation = ++this.producerIncarnation;
    const config: ProducerConfig = { ...this.options.producer, url: this.options.url, dir: this.options.dir, incarnation };
    const fd = openSync(join(this.logDir, `producer-${incarnation}.log`), "a");
    const child = spawn(process.execPath, ["--import", "tsx", "chaos/producer.ts"], {
      cwd: ROOT,
      env: { ...process.env, CHAOS_PRODUCER: JSON.stringify(config) },
      stdio: ["ignore", fd, fd],
    });
    closeSync(fd);
    this.producer = child;
    this.event({ t: "spawn", slot: "producer", pid: child.pid, incarnation });
    this.producerExited = new Promise<void>((resolve) => {
      child.once("exit", (code, signal) => {
        this.event({ t: "exit", slot: "producer", pid: child.pid, code, signal });
        if (this.producer === child) this.producer = null;
        if (this.producerWanted && this.running) {
          this.producerRestart = setTimeout(() => this.spawnProducer(), signal === "SIGKILL" ? this.crashDownMs : RESTART_DELAY_MS);
        }
        resolve();
      });
    });
  }

  /** Stops the producer (SIGTERM: it finishes the adds in flight), waits for it. */
  async stopProducer(): Promise<void> {
    this.producerWanted = false;
    if (this.producerRestart) clearTimeout(this.producerRestart);
    const child = this.producer;
    if (child) {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
      await this.producerExited;
      clearTimeout(timer);
    }
  }

  // ------------------------------------------------------------------ phases

  /** End of the fault phase: resume stopped workers, restart the dead ones now, no more failpoints. */
  calm(): void {
    this.faultsOn = false;
    for (const slot of this.slots) {
      if (slot.stoppedAt !== null) this.cont(slot);
      if (slot.restartTimer) {
        clearTimeout(slot.restartTimer);
        this.spawnWorker(slot);
      }
    }
  }

  /** True when every slot has a live, running worker. */
  allUp(): boolean {
    return this.slots.every((s) => s.child !== null && s.state === "up");
  }

  /** The final stop: no restarts, SIGTERM to every worker, SIGKILL after grace + tolerance. */
  async shutdown(): Promise<Array<{ slot: string; code: number | null; signal: string | null }>> {
    this.running = false;
    for (const slot of this.slots) this.unavailable(slot, Date.now());
    await this.stopProducer();
    const results: Array<{ slot: string; code: number | null; signal: string | null }> = [];
    await Promise.all(
      this.slots.map(async (slot) => {
        if (slot.restartTimer) clearTimeout(slot.restartTimer);
        const child = slot.child;
        if (!child) return;
        if (slot.stoppedAt !== null) child.kill("SIGCONT");
        const done = new Promise<void>((resolve) =>
          child.once("exit", (code, signal) => {
            results.push({ slot: slot.name, code, signal });
            resolve();
          }),
        );
        if (child.exitCode === null && child.signalCode === null) {
          child.kill("SIGTERM");
          const timer = setTimeout(() => child.kill("SIGKILL"), WORKER.shutdownGraceMs + TERM_TOLERANCE_MS);
          await done;
          clearTimeout(timer);
        }
      }),
    );
    return results;
  }
}

/** A process's state letter from /proc (R, S, T, Z…), or null when it is gone. */
function processState(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0] ?? null;
  } catch {
    return null;
  }
}

/**
 * Processes still alive that carry this run's CHAOS_DIR in their environment (all started by this
 * runner, directly or as sandbox children). Returns their pids.
 */
export function leftovers(dir: string): number[] {
  const found: number[] = [];
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return found;
  }
  const needle = `CHAOS_DIR=${dir}\0`;
  for (const entry of entries) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const env = readFileSync(`/proc/${entry}/environ`, "latin1");
      if (env.includes(needle)) found.push(Number(entry));
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
  return found;
}
