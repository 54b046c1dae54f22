-- rescue-expired: running jobs whose lease expired, the longest expired first.
--
-- ?1 now ms    ?2 limit integer
--
-- Returns (seq, id, queue, name, attempt, max_attempts, stalls, worker_id, retain_dead_ms,
-- excused): excused is 1 when this lease's expiry must not count as a stall (the stall_blame
-- migration). Plan: SEARCH conveyor_jobs USING INDEX conveyor_jobs_lease (lease_expires_at<?)
SELECT seq, id, queue, name, attempt, max_attempts, stalls, worker_id, retain_dead_ms,
       excused_token IS lease_token AS excused
FROM {{prefix}}jobs
WHERE state = 'active' AND lease_expires_at <= ?
ORDER BY lease_expires_at
LIMIT ?
