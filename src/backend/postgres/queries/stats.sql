-- stats: per queue, jobs per state, the age of the longest-waiting due job, and the paused flag.
--
-- $1 now: bigint ms, NULL = the database clock    $2 queue text (NULL = every known queue)
--
-- Returns one row per known queue, by name: (queue, paused, scheduled, waiting, active,
-- waiting_children, completed, dead, cancelled, oldest_due_at). A due `scheduled` job counts as waiting. One
-- statement, so every count comes from the same snapshot. One pass over the queue's rows:
-- retention keeps the finished ones bounded, and the rest are the backlog being counted.
WITH counts AS (
  SELECT queue,
         count(*) FILTER (WHERE state = 'scheduled' AND run_at > {{schema}}.now_ms($1)) AS scheduled,
         count(*) FILTER (WHERE state = 'waiting' OR (state = 'scheduled' AND run_at <= {{schema}}.now_ms($1))) AS waiting,
         count(*) FILTER (WHERE state = 'active') AS active,
         count(*) FILTER (WHERE state = 'waiting-children') AS waiting_children,
         count(*) FILTER (WHERE state = 'completed') AS completed,
         count(*) FILTER (WHERE state = 'dead') AS dead,
         count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
         min(run_at) FILTER (WHERE state = 'waiting' OR (state = 'scheduled' AND run_at <= {{schema}}.now_ms($1))) AS oldest_due_at
  FROM {{schema}}.jobs
  WHERE $2::text IS NULL OR queue = $2
  GROUP BY queue
)
SELECT q.name AS queue, q.paused,
       coalesce(c.scheduled, 0) AS scheduled, coalesce(c.waiting, 0) AS waiting, coalesce(c.active, 0) AS active,
       coalesce(c.waiting_children, 0) AS waiting_children,
       coalesce(c.completed, 0) AS completed, coalesce(c.dead, 0) AS dead, coalesce(c.cancelled, 0) AS cancelled,
       c.oldest_due_at, {{schema}}.now_ms($1) AS observed_at
FROM {{schema}}.queues q
LEFT JOIN counts c ON c.queue = q.name
WHERE $2::text IS NULL OR q.name = $2
ORDER BY q.name
