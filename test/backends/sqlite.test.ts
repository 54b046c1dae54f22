import { afterAll } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/backend.js";
import { backendSuite } from "../conformance/suite.js";
import { TempDirs } from "../helpers/temp.js";
import { FULL_STORE_FEATURES } from "../../src/backend/contract.js";

const temp = new TempDirs("conveyor-sqlite-");
afterAll(() => temp.removeAll());

// The file the last `make` created, so `openSecond` can open another connection to it.
let lastPath: string | undefined;

backendSuite("sqlite file", {
  capabilities: {
    ...FULL_STORE_FEATURES,
    transactionalEnqueue: false,
    transactionalCompletion: false,
    crossProcessWakeups: true,
    multiProcess: true,
    claimAcrossQueues: "merged",
    flows: "across-queues" as const,
    eventLog: true,
  },
  async make(clock) {
    lastPath = await temp.file("jobs.db");
    return new SqliteBackend({ path: lastPath, clock });
  },
  async openSecond(clock) {
    if (!lastPath) throw new Error("openSecond called before make");
    return new SqliteBackend({ path: lastPath, clock });
  },
});

backendSuite("sqlite :memory:", {
  capabilities: {
    ...FULL_STORE_FEATURES,
    transactionalEnqueue: false,
    transactionalCompletion: false,
    crossProcessWakeups: false,
    multiProcess: false,
    claimAcrossQueues: "merged",
    flows: "across-queues" as const,
    eventLog: true,
  },
  async make(clock) {
    return new SqliteBackend({ path: ":memory:", clock });
  },
});
