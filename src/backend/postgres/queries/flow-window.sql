-- flow-window: forgets the starts that left a queue's rate window and reads how many are left
-- (flow_counts, kept in step here: the cost is the starts that expired, not the window's size)
-- and the oldest of them.
--
-- $1 queue text    $2 now bigint ms    $3 window bigint ms
--
-- Returns one row (n int, oldest bigint or NULL).
WITH dropped AS (
  DELETE FROM {{schema}}.flow_starts WHERE queue = $1 AND at <= $2::bigint - $3::bigint RETURNING 1
),
counted AS (
  UPDATE {{schema}}.flow_counts SET n = n - (SELECT count(*) FROM dropped)
  WHERE bucket = $1 AND EXISTS (SELECT 1 FROM dropped)
  RETURNING n
)
SELECT coalesce((SELECT n FROM counted), (SELECT n FROM {{schema}}.flow_counts WHERE bucket = $1), 0)::int AS n,
       (SELECT at FROM {{schema}}.flow_starts WHERE queue = $1 AND at > $2::bigint - $3::bigint ORDER BY at LIMIT 1) AS oldest
