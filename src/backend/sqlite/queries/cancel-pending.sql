-- cancel-pending: cancels a job that has not started (waiting, scheduled, waiting-children).
--
-- @id job id text    @now ms
UPDATE {{prefix}}jobs SET state = 'cancelled', finished_at = @now, expires_at = @now + retain_completed_ms
WHERE id = @id
