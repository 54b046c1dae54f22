-- stats-pending: per queue, the pending (waiting or scheduled) jobs.
--
-- ?1 now ms    ?2 now ms (again)
--
-- Returns (queue, due: how many are due, total, oldest: the earliest due run_at or NULL).
-- The pending jobs are split between two partial indexes (0011_sqlite_flow_unkeyed_claim):
-- jobs without a lane in jobs_claim, those of laned queues (groups, limiter keys, and their
-- unkeyed jobs in lane '') in jobs_lanes. Each part is counted from its index alone, then the
-- two are added up (`t`: the parameters, read by both parts, each once).
-- Plan: SCAN conveyor_jobs USING COVERING INDEX conveyor_jobs_claim;
--       SCAN conveyor_jobs USING COVERING INDEX conveyor_jobs_lanes
WITH t (due_by, oldest_by) AS (SELECT ?, ?)
SELECT queue, sum(due) AS due, sum(total) AS total, min(oldest) AS oldest FROM (
  SELECT queue, sum(run_at <= (SELECT due_by FROM t)) AS due, count(*) AS total, min(CASE WHEN run_at <= (SELECT oldest_by FROM t) THEN run_at END) AS oldest
  FROM {{prefix}}jobs WHERE state IN ('waiting', 'scheduled') AND lane IS NULL GROUP BY queue
  UNION ALL
  SELECT queue, sum(run_at <= (SELECT due_by FROM t)) AS due, count(*) AS total, min(CASE WHEN run_at <= (SELECT oldest_by FROM t) THEN run_at END) AS oldest
  FROM {{prefix}}jobs WHERE state IN ('waiting', 'scheduled') AND lane IS NOT NULL GROUP BY queue
)
GROUP BY queue
