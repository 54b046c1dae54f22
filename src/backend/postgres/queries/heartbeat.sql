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
WITH input AS (
  SELECT * FROM unnest($2::text[], $3::bigint[]) AS i(id, token)
),
extended AS (
  UPDATE {{schema}}.jobs AS j
  SET lease_expires_at = {{schema}}.now_ms($1) + $4::bigint
  FROM input i
  WHERE j.id = i.id AND j.lease_token = i.token AND j.state = 'active'
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
