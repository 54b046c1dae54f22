-- prune-keys: deletes expired idempotency keys.
--
-- ?1 now ms    ?2 limit integer
--
-- Changes one row per key deleted.
DELETE FROM {{prefix}}idempotency WHERE key IN (SELECT key FROM {{prefix}}idempotency WHERE expires_at <= ? LIMIT ?)
