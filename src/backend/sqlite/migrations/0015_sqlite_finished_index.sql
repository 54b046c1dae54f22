-- 0015_sqlite_finished_index: a finished job writes one index entry for its queue's count limits
-- and finished listings instead of two.
--
-- `{{prefix}}` is replaced by the backend's table prefix (default "conveyor_").
--
-- jobs_prunable (0001: queue, state = 'dead', finished_at, for rows with a retention deadline)
-- served only the prune by count; jobs_finished (0007: queue, state, finished_at) served stats(),
-- the finished windows and listings. Both took an entry from every finishing job: a completion
-- changed four index entries (jobs_lease out; jobs_finished, jobs_prunable, jobs_expires in),
-- and jobs_prunable's was about 6% of a processed job's CPU (docs/performance-sqlite.md,
-- "Session 16"). jobs_finished now carries what the prune by count reads: `seq` after
-- finished_at, so a state's rows come newest first in the prune's order (finished_at, then seq),
-- and `expires_at`, so the prune skips rows kept forever from the index alone. The prune walks
-- the dead state's range, or the completed and cancelled ranges merged in that order
-- (prune-beyond-count-*.sql), as PostgreSQL's prune walks its jobs_finished (pg migration 0015).
-- stats() and the finished windows read the same prefix (queue, state, finished_at) as before.
-- Rebuilding the index reads the finished jobs once.
DROP INDEX {{prefix}}jobs_prunable;
DROP INDEX {{prefix}}jobs_finished;
CREATE INDEX {{prefix}}jobs_finished ON {{prefix}}jobs (queue, state, finished_at, seq, expires_at)
  WHERE state IN ('completed', 'cancelled', 'dead');
