-- release: hands a running job back to `waiting` without using an attempt (shutdown), fenced by
-- its lease.
--
-- @id job id text    @token lease token integer    @now ms
--
-- Returns one value, the job's queue (to wake), when applied; no row when the lease is stale.
-- The job keeps its run_at, so it goes back to the head of its queue.
UPDATE {{prefix}}jobs
SET state = 'waiting', attempt = attempt - 1, lease_expires_at = NULL, stalls = 0,
    {{append_history('released', NULL)}}
WHERE id = @id AND lease_token = @token AND state = 'active'
RETURNING queue
