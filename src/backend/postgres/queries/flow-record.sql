-- flow-record: records $3 starts of a rate-limited queue at $2 (one row of n starts, 0011), and
-- counts them (flow_counts).
--
-- $1 queue text    $2 at bigint ms    $3 count int
WITH added AS (
  INSERT INTO {{schema}}.flow_starts (queue, at, n) VALUES ($1, $2::bigint, $3::int)
)
INSERT INTO {{schema}}.flow_counts (bucket, n) VALUES ($1, $3::int)
ON CONFLICT (bucket) DO UPDATE SET n = {{schema}}.flow_counts.n + excluded.n
