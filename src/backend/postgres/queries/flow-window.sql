-- flow-window: forgets the starts that left a queue's rate window and counts those still in it.
--
-- $1 queue text    $2 now bigint ms    $3 window bigint ms
--
-- Returns one row (n int, oldest bigint or NULL).
WITH dropped AS (
  DELETE FROM {{schema}}.flow_starts WHERE queue = $1 AND at <= $2::bigint - $3::bigint
)
SELECT count(*)::int AS n, min(at) AS oldest
FROM {{schema}}.flow_starts
WHERE queue = $1 AND at > $2::bigint - $3::bigint
