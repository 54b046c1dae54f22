-- stats-pending-of: stats-pending.sql for one queue.
--
-- ?1 now ms    ?2 now ms (again)    ?3 queue text
--
-- Returns (queue, due, total, oldest), or no row when the queue has no pending job. Its pending
-- jobs are in jobs_claim (lane NULL) or jobs_lanes (any other lane), as in stats-pending.sql:
-- each part is one range of its index, read from the index alone.
WITH t (due_by, oldest_by, queue) AS (SELECT ?, ?, ?)
SELECT (SELECT queue FROM t) AS queue, sum(due) AS due, sum(total) AS total, min(oldest) AS oldest FROM (
  SELECT sum(run_at <= (SELECT due_by FROM t)) AS due, count(*) AS total, min(CASE WHEN run_at <= (SELECT oldest_by FROM t) THEN run_at END) AS oldest
  FROM {{prefix}}jobs WHERE queue = (SELECT queue FROM t) AND state IN ('waiting', 'scheduled') AND lane IS NULL
  UNION ALL
  SELECT sum(run_at <= (SELECT due_by FROM t)) AS due, count(*) AS total, min(CASE WHEN run_at <= (SELECT oldest_by FROM t) THEN run_at END) AS oldest
  FROM {{prefix}}jobs WHERE queue = (SELECT queue FROM t) AND state IN ('waiting', 'scheduled') AND lane IS NOT NULL
)
HAVING sum(total) > 0
