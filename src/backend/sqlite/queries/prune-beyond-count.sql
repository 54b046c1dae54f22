-- prune-beyond-count: deletes one queue's finished jobs beyond the newest N of one bucket.
--
-- ?1 queue text    ?2 bucket: 1 dead jobs, 0 completed and cancelled ones
-- ?3 limit integer (most rows to delete)    ?4 how many of the newest to keep
--
-- Changes one row per job deleted. Jobs kept forever (expires_at NULL) are never counted.
-- Plan: SEARCH conveyor_jobs USING INDEX conveyor_jobs_prunable (queue=? AND <expr>=?)
-- Walks one bucket newest first straight off the index; OFFSET skips the rows to keep.
DELETE FROM {{prefix}}jobs WHERE seq IN (
  SELECT seq FROM {{prefix}}jobs
  WHERE queue = ? AND (state = 'dead') = ? AND expires_at IS NOT NULL
  ORDER BY finished_at DESC, seq DESC
  LIMIT ? OFFSET ?)
