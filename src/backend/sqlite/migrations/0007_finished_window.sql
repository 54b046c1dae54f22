-- 0007_finished_window: the finished jobs of a queue by finish time (Backend.finishedWindow, the
-- dashboard's fleet-wide charts).
--
-- Replaces jobs_finished (queue, state) with the same partial index plus finished_at: stats()
-- still counts finished rows from it alone (its prefix), a time window per queue and state is one
-- range of it, and every finishing row still writes exactly one entry, so settling costs what it did.
DROP INDEX {{prefix}}jobs_finished;

CREATE INDEX {{prefix}}jobs_finished ON {{prefix}}jobs (queue, state, finished_at)
  WHERE state IN ('completed', 'cancelled', 'dead');

-- A queue's waiting and scheduled jobs in insertion order (list with state "waiting" or
-- "scheduled" and a queue, a page at a time by keyset, either way): without it a page of a
-- million-job backlog sorted the whole backlog out of jobs_claim. Partial, so it is as small as
-- the backlog; it costs one index entry per enqueue, removed at the claim.
CREATE INDEX {{prefix}}jobs_pending_seq ON {{prefix}}jobs (queue, seq)
  WHERE state IN ('waiting', 'scheduled');
