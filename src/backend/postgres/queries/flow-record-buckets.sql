-- flow-record-buckets: records one start at $2 in each bucket of $1 (repeats count), and counts
-- them (flow_counts).
--
-- $1 buckets text[]    $2 at bigint ms
WITH added AS (
  INSERT INTO {{schema}}.flow_starts (queue, at)
  SELECT bucket, $2::bigint FROM unnest($1::text[]) AS b(bucket)
)
INSERT INTO {{schema}}.flow_counts (bucket, n)
SELECT bucket, count(*)::int FROM unnest($1::text[]) AS b(bucket) GROUP BY bucket
ON CONFLICT (bucket) DO UPDATE SET n = {{schema}}.flow_counts.n + excluded.n
