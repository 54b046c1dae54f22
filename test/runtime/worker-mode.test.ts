import { afterEach, describe, expect, it } from "vitest";
import type { Backend } from "../../src/backend/contract.js";
import { FakeClock } from "../../src/core/clock.js";
import { silentLogger } from "../../src/core/logger.js";
import { Worker } from "../../src/runtime/worker.js";
import { IllegalModeTransitionError, ModeMachine, type WorkerMode } from "../../src/runtime/worker-mode.js";
import { createTestBackend } from "../../src/testing/index.js";
import { waitFor } from "../helpers/wait-for.js";

describe("worker modes", () => {
  it("allows the designed path and throws on any other move", () => {
    const m = new ModeMachine();
    const path: WorkerMode[] = ["starting", "waiting", "polling", "waiting", "paused", "waiting", "polling", "paused", "draining", "stopped"];
    for (const next of path) m.to(next);
    expect(m.current).toBe("stopped");
    for (const next of ["created", "waiting", "draining"] as const) {
      expect(() => m.to(next)).toThrow(IllegalModeTransitionError);
    }
    const fresh = new ModeMachine();
    expect(() => fresh.to("polling")).toThrow(/cannot go from created to polling/);
    expect(() => fresh.to("stopped")).toThrow(IllegalModeTransitionError);
    fresh.to("waiting");
    expect(() => fresh.to("starting")).toThrow(IllegalModeTransitionError);
    expect(fresh.current).toBe("waiting");
  });

  it("says when claims may go out and when the worker is closing", () => {
    const m = new ModeMachine();
    const seen: Array<[WorkerMode, boolean, boolean]> = [];
    for (const next of ["waiting", "polling", "paused", "draining", "stopped"] as const) {
      m.to(next);
      seen.push([m.current, m.claiming, m.closing]);
    }
    expect(seen).toEqual([
      ["waiting", true, false],
      ["polling", true, false],
      ["paused", false, false],
      ["draining", false, true],
      ["stopped", false, true],
    ]);
  });
});

describe("a worker's modes over its life", () => {
  const backend = createTestBackend();
  afterEach(() => backend.close());

  it("created → (paused before run) → waiting ⇄ polling → paused → waiting → draining → stopped", async () => {
    const clock = new FakeClock();
    // Claims wait for the test to let them through, so the polling mode can be seen.
    let letClaimsThrough!: () => void;
    const gate = new Promise<void>((r) => (letClaimsThrough = r));
    const gated = new Proxy(backend, {
      get(target, prop) {
        if (prop === "claim") return async (...args: Parameters<Backend["claim"]>) => (await gate, target.claim(...args));
        const value: unknown = Reflect.get(target, prop, target);
        return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const w = new Worker({ backend: gated, queues: "q", clock, autostart: false, maintenance: false, logger: silentLogger, handlers: { job: () => "ok" } });
    expect(w.mode).toBe("created");
    await w.pause();
    expect(w.mode).toBe("paused");
    w.run();
    // Started while paused: still paused, and resume goes to waiting, not back to created.
    expect(w.mode).toBe("paused");
    w.resume();
    expect(w.mode).toBe("waiting");
    await waitFor(() => w.mode === "polling", { description: "a claim round went out" });
    letClaimsThrough();
    await waitFor(() => w.mode === "waiting", { description: "the claim round came back" });
    await w.pause();
    expect(w.mode).toBe("paused");
    w.resume();
    expect(w.mode).toBe("waiting");
    const closing = w.close();
    expect(w.mode).toBe("draining");
    await closing;
    expect(w.mode).toBe("stopped");
    // Nothing moves a stopped worker.
    w.run();
    w.resume();
    await w.pause();
    expect(w.mode).toBe("stopped");
  });
});
