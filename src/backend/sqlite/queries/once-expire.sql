-- once-expire: forgets one idempotency key if its time is up, so once.sql can take it again.
--
-- ?1 key text    ?2 now ms
DELETE FROM {{prefix}}idempotency WHERE key = ? AND expires_at <= ?
