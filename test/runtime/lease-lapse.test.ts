/**
 * A worker whose process gets no CPU for longer than a lease (a loaded machine, a handler blocking
 * the event loop) cannot renew its leases: the store may hand the jobs to another worker, and
 * they run twice. The worker cannot prevent that, but it must say so ("worker:leases-lapsed",
 * logged as a warning), so an operator (and the chaos checker) can tell a starved process from a
 * fault of the store.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { readWorkerLog } from "../../chaos/logs.js";
import { Queue, Worker, type Backend, type Logger } from "../../src/index.js";
import { FakeClock, type ClockTimer, type TimerClock } from "../../src/core/clock.js";
import { ConveyorMetrics } from "../../src/observability/metrics.js";
import { cleanupRuntimeBackends, RUNTIME_BACKENDS } from "../helpers/runtime-backends.js";
import { waitFor } from "../helpers/wait-for.js";

/**
 * The store's clock (a FakeClock) and the worker's view of it. While `starve` moves time on, the
 * worker's timers that fall due are held, and run (late) only once it is over: the process got
 * no CPU meanwhile, while the store and the rest of the world went on.
 */
class StarvableClock implements TimerClock {
  private starved = false;
  private held: Array<() => void> = [];
  constructor(readonly store: FakeClock) {}
  now(): number {
    return this.store.now();
  }
  after(ms: number, fn: () => void): ClockTimer {
    return this.store.after(ms, () => {
      if (this.starved) this.held.push(fn);
      else fn();
    });
  }
  starve(ms: number): void {
    this.beginStarving(ms);
    this.endStarving();
  }
  /** Moves time on while the worker's timers are held, until endStarving (I/O answers still arrive). */
  beginStarving(ms: number): void {
    this.starved = true;
    this.store.advance(ms);
  }
  endStarving(): void {
    this.starved = false;
    for (const fn of this.held.splice(0)) fn();
  }
}

const LEASE_MS = 300;
const HEARTBEAT_MS = 100;

describe.each(RUNTIME_BACKENDS)("lease lapses on $name", (store) => {
  let backend: Backend;
  let queue: Queue;
  let clock: StarvableClock;
  const workers: Worker[] = [];
  let lapses: Array<{ jobIds: string[]; lapsedForMs: number; tickLateMs: number; renewalPendingMs: number }>;
  let finish: (() => void) | undefined;
  /** Heartbeat calls the store has answered. */
  let beats: number;
  /** While set, a heartbeat call waits for it before it reaches the store. */
  let heartbeatGate: Promise<void> | null;
  let signals: AbortSignal[];
  /** The worker's log as the CLI writes it (consoleLogger: one JSON line per entry). */
  let logLines: string[];
  let metrics: ConveyorMetrics;

  beforeEach(async () => {
    const storeClock = new FakeClock(Date.now());
    backend = await store.open({ clock: storeClock });
    queue = new Queue("q", { backend });
    clock = new StarvableClock(storeClock);
    lapses = [];
    finish = undefined;
    beats = 0;
    heartbeatGate = null;
    signals = [];
    logLines = [];
    metrics = new ConveyorMetrics();
    startWorker("q");
  });

  /** A worker of `queues` on the starvable clock, its renewals gated and counted, its lapses kept. */
  function startWorker(queues: string, slots: { concurrency?: number; prefetch?: number } = {}): Worker {
    const line = (level: string) => (fields: object, msg: string) => logLines.push(JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields }));
    const logger: Logger = { info: () => {}, warn: line("warn"), error: line("error") };
    const w = new Worker({
      ...slots,
      // Counts the heartbeats answered, so a step waits for the worker's renewal to be back, not
      // only for the store to show it (the worker skips a tick while a renewal is still out).
      backend: new Proxy(backend, {
        get(target, prop) {
          if (prop === "heartbeat") {
            return async (...args: Parameters<Backend["heartbeat"]>) => {
              await heartbeatGate;
              return target.heartbeat(...args).finally(() => beats++);
            };
          }
          const value: unknown = Reflect.get(target, prop, target);
          return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      }),
      queues,
      logger,
      clock,
      leaseMs: LEASE_MS,
      heartbeatIntervalMs: HEARTBEAT_MS,
      maintenance: false,
      handlers: {
        long: () => new Promise<void>((resolve) => (finish = resolve)),
        // Runs until aborted; each run's signal is kept.
        untilAborted: (_job, ctx) => {
          signals.push(ctx.signal);
          return new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve()));
        },
      },
    });
    w.on("worker:leases-lapsed", (lapse) => lapses.push(lapse));
    metrics.observe(w);
    workers.push(w);
    return w;
  }

  afterEach(async () => {
    finish?.();
    await Promise.all(workers.splice(0).map((w) => w.close({ force: true })));
    await backend.close();
  });
  afterAll(cleanupRuntimeBackends);

  async function startLongJob(options: { attempts?: number } = {}): Promise<string> {
    const { id } = await queue.add("long", {}, options);
    await waitFor(async () => (await backend.get(id))?.state === "active" && finish !== undefined, { timeoutMs: 20_000, description: "the job started" });
    return id;
  }

  it("reports the jobs whose leases lapsed while the process got no CPU, with how late its heartbeat ran", async () => {
    const id = await startLongJob();
    // No timer of the worker runs for 1.5 leases; then its first heartbeat tick fires, 350 ms late.
    clock.starve(450);
    expect(lapses).toEqual([{ jobIds: [id], lapsedForMs: 450 - LEASE_MS, tickLateMs: 450 - HEARTBEAT_MS, renewalPendingMs: 0 }]);
    expect((await metrics.registry.getSingleMetric("conveyor_worker_leases_lapsed_total")!.get()).values[0]!.value).toBe(1);
    // The chaos runner reads it back from the log, with the worker's pid (chaos/logs.ts).
    const dir = mkdtempSync(join(tmpdir(), "conveyor-lapse-"));
    try {
      writeFileSync(join(dir, "w0-1.log"), logLines.join("\n") + "\n");
      const read = readWorkerLog(join(dir, "w0-1.log")).lapses ?? [];
      expect(read).toEqual([expect.objectContaining({ wpid: process.pid, jobIds: [id], lapsedForMs: 150, tickLateMs: 350, renewalPendingMs: 0 })]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("reports a lapse the store's answer tells of before the late tick can (the hold is dropped at once)", async () => {
    // One attempt: the rescue below makes it dead, so this worker cannot claim it again meanwhile.
    const id = await startLongJob({ attempts: 1 });
    let openGate!: () => void;
    heartbeatGate = new Promise((resolve) => (openGate = resolve));
    // The first tick sends a renewal, which waits on its way to the store.
    clock.store.advance(HEARTBEAT_MS);
    // The process then gets no CPU for 1.5 leases; meanwhile the store rescues the job.
    clock.beginStarving(450);
    expect((await backend.rescueExpired()).map((r) => r.id)).toEqual([id]);
    // The renewal reaches the store and its answer (lost: expired) comes back before any held tick runs.
    openGate();
    await waitFor(() => beats === 1, { timeoutMs: 20_000, description: "the renewal answered" });
    await new Promise((resolve) => setImmediate(resolve));
    expect(lapses).toEqual([{ jobIds: [id], lapsedForMs: 100 + 450 - LEASE_MS, tickLateMs: 450 - HEARTBEAT_MS, renewalPendingMs: 450 }]);
    clock.endStarving();
    // The late tick does not report it again.
    expect(lapses).toHaveLength(1);
  });

  it("stops a run whose job the store leased to this worker again (the old lease is gone) before the renewal's answer says so", async () => {
    const { id } = await queue.add("untilAborted", {}, { attempts: 3, backoff: { type: "fixed", delayMs: 0 } });
    await waitFor(() => signals.length === 1, { timeoutMs: 20_000, description: "the first run started" });
    const firstToken = (await backend.get(id))!.lease!.token;
    heartbeatGate = new Promise(() => {});
    clock.store.advance(HEARTBEAT_MS);
    // The worker's timers are held for 1.5 leases; meanwhile the store rescues the job, and the
    // rescue's wake-up (the store's notification, not a timer) has the worker claim it again
    // while its renewal (held) still waits for an answer and before any late tick runs.
    clock.beginStarving(450);
    expect((await backend.rescueExpired()).map((r) => r.id)).toEqual([id]);
    await waitFor(() => signals.length === 2, { timeoutMs: 20_000, description: "the second run started" });
    expect((await backend.get(id))!.lease!.token).toBeGreaterThan(firstToken);
    expect(signals[0]!.aborted).toBe(true);
    expect(signals[0]!.reason).toMatchObject({ name: "LeaseLostError" });
    expect(signals[1]!.aborted).toBe(false);
    // The earlier run's lease lapsed, reported as its hold gave way to the new one.
    expect(lapses).toEqual([{ jobIds: [id], lapsedForMs: 100 + 450 - LEASE_MS, tickLateMs: 450 - HEARTBEAT_MS, renewalPendingMs: 450 }]);
    clock.endStarving();
    expect(lapses).toHaveLength(1);
  });

  it("reports a lapse when the renewal fails once the process runs again (the store unreachable)", async () => {
    const id = await startLongJob();
    let failRenewal!: (error: Error) => void;
    heartbeatGate = new Promise((_resolve, reject) => (failRenewal = reject));
    clock.store.advance(HEARTBEAT_MS);
    clock.beginStarving(450);
    failRenewal(new Error("connection refused"));
    // The failed renewal gives up the job whose lease surely expired: reported before any late tick.
    await waitFor(() => lapses.length > 0, { timeoutMs: 20_000, description: "the lapse reported" });
    expect(lapses).toEqual([{ jobIds: [id], lapsedForMs: 100 + 450 - LEASE_MS, tickLateMs: 450 - HEARTBEAT_MS, renewalPendingMs: 450 }]);
    clock.endStarving();
    expect(lapses).toHaveLength(1);
  });

  it("reports a lapse when a buffered job's lease is found expired as its slot frees (before the late tick)", async () => {
    // One slot and one job claimed ahead, on a queue of their own (the worker above takes "q").
    startWorker("one-slot", { concurrency: 1, prefetch: 1 });
    const oneSlot = new Queue("one-slot", { backend });
    const running = await oneSlot.add("long", {});
    await waitFor(async () => (await backend.get(running.id))?.state === "active" && finish !== undefined, {
      timeoutMs: 20_000,
      description: "the first job started",
    });
    const release = finish!;
    const buffered = await oneSlot.add("long", {});
    await waitFor(async () => (await backend.get(buffered.id))?.state === "active", { timeoutMs: 20_000, description: "the second job claimed ahead" });
    heartbeatGate = new Promise(() => {});
    clock.store.advance(HEARTBEAT_MS);
    clock.beginStarving(450);
    // The first job ends while the timers are held: its slot takes the buffered job, whose lease
    // lapsed (reported at once); then the store takes the first job's outcome, and its own
    // lapsed lease is reported as its hold leaves.
    release();
    await waitFor(() => lapses.length === 2, { timeoutMs: 20_000, description: "both lapses reported" });
    const lapse = { lapsedForMs: 100 + 450 - LEASE_MS, tickLateMs: 450 - HEARTBEAT_MS, renewalPendingMs: 450 };
    expect(lapses).toEqual([
      { jobIds: [buffered.id], ...lapse },
      { jobIds: [running.id], ...lapse },
    ]);
    clock.endStarving();
    expect(lapses).toHaveLength(2);
  });

  it("reports a lapse when a job ends after its lease lapsed and the store takes its outcome (no rescue ran)", async () => {
    const id = await startLongJob();
    heartbeatGate = new Promise(() => {});
    clock.store.advance(HEARTBEAT_MS);
    clock.beginStarving(450);
    // The job ends while the timers are held and nothing rescued it: its outcome goes to the store
    // and the hold leaves with the answer, before the late tick could look at it.
    finish!();
    await waitFor(async () => (await backend.get(id))?.state !== "active", { timeoutMs: 20_000, description: "the outcome stored" });
    await waitFor(() => lapses.length > 0, { timeoutMs: 20_000, description: "the lapse reported" });
    expect(lapses).toEqual([{ jobIds: [id], lapsedForMs: 100 + 450 - LEASE_MS, tickLateMs: 450 - HEARTBEAT_MS, renewalPendingMs: 450 }]);
    clock.endStarving();
    expect(lapses).toHaveLength(1);
  });

  it("reports nothing while the heartbeats run on time", async () => {
    const id = await startLongJob();
    for (let step = 1; step <= (3 * LEASE_MS) / HEARTBEAT_MS; step++) {
      clock.store.advance(HEARTBEAT_MS);
      await waitFor(() => beats === step, { timeoutMs: 20_000, description: `heartbeat ${step} answered` });
      // The worker's own bookkeeping after the answer (microtasks) before the next tick.
      await new Promise((resolve) => setImmediate(resolve));
      expect((await backend.get(id))!.lease?.expiresAt).toBe(clock.now() + LEASE_MS);
    }
    expect(lapses).toEqual([]);
    expect((await metrics.registry.getSingleMetric("conveyor_worker_leases_lapsed_total")!.get()).values[0]?.value ?? 0).toBe(0);
  });
});
