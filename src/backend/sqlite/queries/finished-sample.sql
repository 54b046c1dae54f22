-- finished-sample: the times of the earliest jobs of one queue that finished in one state
-- within a time window.
--
-- ?1 queue text    ?2 from ms (inclusive)    ?3 until ms (exclusive)    ?4 limit integer
-- The state placeholder: completed or dead, filled by list.ts (one statement per state)
--
-- Returns (run_at, started_at, finished_at), by finished_at. The WHERE repeats the partial
-- index's term word for word (finished-count.sql).
SELECT run_at, started_at, finished_at FROM {{prefix}}jobs
WHERE queue = ? AND state IN ('completed', 'cancelled', 'dead') AND state = '{{state}}' AND finished_at >= ? AND finished_at < ?
ORDER BY finished_at LIMIT ?
