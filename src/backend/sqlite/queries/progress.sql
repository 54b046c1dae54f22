-- progress: records a running job's progress report, fenced by its lease.
--
-- ?1 progress JSON text    ?2 job id text    ?3 lease token integer
--
-- Changes one row when applied, none when the lease is stale.
UPDATE {{prefix}}jobs SET progress = ? WHERE id = ? AND lease_token = ? AND state = 'active'
