-- bury: dead-letters a failed job, fenced by its lease.
--
-- @id job id text    @token lease token integer    @now ms    @error JSON text
--
-- Changes one row when applied, none when the lease is stale or the job is kept dead for 0 ms
-- (those are deleted by bury-unretained.sql instead). expires_at stays NULL for a job kept forever.
UPDATE {{prefix}}jobs
SET state = 'dead', error = @error, finished_at = @now, lease_expires_at = NULL, stalls = 0,
    expires_at = @now + retain_dead_ms, {{append_history('dead', json(@error))}}
WHERE id = @id AND lease_token = @token AND state = 'active' AND retain_dead_ms IS NOT 0
