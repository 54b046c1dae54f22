-- stats: per queue, jobs per state, the age of the longest-waiting due job, and the paused flag.
--
-- $1 now: bigint ms, NULL = the database clock    $2 queue text (NULL = every known queue)
--
-- Returns one row per known queue, by name: (queue, paused, scheduled, waiting, active,
-- waiting_children, completed, dead, cancelled, oldest_due_at, observed_at). A due `scheduled`
-- job counts as waiting. One statement, so every figure comes from the same snapshot.
--
-- Cost does not grow with the jobs stored (migration 0007): the counts are sums over job_counts
-- (a few delta rows per (queue, state), folded by prune); the due scheduled jobs, which the
-- stored state still calls scheduled, are a jobs_scheduled range up to now (promoteDue keeps it
-- short); the oldest waiting job of a queue is the first jobs_claim entry of each priority in
-- use, found by skipping from one priority to the next (one probe per priority, not one read per
-- job: jobs_claim is ordered by priority first, so min(run_at) cannot read one end of it). A
-- laned queue's keyed jobs are not in jobs_claim (migration flow_unkeyed_claim): for them the skip goes over jobs_lanes,
-- one probe per (lane, priority) in use.
WITH totals AS (
  SELECT queue,
         sum(n) FILTER (WHERE state = 'scheduled')::bigint AS scheduled,
         sum(n) FILTER (WHERE state = 'waiting')::bigint AS waiting,
         sum(n) FILTER (WHERE state = 'active')::bigint AS active,
         sum(n) FILTER (WHERE state = 'waiting-children')::bigint AS waiting_children,
         sum(n) FILTER (WHERE state = 'completed')::bigint AS completed,
         sum(n) FILTER (WHERE state = 'dead')::bigint AS dead,
         sum(n) FILTER (WHERE state = 'cancelled')::bigint AS cancelled
  FROM {{schema}}.job_counts
  WHERE $2::text IS NULL OR queue = $2
  GROUP BY queue
),
due AS (
  SELECT queue, count(*) AS n, min(run_at) AS oldest
  FROM {{schema}}.jobs
  WHERE state = 'scheduled' AND run_at <= {{schema}}.now_ms($1)
    AND ($2::text IS NULL OR queue = $2)
  GROUP BY queue
)
SELECT q.name AS queue, q.paused,
       coalesce(t.scheduled, 0) - coalesce(d.n, 0) AS scheduled,
       coalesce(t.waiting, 0) + coalesce(d.n, 0) AS waiting,
       coalesce(t.active, 0) AS active,
       coalesce(t.waiting_children, 0) AS waiting_children,
       coalesce(t.completed, 0) AS completed, coalesce(t.dead, 0) AS dead, coalesce(t.cancelled, 0) AS cancelled,
       -- least() skips NULLs: the older of the oldest waiting and the oldest due scheduled job.
       least(d.oldest, CASE WHEN coalesce(t.waiting, 0) > 0 THEN least((
         WITH RECURSIVE priorities AS (
           SELECT (SELECT j.priority FROM {{schema}}.jobs AS j
                   WHERE j.queue = q.name AND j.state = 'waiting' AND j.lane IS NULL
                   ORDER BY j.priority LIMIT 1) AS priority
           UNION ALL
           SELECT (SELECT j.priority FROM {{schema}}.jobs AS j
                   WHERE j.queue = q.name AND j.state = 'waiting' AND j.lane IS NULL AND j.priority > p.priority
                   ORDER BY j.priority LIMIT 1)
           FROM priorities AS p
           WHERE p.priority IS NOT NULL
         )
         SELECT min((SELECT j.run_at FROM {{schema}}.jobs AS j
                     WHERE j.queue = q.name AND j.state = 'waiting' AND j.lane IS NULL AND j.priority = p.priority
                     ORDER BY j.run_at LIMIT 1))
         FROM priorities AS p
         WHERE p.priority IS NOT NULL
       ), (
         -- A laned queue's keyed jobs (groups, limiter keys) are in jobs_lanes, not jobs_claim: the
         -- same skip per (lane, priority) in use, one probe each.
         WITH RECURSIVE pairs AS (
           SELECT f.lane, f.priority FROM (
             SELECT j.lane, j.priority FROM {{schema}}.jobs AS j
             WHERE j.queue = q.name AND j.lane IS NOT NULL AND j.state IN ('waiting', 'scheduled')
               AND EXISTS (SELECT 1 FROM {{schema}}.flow_queues AS fq WHERE fq.queue = q.name AND fq.lanes)
             ORDER BY j.lane, j.priority LIMIT 1) AS f
           UNION ALL
           SELECT n.lane, n.priority FROM pairs AS p
           CROSS JOIN LATERAL (
             SELECT j.lane, j.priority FROM {{schema}}.jobs AS j
             WHERE j.queue = q.name AND j.lane IS NOT NULL AND j.state IN ('waiting', 'scheduled')
               AND (j.lane, j.priority) > (p.lane, p.priority)
             ORDER BY j.lane, j.priority LIMIT 1) AS n
         )
         SELECT min((SELECT j.run_at FROM {{schema}}.jobs AS j
                     WHERE j.queue = q.name AND j.lane = p.lane AND j.priority = p.priority
                       AND j.state IN ('waiting', 'scheduled') AND j.state = 'waiting'
                     ORDER BY j.run_at LIMIT 1))
         FROM pairs AS p
       )) END) AS oldest_due_at,
       {{schema}}.now_ms($1) AS observed_at
FROM {{schema}}.queues q
LEFT JOIN totals t ON t.queue = q.name
LEFT JOIN due d ON d.queue = q.name
WHERE $2::text IS NULL OR q.name = $2
ORDER BY q.name
