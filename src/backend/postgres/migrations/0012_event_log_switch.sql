-- 0012_event_log_switch: the event log can be off for a schema (PostgresBackendOptions.eventLog,
-- `?eventLog=off`), like a Redis prefix's. With it off the two statement-level triggers of 0007
-- (jobs_events_added, jobs_events_changed) do not exist, so no statement on `jobs` builds
-- transition tables or writes `events` rows, and the statements that write events themselves
-- (complete, fail, rescue: jobs deleted as they finish) are prepared without that insert
-- (backend.ts, `{{event_log}}`). Measured: about 640 of ~2,500 WAL bytes per processed job
-- (docs/performance-postgres.md, "Fourth pass").
--
-- One setting per schema, stored here so every process on it agrees: the first process records
-- its own (settle_event_log below) and a process configured otherwise refuses to start. A schema
-- that holds jobs or events when this migration runs predates the setting and had the log on:
-- it is recorded as on now.
--
-- A later migration that recreates jobs_events_added or jobs_events_changed must skip them when
-- this table says 'off' (or drop them again with settle_event_log('off')).
CREATE TABLE {{schema}}.settings (
  name  text PRIMARY KEY,
  value text NOT NULL
);

INSERT INTO {{schema}}.settings (name, value)
SELECT 'event_log', 'on'
WHERE EXISTS (SELECT 1 FROM {{schema}}.jobs) OR EXISTS (SELECT 1 FROM {{schema}}.events);

-- Records `wanted` ('on' or 'off') unless a setting is recorded already, and returns the one
-- recorded; with 'off' recorded, drops the event triggers if they still exist, and with 'on'
-- recorded creates them (as 0007 did) if they are missing: turning the log back on is deleting
-- the row while no process runs, then starting one with the log on. Concurrent first
-- callers: ON CONFLICT makes the later wait for the earlier's commit and then read its value.
-- SECURITY DEFINER: DROP TRIGGER needs the owner of `jobs` (the role that ran the migrations),
-- and a worker's role need not be it. Dropping takes an ACCESS EXCLUSIVE lock on `jobs` once per
-- schema: later calls find the triggers as the setting wants them and take no lock.
CREATE FUNCTION {{schema}}.settle_event_log(wanted text) RETURNS text
  LANGUAGE plpgsql
  SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
  AS $$
DECLARE
  stored text;
BEGIN
  IF wanted IS DISTINCT FROM 'on' AND wanted IS DISTINCT FROM 'off' THEN
    RAISE EXCEPTION 'settle_event_log takes on or off, not %', wanted USING ERRCODE = '22023';
  END IF;
  INSERT INTO {{schema}}.settings (name, value) VALUES ('event_log', wanted) ON CONFLICT (name) DO NOTHING;
  SELECT s.value INTO stored FROM {{schema}}.settings AS s WHERE s.name = 'event_log';
  IF stored = 'off' AND EXISTS (
    SELECT 1 FROM pg_trigger
    WHERE tgrelid = '{{schema}}.jobs'::regclass AND tgname IN ('jobs_events_added', 'jobs_events_changed')
  ) THEN
    DROP TRIGGER IF EXISTS jobs_events_added ON {{schema}}.jobs;
    DROP TRIGGER IF EXISTS jobs_events_changed ON {{schema}}.jobs;
  ELSIF stored = 'on' AND (
    SELECT count(*) FROM pg_trigger
    WHERE tgrelid = '{{schema}}.jobs'::regclass AND tgname IN ('jobs_events_added', 'jobs_events_changed')
  ) < 2 THEN
    DROP TRIGGER IF EXISTS jobs_events_added ON {{schema}}.jobs;
    DROP TRIGGER IF EXISTS jobs_events_changed ON {{schema}}.jobs;
    CREATE TRIGGER jobs_events_added AFTER INSERT ON {{schema}}.jobs
      REFERENCING NEW TABLE AS added_jobs
      FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.record_added_events();
    CREATE TRIGGER jobs_events_changed AFTER UPDATE ON {{schema}}.jobs
      REFERENCING OLD TABLE AS changed_before NEW TABLE AS changed_after
      FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.record_changed_events();
  END IF;
  RETURN stored;
END $$;
