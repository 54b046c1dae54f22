-- flow-counts: what a claim of one flow-limited queue needs to know, in one round trip, under
-- its flow row lock (flow-lock.sql):
-- - kind 'window' (when $3 is not NULL): forgets the starts that left the queue's rate window
--   and reads how many are left (flow_counts, kept in step here: the cost is the claims whose
--   starts expired, not the window's size) and the oldest of them. A row of flow_starts is one
--   claim's n starts (0011).
-- - kind 'name' / 'group' (when $4): active jobs of the queue per name and per group
--   (flow_running(), migration flow_unkeyed_claim: jobs_active by index scan), a set bounded by the fleet's concurrency;
--   expired leases not yet rescued hold their slot until the rescue.
--
-- $1 queue text    $2 now bigint ms    $3 rate window bigint ms, NULL: no rate
-- $4 running counts boolean
--
-- Returns (kind text, key text, n int, oldest bigint or NULL).
WITH dropped AS (
  DELETE FROM {{schema}}.flow_starts
  WHERE queue = $1 AND $3::bigint IS NOT NULL AND at <= $2::bigint - $3::bigint
  RETURNING n
),
counted AS (
  UPDATE {{schema}}.flow_counts SET n = n - (SELECT sum(n) FROM dropped)
  WHERE bucket = $1 AND EXISTS (SELECT 1 FROM dropped)
  RETURNING n
)
SELECT 'window' AS kind, NULL::text AS key,
       coalesce((SELECT n FROM counted), (SELECT n FROM {{schema}}.flow_counts WHERE bucket = $1), 0)::int AS n,
       (SELECT at FROM {{schema}}.flow_starts WHERE queue = $1 AND at > $2::bigint - $3::bigint ORDER BY at LIMIT 1) AS oldest
WHERE $3::bigint IS NOT NULL
UNION ALL
SELECT r.kind, r.key, r.n, NULL::bigint FROM {{schema}}.flow_running($1) AS r WHERE $4::boolean
