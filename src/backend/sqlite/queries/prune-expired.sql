-- prune-expired: deletes finished jobs whose retention ran out.
--
-- ?1 now ms    ?2 limit integer
--
-- Changes one row per job deleted. Plan: SEARCH conveyor_jobs USING COVERING INDEX
-- conveyor_jobs_expires (expires_at<?)
DELETE FROM {{prefix}}jobs WHERE seq IN (SELECT seq FROM {{prefix}}jobs WHERE expires_at <= ? LIMIT ?)
