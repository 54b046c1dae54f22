-- flow-lanes: up to $3 lanes of queue $1 with waiting or scheduled jobs, in turn from after lane
-- $2: first the lanes after it in lane order, then (wrapping round) the lanes from the first up
-- to $2 itself. A skip scan over jobs_lanes: one index probe per lane, however many jobs each
-- holds. Lane '' (the unkeyed jobs) is not listed: flow-lane-heads.sql reads it on every claim.
--
-- $1 queue text    $2 after text ('' for the first)    $3 most lanes int
WITH RECURSIVE after_cursor (lane, n) AS (
  (SELECT j.lane, 1 FROM {{schema}}.jobs AS j
   WHERE j.queue = $1 AND j.lane > $2::text AND j.state IN ('waiting', 'scheduled')
   ORDER BY j.lane LIMIT 1)
  UNION ALL
  SELECT (SELECT j.lane FROM {{schema}}.jobs AS j
          WHERE j.queue = $1 AND j.lane > w.lane AND j.state IN ('waiting', 'scheduled')
          ORDER BY j.lane LIMIT 1),
         w.n + 1
  FROM after_cursor AS w
  WHERE w.lane IS NOT NULL AND w.n < $3::int
),
wrapped (lane, n) AS (
  (SELECT j.lane, 1 FROM {{schema}}.jobs AS j
   WHERE j.queue = $1 AND j.lane > '' AND j.lane <= $2::text AND j.state IN ('waiting', 'scheduled')
     AND (SELECT count(lane) FROM after_cursor) < $3::int
   ORDER BY j.lane LIMIT 1)
  UNION ALL
  SELECT (SELECT j.lane FROM {{schema}}.jobs AS j
          WHERE j.queue = $1 AND j.lane > w.lane AND j.lane <= $2::text AND j.state IN ('waiting', 'scheduled')
          ORDER BY j.lane LIMIT 1),
         w.n + 1
  FROM wrapped AS w
  WHERE w.lane IS NOT NULL AND w.n < $3::int - (SELECT count(lane) FROM after_cursor)
)
SELECT lane FROM (
  SELECT lane, 0 AS part, n FROM after_cursor WHERE lane IS NOT NULL
  UNION ALL
  SELECT lane, 1 AS part, n FROM wrapped WHERE lane IS NOT NULL
) AS l
ORDER BY part, n
