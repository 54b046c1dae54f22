-- mark-buffered: marks a claimed job as sitting in its worker's prefetch buffer (its lease
-- expiry then never counts as a stall), or as started, fenced by its lease.
--
-- ?1 buffered: 1 or 0    ?2 job id text    ?3 lease token integer
UPDATE {{prefix}}jobs SET excused_token = CASE WHEN ? THEN lease_token END
WHERE id = ? AND lease_token = ? AND state = 'active'
