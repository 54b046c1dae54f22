-- log-dead-unretained: the "dead" event of a failed job kept for 0 ms, written while its row still
-- exists, just before bury-unretained.sql deletes it in the same transaction (the event triggers
-- fire on insert and update only).
--
-- @id job id text    @token lease token integer    @now ms    @error error JSON text
--
-- Inserts one row when the job is active under this lease and kept dead for 0 ms; none otherwise.
INSERT INTO {{prefix}}events (at, type, queue, name, job_id, attempt, data)
SELECT @now, 'dead', queue, name, id, attempt, json_object('error', json(@error)) FROM {{prefix}}jobs
WHERE id = @id AND lease_token = @token AND state = 'active' AND retain_dead_ms = 0
