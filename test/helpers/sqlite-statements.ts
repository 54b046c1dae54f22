/**
 * What SQL better-sqlite3 runs: a spy on its statements' run, get, all and iterate, for tests
 * that check a statement's text or plan (test/backends/sqlite-perf.test.ts, sqlite-stable-plans.test.ts).
 */
import Database from "better-sqlite3";
import { vi } from "vitest";

type Method = "run" | "get" | "all" | "iterate";

/** The source of every statement run while `fn` runs, in the order they ran (repeats included). */
export async function statementsRun(fn: () => Promise<unknown>): Promise<string[]> {
  const probe = new Database(":memory:");
  const proto = Object.getPrototypeOf(probe.prepare("SELECT 1")) as Record<Method, (...args: unknown[]) => unknown>;
  probe.close();
  const sources: string[] = [];
  const spies = (["run", "get", "all", "iterate"] as const).map((method) => {
    const original = proto[method];
    return vi.spyOn(proto, method).mockImplementation(function (this: { source: string }, ...args: unknown[]) {
      sources.push(this.source);
      return original.apply(this, args);
    });
  });
  try {
    await fn();
    return sources;
  } finally {
    for (const spy of spies) spy.mockRestore();
  }
}
