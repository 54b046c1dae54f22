-- stats-pending: per queue, the pending (waiting or scheduled) jobs.
--
-- ?1 now ms    ?2 now ms (again)
--
-- Returns (queue, due: how many are due, total, oldest: the earliest due run_at or NULL).
-- Plan: SCAN conveyor_jobs USING COVERING INDEX conveyor_jobs_claim
SELECT queue, sum(run_at <= ?) AS due, count(*) AS total, min(CASE WHEN run_at <= ? THEN run_at END) AS oldest
FROM {{prefix}}jobs WHERE state IN ('waiting', 'scheduled') GROUP BY queue
