-- runnable-queues: the known queues with a job that could be claimed now.
--
-- $1 now: bigint ms, NULL = the database clock
--
-- Returns one row (name) per such queue. Sent after the LISTEN connection (re)connects: a NOTIFY
-- sent while it was down is lost, so the listeners hear about those queues this way instead.
--
-- Each look is a scalar subquery with LIMIT 1, not EXISTS: PostgreSQL strips an EXISTS query's
-- LIMIT, and on a table not analysed yet it answered "does q have a waiting job" with a bitmap of
-- every waiting job of q (20,000 rows read, 27 ms, at 20,000 waiting; it grows with the backlog).
-- With LIMIT 1 the planner walks an index and stops at the first row.
SELECT q.name
FROM {{schema}}.queues q
WHERE NOT q.paused
  AND ((SELECT 1 FROM {{schema}}.jobs WHERE queue = q.name AND state = 'waiting' LIMIT 1) IS NOT NULL
       OR (SELECT 1 FROM {{schema}}.jobs
           WHERE queue = q.name AND state = 'scheduled' AND run_at <= {{schema}}.now_ms($1) LIMIT 1) IS NOT NULL)
