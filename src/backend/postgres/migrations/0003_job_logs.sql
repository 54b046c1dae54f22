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
