-- flow-claim-lanes: claims the jobs a laned queue's claim picked (flow.ts), under the queue's
-- flow row lock, and in the same statement records their starts and the lane cursor: one row
-- per rate window it fills (the queue's own when $9, each limiter key's bucket) with
-- the starts it made there (flow_starts n, 0011), added to flow_counts. Each job gets attempt + 1
-- and a new lease token, like claim.sql. A picked job no longer waiting (cancelled meanwhile) is
-- not claimed and records nothing.
--
-- $1 now bigint ms    $2 ids text[]    $3 lease_ms bigint    $4 worker_id text    $5 worker_host text
-- $6 worker_pid int    $7 queue text    $8 buckets text[], one per id: its limiter key's bucket or
-- NULL    $9 the queue has a rate boolean    $10 lane cursor text, NULL: unchanged
--
-- Returns the claimed rows ({{job_columns}}).
WITH claimed AS (
  UPDATE {{schema}}.jobs AS j
  SET state = 'active',
      attempt = j.attempt + 1,
      lease_token = {{next_lease_token}},
      lease_expires_at = $1::bigint + $3::bigint,
      worker_id = $4,
      worker_host = $5,
      worker_pid = $6,
      started_at = $1::bigint
  WHERE j.id = ANY ($2::text[]) AND j.state IN ('waiting', 'scheduled')
  RETURNING {{job_columns}}
),
started AS (
  SELECT b.bucket, count(*)::int AS n
  FROM claimed AS c JOIN unnest($2::text[], $8::text[]) AS b(id, bucket) ON b.id = c.id
  WHERE b.bucket IS NOT NULL
  GROUP BY b.bucket
  UNION ALL
  SELECT $7::text, count(*)::int FROM claimed WHERE $9::boolean HAVING count(*) > 0
),
recorded AS (
  INSERT INTO {{schema}}.flow_starts (queue, at, n) SELECT bucket, $1::bigint, n FROM started
),
counted AS (
  INSERT INTO {{schema}}.flow_counts (bucket, n) SELECT bucket, n FROM started
  ON CONFLICT (bucket) DO UPDATE SET n = {{schema}}.flow_counts.n + excluded.n
),
moved AS (
  UPDATE {{schema}}.flow_queues SET lane_cursor = $10::text WHERE queue = $7 AND $10::text IS NOT NULL
)
SELECT * FROM claimed
