-- pending-queues: the queues between two names that hold waiting or scheduled jobs, in name
-- order, found by a loose scan of the pending rows' queues (one index descent per such queue,
-- whatever the number of queues named between them) instead of one probe per named queue.
--
-- @first queue name    @last queue name (BINARY order, both included)
-- @most queues to return (the caller probes every named queue when it gets that many)
--
-- Returns one value (the name) per queue. The pending jobs are split between jobs_claim (lane
-- NULL) and jobs_lanes (laned queues; 0011_sqlite_flow_unkeyed_claim), so each step takes the
-- smaller of one descent into each (an aggregate min(), which skips the part that found none). Plan (SQLite 3.54): each step is
--   SEARCH conveyor_jobs USING COVERING INDEX conveyor_jobs_claim (queue>?)
--   SEARCH conveyor_jobs USING COVERING INDEX conveyor_jobs_lanes (queue>?)
-- and each min() stops at the first entry (the indexes are partial on the same conditions).
-- The pending queues not named by the claim are filtered out by the caller.
WITH RECURSIVE pending(queue, n) AS (
  SELECT (SELECT min(queue) FROM (
    SELECT (SELECT min(queue) FROM {{prefix}}jobs WHERE state IN ('waiting', 'scheduled') AND lane IS NULL AND queue >= @first) AS queue
    UNION ALL
    SELECT (SELECT min(queue) FROM {{prefix}}jobs WHERE state IN ('waiting', 'scheduled') AND lane IS NOT NULL AND queue >= @first)
  )), 1
  UNION ALL
  SELECT (SELECT min(queue) FROM (
    SELECT (SELECT min(queue) FROM {{prefix}}jobs WHERE state IN ('waiting', 'scheduled') AND lane IS NULL AND queue > pending.queue) AS queue
    UNION ALL
    SELECT (SELECT min(queue) FROM {{prefix}}jobs WHERE state IN ('waiting', 'scheduled') AND lane IS NOT NULL AND queue > pending.queue)
  )), pending.n + 1
  FROM pending
  WHERE pending.queue < @last AND pending.n < @most
)
SELECT queue FROM pending WHERE queue IS NOT NULL AND queue <= @last
