/**
 * The whole conformance suite on a SQLite file with its event log off (eventLog: false, migration
 * 0012_sqlite_event_log_switch): every contract but the event log holds without the event
 * triggers, and the event log's readers refuse by name (test/conformance/events.ts, "[no eventLog]").
 * sqlite-event-log-off.test.ts has the switch's own tests.
 */
import { sqliteFileConformance } from "../helpers/sqlite-suite.js";

sqliteFileConformance("sqlite file, event log off", { eventLog: false });
