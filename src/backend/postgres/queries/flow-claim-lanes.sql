-- flow-claim-lanes: claims the jobs a laned queue's claim picked (flow.ts), and in the same
-- statement forgets the starts that left the windows the read counted, records the new starts
-- (one row per rate window it fills: the queue's own when $9, each limiter key's bucket, with the
-- starts it made there: flow_starts n, 0011), moves flow_counts by both in one write per bucket,
-- and updates the queue's flow row (the lane cursor, and with it the row's xmin: every claim that
-- starts a job changes the row, which is what the optimistic claim below checks). Each job gets
-- attempt + 1 and a new lease token, like claim.sql. A picked job no longer waiting (cancelled
-- meanwhile) is not claimed and records nothing.
--
-- Two ways to run it (flow.ts):
-- - $11 NULL: the caller holds the queue's flow row lock (flow-lock.sql) and read under it; the
--   jobs start at $1, the lock's clock reading.
-- - $11 the flow row's version (xmin) as an unlocked read saw it (flow-read-lanes.sql, the
--   optimistic claim): the row is locked here, and the claim goes ahead only if the version is
--   the same, i.e. no other claim of the queue committed since that read's snapshot, so what it
--   counted still holds: what changed meanwhile without touching this row can only have made
--   room (completions, starts leaving their window), except a hold of one limiter key (RetryLater
--   with pause "key" writes the key's own row), which the locked path does not see either, and a
--   pause, checked here. Otherwise nothing is claimed, forgotten or recorded, and the caller
--   claims again under the lock. The jobs start at the clock reading after the lock when $12
--   (the database clock: a later start only leaves the windows more room), else at $1.
--
-- $1 now bigint ms    $2 ids text[]    $3 lease_ms bigint    $4 worker_id text    $5 worker_host text
-- $6 worker_pid int    $7 queue text    $8 buckets text[], one per id: its limiter key's bucket or
-- NULL    $9 the queue has a rate boolean    $10 lane cursor text, NULL: unchanged
-- $11 version text, NULL: the caller holds the lock    $12 database clock boolean
-- $13 buckets text[] and $14 cutoffs bigint[]: windows the read counted whose starts at or before
-- their cutoff (now - window) are forgotten: those it counted exactly, and the others when due
-- (flow.ts, WindowForgets)
--
-- Returns the claimed rows ({{job_columns}}); none when the version check failed.
WITH locked AS MATERIALIZED (
  SELECT f.xmin::text AS version, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS clock
  FROM (SELECT xmin, queue FROM {{schema}}.flow_queues WHERE queue = $7 AND $11::text IS NOT NULL FOR UPDATE) AS f
),
fresh AS MATERIALIZED (
  SELECT l.version IS NOT DISTINCT FROM $11::text AS ok,
         CASE WHEN l.version IS NOT NULL AND $12::boolean THEN greatest($1::bigint, l.clock) ELSE $1::bigint END AS now
  FROM (SELECT (SELECT version FROM locked) AS version, (SELECT clock FROM locked) AS clock) AS l
),
claimed AS (
  UPDATE {{schema}}.jobs AS j
  SET state = 'active',
      attempt = j.attempt + 1,
      lease_token = {{next_lease_token}},
      lease_expires_at = (SELECT now FROM fresh) + $3::bigint,
      worker_id = $4,
      worker_host = $5,
      worker_pid = $6,
      started_at = (SELECT now FROM fresh)
  WHERE j.id = ANY ($2::text[]) AND j.state IN ('waiting', 'scheduled') AND (SELECT ok FROM fresh)
    -- A pause committed after the read (which skips a paused queue) starts nothing either.
    AND NOT EXISTS (SELECT 1 FROM {{schema}}.queues AS q WHERE q.name = $7 AND q.paused)
  RETURNING {{job_columns}}
),
forgotten AS (
  -- One window at a time by a plain index scan (flow_forget, 0016); nothing unless the check held.
  SELECT f.bucket AS queue, f.n
  FROM {{schema}}.flow_forget(CASE WHEN (SELECT ok FROM fresh) THEN $13::text[] END, $14::bigint[]) AS f
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
  INSERT INTO {{schema}}.flow_starts (queue, at, n) SELECT bucket, (SELECT now FROM fresh), n FROM started
),
counted AS (
  INSERT INTO {{schema}}.flow_counts (bucket, n)
  SELECT bucket, sum(n)::int FROM (SELECT bucket, n FROM started UNION ALL SELECT queue, -n FROM forgotten) AS d
  GROUP BY bucket HAVING sum(n) <> 0
  ON CONFLICT (bucket) DO UPDATE SET n = {{schema}}.flow_counts.n + excluded.n
),
moved AS (
  UPDATE {{schema}}.flow_queues SET lane_cursor = coalesce($10::text, lane_cursor)
  WHERE queue = $7 AND EXISTS (SELECT 1 FROM claimed)
)
SELECT * FROM claimed
