-- log-dead-by-seq: the "dead" event of a rescued job deleted as it dies (kept dead for 0 ms),
-- written just before delete-by-seq.sql in the same transaction (the event triggers fire on
-- insert and update only).
--
-- @seq integer    @now ms    @error error JSON text
INSERT INTO {{prefix}}events (at, type, queue, name, job_id, attempt, data)
SELECT @now, 'dead', queue, name, id, attempt, json_object('error', json(@error)) FROM {{prefix}}jobs WHERE seq = @seq
