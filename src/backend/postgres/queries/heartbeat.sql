-- heartbeat: extends every lease still held to now + $4, and explains the ones that were not.
--
-- $1 now: bigint ms, NULL = the database clock    $2 job ids text[]    $3 lease tokens bigint[]
-- $4 lease_ms bigint
--
-- Returns one row per lease that was NOT extended: (id, token, state, current_token), where
-- state and current_token are NULL when the job no longer exists. The caller turns that into a
-- reason: gone (no row), cancelled (cancelled under this very token), expired (anything else:
-- rescued, re-claimed, settled).
--
-- Touches only lease_expires_at, which no index covers, so each extension is a HOT update. The
-- leases not extended are found with EXCEPT (hashed or sorted, whatever the batch size) rather
-- than an anti-join the planner might run as a nested loop over a batch it guessed small.
--
-- The fence compares state with `(SELECT 'active'::text)`, not the literal, on purpose: a literal
-- lets the planner walk the partial index jobs_active and join the batch to it, and the generic
-- plan of this prepared statement (estimates from an ANALYZE that saw no active job: 1 row, and
-- 10 for the unnest) made that a nested loop of every active job times every batch entry. With
-- 500 jobs prefetched and a batch of 500 that took 0.9 s per statement, and processing fell to
-- 1,100 jobs/s once delayed jobs sat in the table (docs/performance-postgres.md). Hidden behind an
-- InitPlan the state cannot match that index, and each batch entry is one jobs_pkey probe.
WITH input AS (
  SELECT * FROM unnest($2::text[], $3::bigint[]) AS i(id, token)
),
extended AS (
  UPDATE {{schema}}.jobs AS j
  SET lease_expires_at = {{schema}}.now_ms($1) + $4::bigint
  FROM input i
  WHERE j.id = i.id AND j.lease_token = i.token AND j.state = (SELECT 'active'::text)
  RETURNING j.id, j.lease_token
),
not_extended AS (
  SELECT id, token FROM input
  EXCEPT
  SELECT id, lease_token FROM extended
)
SELECT n.id, n.token, j.state, j.lease_token AS current_token
FROM not_extended n
LEFT JOIN {{schema}}.jobs j ON j.id = n.id
