-- stats-settled: per queue, how many jobs are active, completed, cancelled and dead.
--
-- No parameters.
--
-- Returns (queue, state, n) per queue and state with jobs.
-- Plan: SCAN conveyor_jobs USING INDEX conveyor_jobs_lease; then COVERING INDEX conveyor_jobs_finished
SELECT queue, state, count(*) AS n FROM {{prefix}}jobs WHERE state = 'active' GROUP BY queue
UNION ALL
SELECT queue, state, count(*) AS n FROM {{prefix}}jobs
WHERE state IN ('completed', 'cancelled', 'dead') GROUP BY queue, state
