-- once: records an idempotency key for $3 ms unless it is already recorded and unexpired.
--
-- $1 now: bigint ms, NULL = the database clock    $2 key text    $3 ttl_ms bigint
--
-- Returns one row when the key was taken now (first time, or the previous record had expired),
-- none while it is held. One statement: concurrent callers with one key queue on its index
-- entry, and exactly one of them gets the row. An expired key is taken over in place rather than
-- waiting for prune, so a ttl means what it says.
INSERT INTO {{schema}}.idempotency_keys AS k (key, expires_at)
VALUES ($2, {{schema}}.now_ms($1) + $3::bigint)
ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at
  WHERE k.expires_at <= {{schema}}.now_ms($1)
RETURNING 1 AS taken
