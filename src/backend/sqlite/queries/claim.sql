-- claim: leases the chosen jobs to one worker.
--
-- ?1 lease_expires_at ms    ?2 worker id text    ?3 worker host text    ?4 worker pid integer
-- ?5 now ms (started_at)    ?6 the jobs' seq, one JSON array text
--
-- Returns every claimed row (all columns), in no particular order: the caller sorts them into
-- claim order. A job that is no longer waiting or scheduled is left out.
UPDATE {{prefix}}jobs
SET state = 'active', attempt = attempt + 1, lease_token = lease_token + 1, lease_expires_at = ?,
    worker_id = ?, worker_host = ?, worker_pid = ?, started_at = ?
WHERE seq IN (SELECT value FROM json_each(?)) AND state IN ('waiting', 'scheduled')
RETURNING *
