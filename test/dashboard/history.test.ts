/** The dashboard's per-minute history ring and its sessions, on a fake clock. */
import { describe, expect, it } from "vitest";
import type { WorkerEvents } from "../../src/core/events.js";
import type { JobRecord } from "../../src/core/job.js";
import { MetricsHistory } from "../../src/dashboard/history.js";

const MINUTE = 60_000;

/** A stand-in for a worker's event emitter: the history only subscribes with `on`. */
class Events {
  private readonly listeners = new Map<string, Array<(p: unknown) => void>>();
  on<K extends keyof WorkerEvents>(event: K, listener: (payload: WorkerEvents[K]) => void): this {
    const list = this.listeners.get(event) ?? [];
    list.push(listener as (p: unknown) => void);
    this.listeners.set(event, list);
    return this;
  }
  emit<K extends keyof WorkerEvents>(event: K, payload: WorkerEvents[K]): void {
    for (const l of this.listeners.get(event) ?? []) l(payload);
  }
}

const job = (queue: string) => ({ queue }) as JobRecord;

describe("MetricsHistory", () => {
  it("buckets completions, failures and percentiles per queue and minute, and forgets past its ring", () => {
    let now = 10 * MINUTE + 5_000;
    const history = new MetricsHistory({ minutes: 3, samplesPerMinute: 1000 }, () => now);
    const events = new Events();
    history.attach(events);
    expect(history.attached).toBe(1);
    for (let i = 1; i <= 100; i++) {
      events.emit("job:started", { job: job("q"), workerId: "w", waitMs: i });
      events.emit("job:completed", { job: job("q"), result: null, durationMs: i * 10 });
    }
    events.emit("job:failed", { job: job("q"), error: new Error("x"), durationMs: 5, retryDelayMs: 100 });
    events.emit("job:failed", { job: job("q"), error: new Error("x"), durationMs: 5, retryDelayMs: null });
    events.emit("job:completed", { job: job("other"), result: null, durationMs: 1 });

    let series = history.series("q");
    expect(series.map((s) => s.t)).toEqual([8 * MINUTE, 9 * MINUTE, 10 * MINUTE]);
    const current = series[2]!;
    expect(current).toMatchObject({ completed: 100, failed: 2, dead: 1, waitMs: { p50: 50, p95: 95, p99: 99 } });
    expect(current.runMs!.p99).toBe(990);
    expect(series[0]).toEqual({ t: 8 * MINUTE, completed: 0, failed: 0, dead: 0, waitMs: null, runMs: null });
    expect(history.series("other").at(-1)!.completed).toBe(1);

    // Two minutes on, the first bucket is still in the window; four minutes on it is gone.
    now += 2 * MINUTE;
    events.emit("job:completed", { job: job("q"), result: null, durationMs: 1 });
    series = history.series("q");
    expect(series.map((s) => s.completed)).toEqual([100, 0, 1]);
    now += 2 * MINUTE;
    series = history.series("q");
    expect(series.map((s) => s.completed)).toEqual([1, 0, 0]);
    expect(history.series("q", 1)).toHaveLength(1);
  });

  it("keeps a bounded sample per minute and a bounded number of queues", () => {
    const history = new MetricsHistory({ samplesPerMinute: 8, maxQueues: 2 }, () => 0);
    const events = new Events();
    history.attach(events);
    for (let i = 0; i < 10_000; i++) events.emit("job:completed", { job: job("q"), result: null, durationMs: i });
    const p = history.series("q", 1)[0]!;
    expect(p.completed).toBe(10_000);
    expect(p.runMs!.p50).toBeGreaterThanOrEqual(0);
    for (const q of ["a", "b", "c"]) events.emit("job:completed", { job: job(q), result: null, durationMs: 1 });
    // "q" and "a" are tracked; "b" and "c" were over the limit.
    expect(history.series("a", 1)[0]!.completed).toBe(1);
    expect(history.series("c", 1)[0]!.completed).toBe(0);
  });
});
