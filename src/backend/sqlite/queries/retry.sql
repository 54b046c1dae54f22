-- retry: schedules a failed job's next attempt, fenced by its lease.
--
-- @id job id text    @token lease token integer    @now ms    @runAt ms    @error JSON text
--
-- Returns one value, the job's queue (to wake), when applied; no row when the lease is stale.
UPDATE {{prefix}}jobs
SET state = 'scheduled', run_at = @runAt, error = @error, lease_expires_at = NULL, stalls = 0,
    {{append_history('failed', json(@error))}}
WHERE id = @id AND lease_token = @token AND state = 'active'
RETURNING queue
