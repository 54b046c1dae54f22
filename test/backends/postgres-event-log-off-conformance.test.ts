/**
 * The whole conformance suite on PostgreSQL with the schema's event log off (eventLog: false,
 * migration 0011): every contract but the event log holds without the event triggers, and the
 * event log's readers refuse by name (test/conformance/events.ts, "[no eventLog]").
 */
import { postgresConformance } from "../helpers/postgres-suite.js";

postgresConformance("postgres, event log off", { eventLog: false, schemaPrefix: "evoffc" });
