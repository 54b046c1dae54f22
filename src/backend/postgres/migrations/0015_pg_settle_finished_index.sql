-- 0015_pg_settle_finished_index: one index of finished jobs instead of three.
--
-- `{{schema}}` is replaced by the backend's schema (quoted) before this runs.
--
-- jobs_done (completed + cancelled, by queue and finish time, rows with a retention deadline),
-- jobs_dead (the same for dead) and jobs_finished_at (completed and dead by queue, state and
-- finish time, every such row) held the same rows in nearly the same order: every completion
-- wrote two of them, every death two, every cancellation one. jobs_finished holds every finished
-- row once, by queue, state, finish time and insertion order, and serves all three readers:
-- - prune by count (prune.sql) walks each state's range backwards (newest first) and filters
--   the rows kept forever (expires_at NULL) from the heap, which it reads for their ids anyway;
--   completed and cancelled, counted together, are two ranges merged in order;
-- - the finished window (finished-window.sql) reads one range per state, as before.
-- Measured (docs/performance-postgres.md, "Sixth pass"): 106 WAL bytes and about 3.5 µs of
-- server CPU less per processed job.
--
-- CREATE INDEX (not CONCURRENTLY: a migration runs in a transaction) blocks writes to jobs while
-- it reads the finished rows once; the drops are instant.
CREATE INDEX jobs_finished ON {{schema}}.jobs (queue, state, finished_at, seq)
  WHERE state IN ('completed', 'dead', 'cancelled');
DROP INDEX {{schema}}.jobs_done;
DROP INDEX {{schema}}.jobs_dead;
DROP INDEX {{schema}}.jobs_finished_at;
