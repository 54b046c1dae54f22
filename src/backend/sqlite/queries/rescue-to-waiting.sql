-- rescue-to-waiting: puts a job whose lease expired back to `waiting`, due now.
--
-- @seq the job's seq    @now ms    @error JSON text (the lease-expired error)
-- @stall 1 when the expiry counts as a stall, else 0
UPDATE {{prefix}}jobs
SET state = 'waiting', run_at = @now, error = @error, lease_expires_at = NULL, stalls = stalls + @stall,
    {{append_history('lease-expired', json(@error))}}
WHERE seq = @seq
