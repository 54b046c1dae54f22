-- flow-windows: the rate windows of several limiter keys at once, as flow-counts.sql does for a
-- queue's own (forgets the starts that left each window, reads the count left and the oldest),
-- with each key's hold. A row of flow_starts is one claim's n starts (0011).
--
-- $1 buckets text[] (see limiterBucket)    $2 windows bigint[] ms, one per bucket    $3 now bigint ms
WITH b AS (
  SELECT * FROM unnest($1::text[], $2::bigint[]) AS b(bucket, window_ms)
),
dropped AS (
  DELETE FROM {{schema}}.flow_starts AS s USING b
  WHERE s.queue = b.bucket AND s.at <= $3::bigint - b.window_ms
  RETURNING s.queue, s.n
),
counted AS (
  UPDATE {{schema}}.flow_counts AS c SET n = c.n - d.k
  FROM (SELECT queue, sum(n) AS k FROM dropped GROUP BY queue) AS d
  WHERE c.bucket = d.queue
  RETURNING c.bucket, c.n
)
-- A held key (RetryLater with pause "key") has a flow_queues row of its own, named by its bucket.
SELECT b.bucket,
       coalesce((SELECT n FROM counted WHERE counted.bucket = b.bucket),
                (SELECT n FROM {{schema}}.flow_counts AS c WHERE c.bucket = b.bucket), 0)::int AS n,
       (SELECT s.at FROM {{schema}}.flow_starts AS s
        WHERE s.queue = b.bucket AND s.at > $3::bigint - b.window_ms ORDER BY s.at LIMIT 1) AS oldest,
       (SELECT f.held_until FROM {{schema}}.flow_queues AS f WHERE f.queue = b.bucket) AS held_until
FROM b
