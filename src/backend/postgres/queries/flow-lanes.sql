-- flow-lanes: up to $3 lanes of queue $1 with waiting or scheduled jobs, after lane $2, in lane
-- order: a skip scan over jobs_lanes (one index probe per lane, however many jobs each holds).
--
-- $1 queue text    $2 after text ('' for the first)    $3 most lanes int
WITH RECURSIVE walk (lane, n) AS (
  (SELECT j.lane, 1 FROM {{schema}}.jobs AS j
   WHERE j.queue = $1 AND j.lane > $2::text AND j.state IN ('waiting', 'scheduled')
   ORDER BY j.lane LIMIT 1)
  UNION ALL
  SELECT (SELECT j.lane FROM {{schema}}.jobs AS j
          WHERE j.queue = $1 AND j.lane > w.lane AND j.state IN ('waiting', 'scheduled')
          ORDER BY j.lane LIMIT 1),
         w.n + 1
  FROM walk AS w
  WHERE w.lane IS NOT NULL AND w.n < $3::int
)
SELECT lane FROM walk WHERE lane IS NOT NULL
