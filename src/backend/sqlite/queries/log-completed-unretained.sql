-- log-completed-unretained: the "completed" event of a job kept for 0 ms, written (with the
-- details events_state in migration 0004 would give) while its row still exists, just before
-- complete-unretained.sql deletes it in the same transaction. The event triggers fire on insert
-- and update only, so a job deleted as it finishes would otherwise leave no event.
--
-- @id job id text    @token lease token integer    @now ms    @result result JSON text
--
-- Inserts one row when the job is active under this lease and kept for 0 ms; none otherwise.
INSERT INTO {{prefix}}events (at, type, queue, name, job_id, attempt, data)
SELECT @now, 'completed', queue, name, id, attempt, json_object('result', json(@result)) FROM {{prefix}}jobs
WHERE id = @id AND lease_token = @token AND state = 'active' AND retain_completed_ms = 0
