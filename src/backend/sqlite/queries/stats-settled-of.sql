-- stats-settled-of: stats-settled.sql for one queue.
--
-- ?1 queue text    ?2 queue text (again)
--
-- Returns (queue, state, n) per state with jobs.
SELECT queue, state, count(*) AS n FROM {{prefix}}jobs WHERE state = 'active' AND queue = ? GROUP BY queue
UNION ALL
SELECT queue, state, count(*) AS n FROM {{prefix}}jobs
WHERE queue = ? AND state IN ('completed', 'cancelled', 'dead') GROUP BY state
