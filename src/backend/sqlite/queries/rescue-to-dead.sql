-- rescue-to-dead: dead-letters a job whose lease expired (out of attempts, or quarantined).
--
-- @seq the job's seq    @now ms    @error JSON text (the job's error: quarantine or lease expired)
-- @attemptError JSON text (the attempt's error in history)    @stall 1 when the expiry counts as a stall, else 0
UPDATE {{prefix}}jobs
SET state = 'dead', error = @error, finished_at = @now, lease_expires_at = NULL, stalls = stalls + @stall,
    expires_at = @now + retain_dead_ms, {{append_history('lease-expired', json(@attemptError))}}
WHERE seq = @seq
