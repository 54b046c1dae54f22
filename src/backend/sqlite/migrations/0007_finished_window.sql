-- 0007_finished_window: the finished jobs of a queue by finish time (Backend.finishedWindow, the
-- dashboard's fleet-wide charts).
--
-- Replaces jobs_finished (queue, state) with the same partial index plus finished_at: stats()
-- still counts finished rows from it alone (its prefix), a time window per queue and state is one
-- range of it, and every finishing row still writes exactly one entry, so settling costs what it did.
DROP INDEX {{prefix}}jobs_finished;

CREATE INDEX {{prefix}}jobs_finished ON {{prefix}}jobs (queue, state, finished_at)
  WHERE state IN ('completed', 'cancelled', 'dead');
