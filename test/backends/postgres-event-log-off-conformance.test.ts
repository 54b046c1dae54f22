/**
 * The whole conformance suite on PostgreSQL with the schema's event log off (eventLog: false,
 * migration 0012): every contract but the event log holds without the event triggers, and the
 * event log's readers refuse by name (test/conformance/events.ts, "[no eventLog]").
 *
 * As long as postgres.test.ts (188 s beside it at load 15-35), so it runs with
 * `npm run test:pg-event-log-off` (CONVEYOR_PG_EVENT_LOG_OFF_SUITE=1); in `npm test` the short
 * version is postgres-event-log-off.test.ts (every event-writing path with the log off, 7 s).
 */
import { describe } from "vitest";
import { postgresConformance } from "../helpers/postgres-suite.js";

if (process.env.CONVEYOR_PG_EVENT_LOG_OFF_SUITE === "1") {
  postgresConformance("postgres, event log off", { eventLog: false, schemaPrefix: "evoffc" });
} else {
  describe.skip("conformance: postgres, event log off [npm run test:pg-event-log-off]", () => undefined);
}
