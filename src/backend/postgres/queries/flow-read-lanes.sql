-- flow-read-lanes: everything a claim of one laned queue (groups, limiter keys) reads, in one
-- round trip. Read-only: the starts that left a window are forgotten by the claim
-- (flow-claim-lanes.sql), so the read commits nothing of its own. Two ways to run it (flow.ts):
-- - under the queue's flow row lock (flow-lock.sql, an earlier statement of the transaction:
--   a statement's snapshot is taken before it waits for a lock), with $2 the lock's clock;
-- - without the lock (the optimistic claim), $2 NULL: the clock is read here, and `flow.version`
--   (the row's xmin) lets the claim check that no other claim of the queue committed since this
--   read's snapshot (every laned claim that starts a job updates the row).
-- Returns one row:
-- - flow: the queue's flow row ({ rate_max, rate_duration_ms, max_running, max_running_per_name,
--   held_until, lanes, cursor, version, paused, now }), NULL when it has none; `paused`: the queue
--   is paused (queues.paused, which claim.sql reads for every other queue), so nothing starts;
-- - rate_window: when the queue has a rate, its window at `now` ({ n, oldest, exact }): flow_counts' n
--   less the starts that left the window and are still stored, and the oldest start inside it;
--   else NULL. A window this claim cannot fill (flow_counts' n + $6 below its limit) is not
--   counted exactly (`exact` false): n is flow_counts' n and oldest NULL, which lead the pick to
--   the same decisions (see `counted` below). A claim forgets the starts that left an exact
--   window, and those of another one once a window length after it last did (flow.ts,
--   WindowForgets), so the stored starts that left a window are few;
-- - running: active jobs per name and per group (flow_running(), as flow-counts.sql reads them)
--   ([{ kind: 'name' | 'group', key, n }]);
-- - lanes: up to $3 lanes with waiting or scheduled jobs, in turn from after the row's cursor: the
--   lanes after it in lane order, then (wrapping round) the lanes up to the cursor itself. A skip
--   scan over jobs_lanes: one index probe per lane, however many jobs each holds. Lane '' (the
--   unkeyed jobs) is not listed. `j.id IS NOT NULL` (always true; id is not in jobs_lanes) makes
--   each probe a plain index scan rather than an index-only one: a probe lands on the head of the
--   next lane, where the entries of its claimed jobs lie until a vacuum, and the index-only scan
--   stepped over them at about 0.6 ms per lane after 19,000 claimed jobs, the plain one at
--   0.05 ms (docs/flow-control.md, "Fifth round");
-- - heads: ([lane, id, name, group_key, group_concurrency, limiter_key, limiter_max,
--   limiter_duration_ms], an array per job: cheaper to build than an object) the first runnable
--   jobs of each listed lane in claim order, at most $5[k + 1] each
--   when k lanes are listed (headsPerLane, computed by the caller). Each lane's scan starts at
--   the first waiting or scheduled entry the walk found there (its priority, run_at, seq; same
--   statement, same snapshot, so no job the heads could take lies before it): it seeks past the
--   entries of the lane's claimed jobs instead of stepping over them again (60 buffers for ten
--   lanes after 10,000 claimed jobs, 159 when it stepped; docs/flow-control.md, "Seventh
--   round"). And the first $6 waiting
--   unkeyed jobs of the queue in claim order (reported as lane ''): a walk of jobs_claim, which
--   holds only jobs without a lane (migration flow_unkeyed_claim), so it reads unkeyed jobs only,
--   however many keyed ones wait;
-- - keys: the window of every limiter key among the heads ({ key, window_ms, n, oldest, exact,
--   held_until }), counted like the queue's; its window is the longest duration its head jobs
--   give, its limit the least max. A key's bucket is $7 || key (limiterBucketPrefix); a held key (RetryLater with pause
--   "key") has a flow_queues row of its own, named by its bucket.
-- A row of flow_starts is one claim's n starts (0011).
--
-- $1 queue text    $2 now bigint ms, NULL: the database clock    $3 most lanes int
-- $4 names text[]    $5 heads per lane int[]    $6 unkeyed int    $7 limiter bucket prefix text
WITH RECURSIVE flow AS MATERIALIZED (
  SELECT f.rate_max, f.rate_duration_ms, f.max_running, f.max_running_per_name, f.held_until, f.lanes,
         coalesce(f.lane_cursor, '') AS cursor, f.xmin::text AS version,
         EXISTS (SELECT 1 FROM {{schema}}.queues AS q WHERE q.name = $1 AND q.paused) AS paused,
         coalesce($2::bigint, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
  FROM {{schema}}.flow_queues AS f
  WHERE f.queue = $1
),
after_cursor (lane, n, priority, run_at, seq) AS (
  (SELECT j.lane, 1, j.priority, j.run_at, j.seq FROM {{schema}}.jobs AS j
   WHERE j.queue = $1 AND j.lane > (SELECT cursor FROM flow) AND j.state IN ('waiting', 'scheduled') AND j.id IS NOT NULL
   ORDER BY j.lane, j.priority, j.run_at, j.seq LIMIT 1)
  UNION ALL
  SELECT nx.lane, w.n + 1, nx.priority, nx.run_at, nx.seq
  FROM after_cursor AS w
  CROSS JOIN LATERAL (
    SELECT j.lane, j.priority, j.run_at, j.seq FROM {{schema}}.jobs AS j
    WHERE j.queue = $1 AND j.lane > w.lane AND j.state IN ('waiting', 'scheduled') AND j.id IS NOT NULL
    ORDER BY j.lane, j.priority, j.run_at, j.seq LIMIT 1
  ) AS nx
  WHERE w.n < $3::int
),
wrapped (lane, n, priority, run_at, seq) AS (
  (SELECT j.lane, 1, j.priority, j.run_at, j.seq FROM {{schema}}.jobs AS j
   WHERE j.queue = $1 AND j.lane > '' AND j.lane <= (SELECT cursor FROM flow) AND j.state IN ('waiting', 'scheduled') AND j.id IS NOT NULL
     AND (SELECT count(*) FROM after_cursor) < $3::int
   ORDER BY j.lane, j.priority, j.run_at, j.seq LIMIT 1)
  UNION ALL
  SELECT nx.lane, w.n + 1, nx.priority, nx.run_at, nx.seq
  FROM wrapped AS w
  CROSS JOIN LATERAL (
    SELECT j.lane, j.priority, j.run_at, j.seq FROM {{schema}}.jobs AS j
    WHERE j.queue = $1 AND j.lane > w.lane AND j.lane <= (SELECT cursor FROM flow) AND j.state IN ('waiting', 'scheduled') AND j.id IS NOT NULL
    ORDER BY j.lane, j.priority, j.run_at, j.seq LIMIT 1
  ) AS nx
  WHERE w.n < $3::int - (SELECT count(*) FROM after_cursor)
),
lanes AS (
  SELECT lane, priority, run_at, seq, row_number() OVER (ORDER BY part, n) AS ord
  FROM (
    SELECT lane, priority, run_at, seq, 0 AS part, n FROM after_cursor
    UNION ALL
    SELECT lane, priority, run_at, seq, 1 AS part, n FROM wrapped
  ) AS l
),
heads AS (
  SELECT l.lane, h.id, h.name, h.priority, h.run_at, h.seq, h.group_key, h.group_concurrency,
         h.limiter_key, h.limiter_max, h.limiter_duration_ms
  FROM lanes AS l
  CROSS JOIN LATERAL (
    SELECT id, name, priority, run_at, seq, group_key, group_concurrency, limiter_key, limiter_max, limiter_duration_ms
    FROM {{schema}}.jobs
    WHERE queue = $1 AND lane = l.lane AND (priority, run_at, seq) >= (l.priority, l.run_at, l.seq)
      AND state IN ('waiting', 'scheduled') AND run_at <= (SELECT now FROM flow)
      AND name = ANY ($4::text[])
    ORDER BY priority, run_at, seq
    LIMIT ($5::int[])[(SELECT count(*) FROM lanes) + 1]
  ) AS h
  UNION ALL
  SELECT '' AS lane, u.id, u.name, u.priority, u.run_at, u.seq, NULL, NULL, NULL, NULL, NULL
  FROM (
    SELECT id, name, priority, run_at, seq FROM {{schema}}.jobs
    WHERE queue = $1 AND state = 'waiting' AND lane IS NULL AND name = ANY ($4::text[])
    ORDER BY priority, run_at, seq
    LIMIT $6::int
  ) AS u
),
windows AS (
  -- The queue's own window (when it has a rate) and each limiter key's among the heads, with the
  -- most starts it allows (a key's: the least its head jobs give) and flow_counts' n: every start
  -- stored for it, those that left the window included, so at least the window's count.
  SELECT w.key, w.bucket, w.window_ms, w.most, coalesce((SELECT c.n FROM {{schema}}.flow_counts AS c WHERE c.bucket = w.bucket), 0) AS stored
  FROM (
    SELECT NULL::text AS key, $1::text AS bucket, f.rate_duration_ms AS window_ms, f.rate_max AS most
    FROM flow AS f WHERE f.rate_duration_ms IS NOT NULL
    UNION ALL
    SELECT limiter_key, $7::text || limiter_key, max(limiter_duration_ms), min(limiter_max)
    FROM heads WHERE limiter_key IS NOT NULL
    GROUP BY limiter_key
  ) AS w
),
exact AS (
  -- The windows this claim could fill: stored + $6 (the claim's size) reaches their limit (windowNeedsExactCount, src/core/flow.ts).
  SELECT bucket, (SELECT now FROM flow) - window_ms AS cutoff FROM windows WHERE stored + $6::int >= coalesce(most, 0)
),
counted AS (
  -- A window the claim cannot fill whatever its exact count reports `stored` and no oldest
  -- start: every decision the pick makes with it is the one the exact count gives (room for
  -- all $6, never its last slot taken, so the oldest start is never asked for), and it skips
  -- two probes of flow_starts per window. The others are counted exactly: flow_windows (0016),
  -- each window's stored starts by a plain index scan of flow_starts_window.
  SELECT w.key, w.bucket, w.window_ms, w.stored - coalesce(fw.expired, 0) AS n, fw.oldest, fw.bucket IS NOT NULL AS exact
  FROM windows AS w
  -- Not called at all without such a window: a call pays for its settings even with nothing to do.
  LEFT JOIN (
    SELECT * FROM {{schema}}.flow_windows((SELECT array_agg(bucket) FROM exact), (SELECT array_agg(cutoff) FROM exact))
    WHERE EXISTS (SELECT 1 FROM exact)
  ) AS fw ON fw.bucket = w.bucket
)
SELECT
  (SELECT row_to_json(f) FROM flow AS f) AS flow,
  (SELECT json_build_object('n', c.n, 'oldest', c.oldest, 'exact', c.exact) FROM counted AS c WHERE c.key IS NULL) AS rate_window,
  (SELECT coalesce(json_agg(json_build_object('kind', r.kind, 'key', r.key, 'n', r.n)), '[]')
   FROM {{schema}}.flow_running($1) AS r) AS running,
  (SELECT coalesce(json_agg(lane ORDER BY ord), '[]') FROM lanes) AS lanes,
  (SELECT coalesce(json_agg(json_build_array(h.lane, h.id, h.name, h.group_key, h.group_concurrency, h.limiter_key, h.limiter_max, h.limiter_duration_ms)
                            ORDER BY h.priority, h.run_at, h.seq), '[]')
   FROM heads AS h) AS heads,
  (SELECT coalesce(json_agg(json_build_object(
            'key', c.key, 'window_ms', c.window_ms, 'n', c.n, 'oldest', c.oldest, 'exact', c.exact,
            'held_until', (SELECT f.held_until FROM {{schema}}.flow_queues AS f WHERE f.queue = c.bucket))), '[]')
   FROM counted AS c WHERE c.key IS NOT NULL) AS keys
