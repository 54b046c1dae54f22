-- 0003_job_logs: the lines handlers write with ctx.log(line), kept with their job.
--
-- One row per line; `seq` orders a job's lines. The bounds (lines per job, characters per line)
-- are applied by queries/append-logs.sql with the rules of src/core/job-log.ts. The foreign key
-- deletes a log with its job, whoever deletes the job (prune, remove, retention 0); its index is
-- the one below, so a cascade is one index probe per deleted job.
CREATE TABLE {{schema}}.job_logs (
  seq     bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id  text    COLLATE "C" NOT NULL REFERENCES {{schema}}.jobs (id) ON DELETE CASCADE,
  -- When the store received the line (ms since the epoch), and the attempt that wrote it.
  at      bigint  NOT NULL,
  attempt integer NOT NULL,
  line    text    NOT NULL
);

CREATE INDEX job_logs_job ON {{schema}}.job_logs (job_id, seq);

-- The queue event log: one row per job event (added, active, progress, completed, retrying,
-- dead, released, stalled, cancelled, replayed, waiting), written by the trigger below in the
-- transaction of the change itself, so an event exists exactly when its change committed,
-- whoever made it. Read by queries/read-events.sql (queue.events(), GET /v1/events).
--
-- Order and cursors. A sequence number is taken when a row is inserted, not when it commits,
-- so a reader that went by `seq` alone could pass a lower number whose transaction commits
-- later and never see it. Rows therefore carry their transaction id, and readers take only rows
-- of transactions older than every transaction still running (pg_snapshot_xmin), in (xid, seq)
-- order: any row that becomes visible later has a larger xid than all of those, so a cursor
-- (xid, seq) never passes an event it has not seen. The price: an event waits until every
-- transaction that began before it ended (the longest open transaction bounds the latency).
CREATE TABLE {{schema}}.events (
  xid     xid8    NOT NULL DEFAULT pg_current_xact_id(),
  seq     bigint  GENERATED ALWAYS AS IDENTITY,
  -- Store time in ms of the change where the row records one, else the database clock.
  at      bigint  NOT NULL,
  type    text    NOT NULL,
  queue   text    COLLATE "C" NOT NULL,
  name    text    COLLATE "C" NOT NULL,
  job_id  text    COLLATE "C" NOT NULL,
  attempt integer NOT NULL,
  -- JSON object with the event's details (see QueueEvent in src/core/queue-events.ts), or NULL.
  data    json,
  PRIMARY KEY (xid, seq)
) WITH (
  -- Appended to and pruned from the front, like the jobs table churns.
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 5000,
  autovacuum_vacuum_insert_scale_factor = 0,
  autovacuum_vacuum_insert_threshold = 5000
);

CREATE FUNCTION {{schema}}.record_job_event() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  event_type text;
  event_at   bigint;
  details    json;
  outcome    text;
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO {{schema}}.events (at, type, queue, name, job_id, attempt, data)
    VALUES (NEW.created_at, 'added', NEW.queue, NEW.name, NEW.id, NEW.attempt,
            json_build_object('state', NEW.state, 'runAt', NEW.run_at, 'priority', NEW.priority));
    RETURN NULL;
  END IF;
  IF NEW.state IS DISTINCT FROM OLD.state THEN
    outcome := NEW.history -> -1 ->> 'outcome';
    event_type := CASE
      WHEN NEW.state IN ('active', 'completed', 'dead', 'cancelled') THEN NEW.state
      WHEN OLD.state = 'active' THEN CASE outcome WHEN 'failed' THEN 'retrying' WHEN 'released' THEN 'released' ELSE 'stalled' END
      WHEN OLD.state = 'dead' THEN 'replayed'
      ELSE 'waiting' END;
    event_at := coalesce(
      CASE WHEN NEW.state = 'active' THEN NEW.started_at
           WHEN NEW.state IN ('completed', 'dead', 'cancelled') THEN NEW.finished_at
           WHEN OLD.state = 'active' THEN (NEW.history -> -1 ->> 'finishedAt')::bigint END,
      {{schema}}.now_ms(NULL));
    details := CASE event_type
      WHEN 'active' THEN json_build_object('workerId', NEW.worker_id)
      WHEN 'completed' THEN json_build_object('result', NEW.result)
      WHEN 'retrying' THEN json_build_object('error', NEW.error, 'runAt', NEW.run_at)
      WHEN 'dead' THEN json_build_object('error', NEW.error)
      WHEN 'cancelled' THEN json_build_object('previousState', OLD.state)
      ELSE NULL END;
    INSERT INTO {{schema}}.events (at, type, queue, name, job_id, attempt, data)
    VALUES (event_at, event_type, NEW.queue, NEW.name, NEW.id, NEW.attempt, details);
  ELSIF NEW.state = 'active' AND NEW.progress IS NOT NULL
        AND NEW.progress::text IS DISTINCT FROM OLD.progress::text THEN
    INSERT INTO {{schema}}.events (at, type, queue, name, job_id, attempt, data)
    VALUES ({{schema}}.now_ms(NULL), 'progress', NEW.queue, NEW.name, NEW.id, NEW.attempt,
            json_build_object('progress', NEW.progress));
  END IF;
  RETURN NULL;
END $$;

-- Heartbeats touch neither column, so they fire nothing (and stay HOT updates).
CREATE TRIGGER jobs_events AFTER INSERT OR UPDATE OF state, progress ON {{schema}}.jobs
  FOR EACH ROW EXECUTE FUNCTION {{schema}}.record_job_event();
