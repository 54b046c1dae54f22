-- runnable-queues: the known queues with a job that could be claimed now.
--
-- $1 now: bigint ms, NULL = the database clock
--
-- Returns one row (name) per such queue. Sent after the LISTEN connection (re)connects: a NOTIFY
-- sent while it was down is lost, so the listeners hear about those queues this way instead.
SELECT q.name
FROM {{schema}}.queues q
WHERE NOT q.paused
  AND (EXISTS (SELECT 1 FROM {{schema}}.jobs WHERE queue = q.name AND state = 'waiting')
       OR EXISTS (SELECT 1 FROM {{schema}}.jobs
                  WHERE queue = q.name AND state = 'scheduled' AND run_at <= {{schema}}.now_ms($1)))
