-- finished-count: how many jobs of one queue finished in one state within a time window.
--
-- ?1 queue text    ?2 from ms (inclusive)    ?3 until ms (exclusive)
-- The state placeholder: completed or dead, filled by list.ts (one statement per state)
--
-- Returns one row (n). One range of jobs_finished (queue, state, finished_at), the count from
-- the index alone: SQLite uses a partial index only when the query repeats its WHERE term
-- (state IN ('completed', 'cancelled', 'dead')) word for word.
SELECT count(*) AS n FROM {{prefix}}jobs
WHERE queue = ? AND state IN ('completed', 'cancelled', 'dead') AND state = '{{state}}' AND finished_at >= ? AND finished_at < ?
