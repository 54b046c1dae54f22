-- 0004_job_logs: the lines handlers write with ctx.log(line), kept with their job.
--
-- One row per line. `seq` orders the lines of a job (and is the rowid: no extra index for it).
-- The bounds (lines per job, characters per line) are applied by src/backend/sqlite/job-logs.ts
-- with the rules of src/core/job-log.ts, in the transaction that appends.
CREATE TABLE {{prefix}}job_logs (
  seq     INTEGER PRIMARY KEY,
  job_id  TEXT    NOT NULL,
  -- The attempt that wrote the line, and when the store received it (ms since the epoch).
  attempt INTEGER NOT NULL,
  at      INTEGER NOT NULL,
  line    TEXT    NOT NULL
) STRICT;

-- A job's lines in order: read by logs(), trimmed by appendLogs, deleted with the job.
CREATE INDEX {{prefix}}job_logs_job ON {{prefix}}job_logs (job_id, seq);

-- A log goes when its job goes (prune, remove, retention 0), whoever deletes the job. A trigger
-- rather than a foreign key: SQLite enforces foreign keys only per connection, with a pragma
-- that every process opening the file would have to set.
CREATE TRIGGER {{prefix}}job_logs_delete AFTER DELETE ON {{prefix}}jobs
BEGIN
  DELETE FROM {{prefix}}job_logs WHERE job_id = OLD.id;
END;

-- The queue event log: one row per job event (added, active, progress, completed, retrying,
-- dead, released, stalled, cancelled, replayed, waiting), written by the triggers below in the
-- same transaction as the change itself, so an event exists exactly when its change committed,
-- whoever made it (any process, any version of the statements). Read by backend.readEvents
-- (queue.events(), GET /v1/events) in `seq` order; SQLite has one writer at a time, so `seq`
-- is commit order. AUTOINCREMENT: a seq is never reused, even after pruning every row, so a
-- reader's cursor stays meaningful. Pruned by pruneEvents (src/core/queue-events.ts defaults).
CREATE TABLE {{prefix}}events (
  seq     INTEGER PRIMARY KEY AUTOINCREMENT,
  -- Store time in ms of the change where the row records one, else SQLite's wall clock.
  at      INTEGER NOT NULL,
  type    TEXT    NOT NULL,
  queue   TEXT    NOT NULL,
  name    TEXT    NOT NULL,
  job_id  TEXT    NOT NULL,
  attempt INTEGER NOT NULL,
  -- JSON object with the event's details (see QueueEvent in src/core/queue-events.ts), or NULL.
  data    TEXT
) STRICT;

CREATE TRIGGER {{prefix}}events_added AFTER INSERT ON {{prefix}}jobs
BEGIN
  INSERT INTO {{prefix}}events (at, type, queue, name, job_id, attempt, data)
  VALUES (NEW.created_at, 'added', NEW.queue, NEW.name, NEW.id, NEW.attempt,
          json_object('state', NEW.state, 'runAt', NEW.run_at, 'priority', NEW.priority));
END;

-- Which event a state change is: the attempt's recorded outcome (appended to history by the
-- same statement) tells a retry, a release and a rescued lease apart.
CREATE TRIGGER {{prefix}}events_state AFTER UPDATE OF state ON {{prefix}}jobs
WHEN OLD.state IS NOT NEW.state
BEGIN
  INSERT INTO {{prefix}}events (at, type, queue, name, job_id, attempt, data)
  SELECT
    coalesce(
      CASE WHEN NEW.state = 'active' THEN NEW.started_at
           WHEN NEW.state IN ('completed', 'dead', 'cancelled') THEN NEW.finished_at
           WHEN OLD.state = 'active' THEN json_extract(NEW.history, '$[#-1].finishedAt') END,
      CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    t.type, NEW.queue, NEW.name, NEW.id, NEW.attempt,
    CASE t.type
      WHEN 'active' THEN json_object('workerId', NEW.worker_id)
      WHEN 'completed' THEN json_object('result', json(NEW.result))
      WHEN 'retrying' THEN json_object('error', json(NEW.error), 'runAt', NEW.run_at)
      WHEN 'dead' THEN json_object('error', json(NEW.error))
      WHEN 'cancelled' THEN json_object('previousState', OLD.state)
      ELSE NULL END
  FROM (SELECT CASE
      WHEN NEW.state IN ('active', 'completed', 'dead', 'cancelled') THEN NEW.state
      WHEN OLD.state = 'active' THEN CASE json_extract(NEW.history, '$[#-1].outcome')
        WHEN 'failed' THEN 'retrying' WHEN 'released' THEN 'released' ELSE 'stalled' END
      WHEN OLD.state = 'dead' THEN 'replayed'
      ELSE 'waiting' END AS type) AS t;
END;

CREATE TRIGGER {{prefix}}events_progress AFTER UPDATE OF progress ON {{prefix}}jobs
WHEN NEW.state = 'active' AND NEW.progress IS NOT NULL AND NEW.progress IS NOT OLD.progress
BEGIN
  INSERT INTO {{prefix}}events (at, type, queue, name, job_id, attempt, data)
  VALUES (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER), 'progress', NEW.queue, NEW.name, NEW.id,
          NEW.attempt, json_object('progress', json(NEW.progress)));
END;
