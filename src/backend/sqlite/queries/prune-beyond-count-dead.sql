-- prune-beyond-count-dead: deletes one queue's dead jobs beyond the newest N.
--
-- @queue text    @limit integer (most rows to delete)    @keep how many of the newest to keep
--
-- Changes one row per job deleted. Jobs kept forever (expires_at NULL) are never counted.
-- Plan: SEARCH COVERING INDEX conveyor_jobs_finished (queue=? AND state=?), newest first off the
-- index (finished_at, then seq); OFFSET skips the rows to keep. The state list repeats
-- jobs_finished's WHERE word for word (see prune-beyond-count-completed.sql).
DELETE FROM {{prefix}}jobs WHERE seq IN (
  SELECT seq FROM {{prefix}}jobs
  WHERE queue = @queue AND state IN ('completed', 'cancelled', 'dead') AND state = 'dead' AND expires_at IS NOT NULL
  ORDER BY finished_at DESC, seq DESC
  LIMIT @limit OFFSET @keep)
