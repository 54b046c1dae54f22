-- 0013_sqlite_event_triggers_split: the two events every processed job logs, "active" when it is
-- claimed and "completed" when it succeeds, each get a trigger of their own, a plain
-- INSERT … VALUES; events_state (0004) keeps every other change of state.
--
-- `{{prefix}}` is replaced by the backend's table prefix (default "conveyor_").
--
-- events_state chooses the event's type in a subquery and builds its details in a CASE over every
-- type, for each row it fires on. For the two hot changes that cost 2.4 µs of CPU per claimed job
-- (16.0 against 13.6) and 3.2 per completion (22.6 against 19.4) over the plain INSERT below,
-- with the rows written unchanged (docs/performance-sqlite.md, "Session 13"). The new triggers
-- write what events_state wrote for these changes: the same time (started_at, finished_at, else
-- SQLite's clock), type, columns and details.
--
-- A prefix whose event log is off (0012) has no event triggers: the backend drops the ones created
-- here in the same transaction and keeps their text with the others (keepEventLogOff in
-- event-log-setting.ts), replacing the kept events_state.
DROP TRIGGER IF EXISTS {{prefix}}events_state;

-- Which event a state change is: the attempt's recorded outcome (appended to history by the
-- same statement) tells a retry, a release and a rescued lease apart.
CREATE TRIGGER {{prefix}}events_state AFTER UPDATE OF state ON {{prefix}}jobs
WHEN OLD.state IS NOT NEW.state AND NEW.state NOT IN ('active', 'completed')
BEGIN
  INSERT INTO {{prefix}}events (at, type, queue, name, job_id, attempt, data)
  SELECT
    coalesce(
      CASE WHEN NEW.state IN ('dead', 'cancelled') THEN NEW.finished_at
           WHEN OLD.state = 'active' THEN json_extract(NEW.history, '$[#-1].finishedAt') END,
      CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    t.type, NEW.queue, NEW.name, NEW.id, NEW.attempt,
    CASE t.type
      WHEN 'retrying' THEN json_object('error', json(NEW.error), 'runAt', NEW.run_at)
      WHEN 'dead' THEN json_object('error', json(NEW.error))
      WHEN 'cancelled' THEN json_object('previousState', OLD.state)
      ELSE NULL END
  FROM (SELECT CASE
      WHEN NEW.state IN ('dead', 'cancelled') THEN NEW.state
      WHEN OLD.state = 'active' THEN CASE json_extract(NEW.history, '$[#-1].outcome')
        WHEN 'failed' THEN 'retrying' WHEN 'released' THEN 'released' ELSE 'stalled' END
      WHEN OLD.state = 'dead' THEN 'replayed'
      ELSE 'waiting' END AS type) AS t;
END;

CREATE TRIGGER {{prefix}}events_active AFTER UPDATE OF state ON {{prefix}}jobs
WHEN NEW.state = 'active' AND OLD.state IS NOT 'active'
BEGIN
  INSERT INTO {{prefix}}events (at, type, queue, name, job_id, attempt, data)
  VALUES (coalesce(NEW.started_at, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)), 'active',
          NEW.queue, NEW.name, NEW.id, NEW.attempt, json_object('workerId', NEW.worker_id));
END;

CREATE TRIGGER {{prefix}}events_completed AFTER UPDATE OF state ON {{prefix}}jobs
WHEN NEW.state = 'completed' AND OLD.state IS NOT 'completed'
BEGIN
  INSERT INTO {{prefix}}events (at, type, queue, name, job_id, attempt, data)
  VALUES (coalesce(NEW.finished_at, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)), 'completed',
          NEW.queue, NEW.name, NEW.id, NEW.attempt, json_object('result', json(NEW.result)));
END;
