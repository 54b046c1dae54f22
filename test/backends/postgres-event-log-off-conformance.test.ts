/**
 * The whole conformance suite on PostgreSQL with the schema's event log off (eventLog: false,
 * migration event_log_switch): every contract but the event log holds without the event triggers, and the
 * event log's readers refuse by name (test/conformance/events.ts, "[no eventLog]").
 *
 * About 45 s alone on a quiet machine (as long as postgres.test.ts). postgres-event-log-off.test.ts
 * has the switch's own tests (every event-writing path with the log off, the per-schema record).
 */
import { postgresConformance } from "../helpers/postgres-suite.js";

postgresConformance("postgres, event log off", { eventLog: false, schemaPrefix: "evoffc" });
