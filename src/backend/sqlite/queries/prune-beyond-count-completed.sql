-- prune-beyond-count-completed: deletes one queue's completed and cancelled jobs beyond the
-- newest N of the two together.
--
-- @queue text    @limit integer (most rows to delete)    @keep how many of the newest to keep
--
-- Changes one row per job deleted. Jobs kept forever (expires_at NULL) are never counted.
-- Plan: two SEARCHes of COVERING INDEX conveyor_jobs_finished (queue=? AND state=?), merged in
-- order (MERGE (UNION ALL)): each state's range comes newest first off the index (finished_at,
-- then seq), OFFSET skips the rows to keep; no sort of the queue's finished jobs. The state list
-- repeats jobs_finished's WHERE word for word, without which SQLite does not use a partial index.
DELETE FROM {{prefix}}jobs WHERE seq IN (
  SELECT seq FROM (
    SELECT finished_at, seq FROM {{prefix}}jobs
    WHERE queue = @queue AND state IN ('completed', 'cancelled', 'dead') AND state = 'completed' AND expires_at IS NOT NULL
    UNION ALL
    SELECT finished_at, seq FROM {{prefix}}jobs
    WHERE queue = @queue AND state IN ('completed', 'cancelled', 'dead') AND state = 'cancelled' AND expires_at IS NOT NULL
    ORDER BY finished_at DESC, seq DESC
  )
  LIMIT @limit OFFSET @keep)
