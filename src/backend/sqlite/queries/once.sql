-- once: records an idempotency key unless it is held (once-expire.sql runs first, in the same
-- transaction).
--
-- ?1 key text    ?2 expires_at ms
--
-- Changes one row when the key was taken now, none while it is held.
INSERT OR IGNORE INTO {{prefix}}idempotency (key, expires_at) VALUES (?, ?)
