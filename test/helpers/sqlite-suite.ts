/**
 * The conformance suite on SQLite files, for the files that run it (sqlite.test.ts with the
 * defaults, sqlite-event-log-off-conformance.test.ts with the event log off): a fresh file per
 * test, and a second connection to the same file.
 */
import { afterAll } from "vitest";
import type { Capabilities } from "../../src/backend/contract.js";
import { FULL_STORE_FEATURES } from "../../src/backend/contract.js";
import { SqliteBackend, type SqliteBackendOptions } from "../../src/backend/sqlite/backend.js";
import { backendSuite } from "../conformance/suite.js";
import { TempDirs } from "./temp.js";

/** SqliteBackend's capabilities for a file (`:memory:` has no second process) with the given event log setting. */
export function sqliteCapabilities(options: { file: boolean; eventLog?: boolean }): Capabilities {
  return {
    ...FULL_STORE_FEATURES,
    transactionalEnqueue: false,
    transactionalCompletion: false,
    crossProcessWakeups: options.file,
    multiProcess: options.file,
    claimAcrossQueues: "merged",
    flows: "across-queues" as const,
    eventLog: options.eventLog ?? true,
    jobFlowKeys: true,
  };
}

/** `backendSuite` on a fresh SQLite file per test, opened with `options` (and `openSecond` on the same file). */
export function sqliteFileConformance(name: string, options: Pick<SqliteBackendOptions, "eventLog"> = {}): void {
  const temp = new TempDirs("conveyor-sqlite-");
  afterAll(() => temp.removeAll());
  // The file the last `make` created, so `openSecond` can open another connection to it.
  let lastPath: string | undefined;
  backendSuite(name, {
    capabilities: sqliteCapabilities({ file: true, ...options }),
    async make(clock) {
      lastPath = await temp.file("jobs.db");
      return new SqliteBackend({ path: lastPath, clock, ...options });
    },
    async openSecond(clock) {
      if (!lastPath) throw new Error("openSecond called before make");
      return new SqliteBackend({ path: lastPath, clock, ...options });
    },
  });
}
