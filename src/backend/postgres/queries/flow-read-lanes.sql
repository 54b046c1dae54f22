-- flow-read-lanes: everything a claim of one laned queue (groups, limiter keys) reads, in one
-- round trip, under its flow row lock (flow-lock.sql; a separate statement, since a statement's
-- snapshot is taken before it waits for a lock). Returns one row:
-- - rate_window: when $3 is not NULL, the queue's rate window as flow-counts.sql reads it
--   ({ n, oldest }, after forgetting the starts that left it), else NULL;
-- - running: active jobs per name and per group (flow_running(), as flow-counts.sql reads them)
--   ([{ kind: 'name' | 'group', key, n }]);
-- - lanes: up to $5 lanes with waiting or scheduled jobs, in turn from after lane $4: the lanes
--   after it in lane order, then (wrapping round) the lanes up to $4 itself. A skip scan over
--   jobs_lanes: one index probe per lane, however many jobs each holds. Lane '' (the unkeyed
--   jobs) is not listed. `j.id IS NOT NULL` (always true; id is not in jobs_lanes) makes each
--   probe a plain index scan rather than an index-only one: a probe lands on the head of the
--   next lane, where the entries of its claimed jobs lie until a vacuum, and the index-only scan
--   stepped over them at about 0.6 ms per lane after 19,000 claimed jobs, the plain one at
--   0.05 ms (docs/flow-control.md, "Fifth round");
-- - heads: the first runnable jobs of each listed lane in claim order, at most $7[k + 1] each
--   when k lanes are listed (headsPerLane, computed by the caller), and the first $8 waiting
--   unkeyed jobs of the queue in claim order (reported as lane ''): a walk of jobs_claim, which
--   holds only jobs without a lane (migration flow_unkeyed_claim), so it reads unkeyed jobs only, however many keyed
--   ones wait;
-- - keys: the window of every limiter key among the heads ({ key, n, oldest, held_until }), after
--   forgetting the starts that left it; its window is the longest duration its head jobs give.
--   A key's bucket is $9 || key (limiterBucketPrefix); a held key (RetryLater with pause "key")
--   has a flow_queues row of its own, named by its bucket.
-- A row of flow_starts is one claim's n starts (0011).
--
-- $1 queue text    $2 now bigint ms    $3 rate window bigint ms, NULL: no rate    $4 lane cursor
-- text ('' for the first)    $5 most lanes int    $6 names text[]    $7 heads per lane int[]
-- $8 unkeyed int    $9 limiter bucket prefix text
WITH RECURSIVE after_cursor (lane, n) AS (
  (SELECT j.lane, 1 FROM {{schema}}.jobs AS j
   WHERE j.queue = $1 AND j.lane > $4::text AND j.state IN ('waiting', 'scheduled') AND j.id IS NOT NULL
   ORDER BY j.lane LIMIT 1)
  UNION ALL
  SELECT (SELECT j.lane FROM {{schema}}.jobs AS j
          WHERE j.queue = $1 AND j.lane > w.lane AND j.state IN ('waiting', 'scheduled') AND j.id IS NOT NULL
          ORDER BY j.lane LIMIT 1),
         w.n + 1
  FROM after_cursor AS w
  WHERE w.lane IS NOT NULL AND w.n < $5::int
),
wrapped (lane, n) AS (
  (SELECT j.lane, 1 FROM {{schema}}.jobs AS j
   WHERE j.queue = $1 AND j.lane > '' AND j.lane <= $4::text AND j.state IN ('waiting', 'scheduled') AND j.id IS NOT NULL
     AND (SELECT count(lane) FROM after_cursor) < $5::int
   ORDER BY j.lane LIMIT 1)
  UNION ALL
  SELECT (SELECT j.lane FROM {{schema}}.jobs AS j
          WHERE j.queue = $1 AND j.lane > w.lane AND j.lane <= $4::text AND j.state IN ('waiting', 'scheduled') AND j.id IS NOT NULL
          ORDER BY j.lane LIMIT 1),
         w.n + 1
  FROM wrapped AS w
  WHERE w.lane IS NOT NULL AND w.n < $5::int - (SELECT count(lane) FROM after_cursor)
),
lanes AS (
  SELECT lane, row_number() OVER (ORDER BY part, n) AS ord
  FROM (
    SELECT lane, 0 AS part, n FROM after_cursor WHERE lane IS NOT NULL
    UNION ALL
    SELECT lane, 1 AS part, n FROM wrapped WHERE lane IS NOT NULL
  ) AS l
),
heads AS (
  SELECT l.lane, h.id, h.name, h.priority, h.run_at, h.seq, h.group_key, h.group_concurrency,
         h.limiter_key, h.limiter_max, h.limiter_duration_ms
  FROM lanes AS l
  CROSS JOIN LATERAL (
    SELECT id, name, priority, run_at, seq, group_key, group_concurrency, limiter_key, limiter_max, limiter_duration_ms
    FROM {{schema}}.jobs
    WHERE queue = $1 AND lane = l.lane AND state IN ('waiting', 'scheduled') AND run_at <= $2::bigint
      AND name = ANY ($6::text[])
    ORDER BY priority, run_at, seq
    LIMIT ($7::int[])[(SELECT count(*) FROM lanes) + 1]
  ) AS h
  UNION ALL
  SELECT '' AS lane, u.id, u.name, u.priority, u.run_at, u.seq, NULL, NULL, NULL, NULL, NULL
  FROM (
    SELECT id, name, priority, run_at, seq FROM {{schema}}.jobs
    WHERE queue = $1 AND state = 'waiting' AND lane IS NULL AND name = ANY ($6::text[])
    ORDER BY priority, run_at, seq
    LIMIT $8::int
  ) AS u
),
keys AS (
  SELECT limiter_key AS key, $9::text || limiter_key AS bucket, max(limiter_duration_ms) AS window_ms
  FROM heads WHERE limiter_key IS NOT NULL
  GROUP BY limiter_key
),
key_dropped AS (
  DELETE FROM {{schema}}.flow_starts AS s USING keys AS k
  WHERE s.queue = k.bucket AND s.at <= $2::bigint - k.window_ms
  RETURNING s.queue, s.n
),
queue_dropped AS (
  DELETE FROM {{schema}}.flow_starts
  WHERE queue = $1 AND $3::bigint IS NOT NULL AND at <= $2::bigint - $3::bigint
  RETURNING queue, n
),
counted AS (
  UPDATE {{schema}}.flow_counts AS c SET n = c.n - d.k
  FROM (
    SELECT queue, sum(n) AS k FROM (SELECT * FROM key_dropped UNION ALL SELECT * FROM queue_dropped) AS x GROUP BY queue
  ) AS d
  WHERE c.bucket = d.queue
  RETURNING c.bucket, c.n
)
SELECT
  (SELECT json_build_object(
            'n', coalesce((SELECT n FROM counted WHERE bucket = $1), (SELECT n FROM {{schema}}.flow_counts WHERE bucket = $1), 0),
            'oldest', (SELECT at FROM {{schema}}.flow_starts WHERE queue = $1 AND at > $2::bigint - $3::bigint ORDER BY at LIMIT 1))
   WHERE $3::bigint IS NOT NULL) AS rate_window,
  (SELECT coalesce(json_agg(json_build_object('kind', r.kind, 'key', r.key, 'n', r.n)), '[]')
   FROM {{schema}}.flow_running($1) AS r) AS running,
  (SELECT coalesce(json_agg(lane ORDER BY ord), '[]') FROM lanes) AS lanes,
  (SELECT coalesce(json_agg(h ORDER BY h.priority, h.run_at, h.seq), '[]') FROM heads AS h) AS heads,
  (SELECT coalesce(json_agg(json_build_object(
            'key', k.key,
            'n', coalesce((SELECT c.n FROM counted AS c WHERE c.bucket = k.bucket), (SELECT c.n FROM {{schema}}.flow_counts AS c WHERE c.bucket = k.bucket), 0),
            'oldest', (SELECT s.at FROM {{schema}}.flow_starts AS s WHERE s.queue = k.bucket AND s.at > $2::bigint - k.window_ms ORDER BY s.at LIMIT 1),
            'held_until', (SELECT f.held_until FROM {{schema}}.flow_queues AS f WHERE f.queue = k.bucket))), '[]')
   FROM keys AS k) AS keys
