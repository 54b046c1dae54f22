-- flow-windows: forgets the starts that left each limiter key's window and counts those left.
--
-- $1 buckets text[] (see limiterBucket)    $2 windows bigint[] ms, one per bucket    $3 now bigint ms
WITH b AS (
  SELECT * FROM unnest($1::text[], $2::bigint[]) AS b(bucket, window_ms)
),
dropped AS (
  DELETE FROM {{schema}}.flow_starts AS s USING b
  WHERE s.queue = b.bucket AND s.at <= $3::bigint - b.window_ms
)
-- A held key (RetryLater with pause "key") has a flow_queues row of its own, named by its bucket.
SELECT b.bucket, count(s.at)::int AS n, min(s.at) AS oldest,
       (SELECT f.held_until FROM {{schema}}.flow_queues AS f WHERE f.queue = b.bucket) AS held_until
FROM b LEFT JOIN {{schema}}.flow_starts AS s ON s.queue = b.bucket AND s.at > $3::bigint - b.window_ms
GROUP BY b.bucket
