-- complete: marks a running job completed, fenced by its lease.
--
-- @id job id text    @token lease token integer    @now ms    @result JSON text
--
-- Changes one row when applied, none when the lease is stale or the job is kept for 0 ms (those
-- are deleted by complete-unretained.sql instead). `@now + retain_completed_ms` stays NULL for a
-- job kept forever (NULL + x is NULL). `error` is cleared: it means the last attempt's error, and
-- the last attempt succeeded.
--
-- The completed attempt is NOT appended to `history`: every field of its record (attempt, worker,
-- started_at, finished_at, outcome 'completed', no error) is in the row already, and the backend
-- adds it when it reads a completed row (jobRecordFromRow in ../job-rows.ts), as on PostgreSQL
-- and Redis. Rewriting the history's JSON per job was a share of the hottest write (docs/performance-sqlite.md).
UPDATE {{prefix}}jobs
SET state = 'completed', result = @result, error = NULL, finished_at = @now, lease_expires_at = NULL,
    stalls = 0, expires_at = @now + retain_completed_ms
WHERE id = @id AND lease_token = @token AND state = 'active' AND retain_completed_ms IS NOT 0
