-- 0012_sqlite_event_log_switch: the event log can be off for a table prefix
-- (SqliteBackendOptions.eventLog, `sqlite:PATH?eventLog=off`), as for a PostgreSQL schema or a
-- Redis prefix. With it off the event triggers of 0004 (events_added, events_state,
-- events_progress) do not exist, so no change of `jobs` writes an `events` row, and the
-- statements that write events themselves (a job deleted as it completes or dies) are not run
-- (transactions.ts). Measured: the log is about a quarter of a processed job's time
-- (docs/performance-sqlite.md, "Session 12: the event log switch").
--
-- `{{prefix}}` is replaced by the backend's table prefix (default "conveyor_").
--
-- One setting per table prefix, stored here so every process on it agrees: the first process
-- records its own and a process configured otherwise refuses to start (event-log-setting.ts). A
-- database that holds jobs or events when this migration runs predates the setting and had the
-- log on: it is recorded as on now. Turning the log off drops the triggers, keeping their text
-- here (row `event_log_triggers`), so turning it back on (deleting the `event_log` row while no
-- process runs, then starting one with the log on) recreates them as they were.
--
-- A later migration that recreates one of these triggers must skip it when this table says 'off'
-- (or update the kept text instead).
CREATE TABLE {{prefix}}settings (
  name  TEXT PRIMARY KEY,
  value TEXT NOT NULL
) STRICT;

INSERT INTO {{prefix}}settings (name, value)
SELECT 'event_log', 'on'
WHERE EXISTS (SELECT 1 FROM {{prefix}}jobs) OR EXISTS (SELECT 1 FROM {{prefix}}events);
