/**
 * The whole conformance suite on a SQLite file with its event log off (eventLog: false, migration
 * 0012_sqlite_event_log_switch): every contract but the event log holds without the event
 * triggers, and the event log's readers refuse by name (test/conformance/events.ts, "[no eventLog]").
 * sqlite-event-log-off.test.ts has the switch's own tests.
 */
import { afterAll } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/backend.js";
import { backendSuite } from "../conformance/suite.js";
import { TempDirs } from "../helpers/temp.js";
import { FULL_STORE_FEATURES } from "../../src/backend/contract.js";

const temp = new TempDirs("conveyor-sqlite-evoff-");
afterAll(() => temp.removeAll());

// The file the last `make` created, so `openSecond` can open another connection to it.
let lastPath: string | undefined;

backendSuite("sqlite file, event log off", {
  capabilities: {
    ...FULL_STORE_FEATURES,
    transactionalEnqueue: false,
    transactionalCompletion: false,
    crossProcessWakeups: true,
    multiProcess: true,
    claimAcrossQueues: "merged",
    flows: "across-queues" as const,
    eventLog: false,
    jobFlowKeys: true,
  },
  async make(clock) {
    lastPath = await temp.file("jobs.db");
    return new SqliteBackend({ path: lastPath, clock, eventLog: false });
  },
  async openSecond(clock) {
    if (!lastPath) throw new Error("openSecond called before make");
    return new SqliteBackend({ path: lastPath, clock, eventLog: false });
  },
});
