-- prune-dedup: deletes ended dedup windows, at most $2 per call.
--
-- $1 now: bigint ms, NULL = the database clock    $2 limit int
--
-- Returns one row: (windows bigint), the rows deleted. A window row locked by a producer deciding
-- on it is skipped (it is about to be reopened or extended anyway).
WITH ended AS (
  SELECT queue, key FROM {{schema}}.dedup_windows
  WHERE expires_at <= {{schema}}.now_ms($1)
  ORDER BY expires_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED
),
deleted AS (
  DELETE FROM {{schema}}.dedup_windows d USING ended e
  WHERE d.queue = e.queue AND d.key = e.key AND d.expires_at <= {{schema}}.now_ms($1)
  RETURNING 1
)
SELECT count(*) AS windows FROM deleted
