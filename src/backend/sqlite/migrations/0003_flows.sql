-- 0003_flows: dedup windows (JobOptions.dedup).
--
-- `{{prefix}}` is replaced by the backend's table prefix (default "conveyor_").
--
-- One row per (queue, dedup key) whose window was ever opened: the job it was opened for and when
-- it ends (ms, store clock). An ended window is as good as none; prune deletes ended rows. The
-- rules are in src/backend/dedup.ts.
CREATE TABLE {{prefix}}dedup_windows (
  queue      TEXT    NOT NULL,
  key        TEXT    NOT NULL,
  job_id     TEXT    NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (queue, key)
) STRICT, WITHOUT ROWID;

CREATE INDEX {{prefix}}dedup_windows_expires ON {{prefix}}dedup_windows (expires_at);
