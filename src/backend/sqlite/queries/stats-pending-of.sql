-- stats-pending-of: stats-pending.sql for one queue.
--
-- ?1 now ms    ?2 now ms (again)    ?3 queue text
--
-- Returns (queue, due, total, oldest), or no row when the queue has no pending job.
SELECT queue, sum(run_at <= ?) AS due, count(*) AS total, min(CASE WHEN run_at <= ? THEN run_at END) AS oldest
FROM {{prefix}}jobs WHERE queue = ? AND state IN ('waiting', 'scheduled') GROUP BY queue
