-- complete-unretained: completes a job kept for 0 ms by deleting it, fenced by its lease.
--
-- @id job id text    @token lease token integer    @now ms (unused; shared parameters of the fence)
--
-- Changes one row when applied; none when the lease is stale or the job is retained (complete.sql).
DELETE FROM {{prefix}}jobs WHERE id = @id AND lease_token = @token AND state = 'active' AND retain_completed_ms = 0
