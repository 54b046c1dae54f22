-- 0003_job_logs: the lines handlers write with ctx.log(line), kept with their job.
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
