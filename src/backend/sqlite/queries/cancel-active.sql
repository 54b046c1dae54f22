-- cancel-active: cancels a running job.
--
-- @id job id text    @now ms
--
-- The row outlives its lease even with retention 0, so the worker's next heartbeat can still
-- tell "cancelled" from "gone"; the lease token is kept so its late settle is refused.
UPDATE {{prefix}}jobs
SET state = 'cancelled', finished_at = @now, lease_expires_at = NULL,
    expires_at = max(@now + retain_completed_ms, lease_expires_at), {{append_history('cancelled', NULL)}}
WHERE id = @id
