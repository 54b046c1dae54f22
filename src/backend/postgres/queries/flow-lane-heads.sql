-- flow-lane-heads: the first runnable jobs of each lane in $2 (at most $5 each), and the first
-- runnable unkeyed jobs of the queue (lane '', at most $6, looked for among the 256 jobs at the
-- head of the queue: behind a deep backlog of keyed jobs an unkeyed one waits its turn).
--
-- $1 queue text    $2 lanes text[]    $3 now bigint ms    $4 names text[]    $5 per lane int
-- $6 unkeyed int
SELECT l.lane, h.id, h.name, h.priority, h.run_at, h.seq, h.group_key, h.group_concurrency,
       h.limiter_key, h.limiter_max, h.limiter_duration_ms
FROM unnest($2::text[]) AS l(lane)
CROSS JOIN LATERAL (
  SELECT id, name, priority, run_at, seq, group_key, group_concurrency, limiter_key, limiter_max, limiter_duration_ms
  FROM {{schema}}.jobs
  WHERE queue = $1 AND lane = l.lane AND state IN ('waiting', 'scheduled') AND run_at <= $3::bigint
    AND name = ANY ($4::text[])
  ORDER BY priority, run_at, seq
  LIMIT $5::int
) AS h
UNION ALL
SELECT '' AS lane, u.id, u.name, u.priority, u.run_at, u.seq, NULL, NULL, NULL, NULL, NULL
FROM (
  SELECT id, name, priority, run_at, seq, lane FROM {{schema}}.jobs
  WHERE queue = $1 AND state = 'waiting' AND name = ANY ($4::text[])
  ORDER BY priority, run_at, seq
  LIMIT 256
) AS u
WHERE u.lane IS NULL AND $6::int > 0
