-- claim-candidates: the runnable head of one queue, in claim order.
--
-- ?1 queue text    ?2 now ms    ?3 job names, one JSON array text    ?4 limit integer
-- statements.ts also prepares it for a claim of one job name: `name = ?`, ?3 the name itself.
--
-- Returns (seq, priority, run_at) of at most ?4 due jobs of those names. Plan (SQLite 3.53):
--   SEARCH conveyor_jobs USING INDEX conveyor_jobs_claim (queue=?)
--   LIST SUBQUERY 1
--   SCAN json_each VIRTUAL TABLE INDEX 1:
--   CREATE BLOOM FILTER
-- No sort: the index range is already in (priority, run_at, seq) order, so the scan stops
-- after `limit` matches. Queues are read one at a time and merged in JS because a single
-- query over several queues would have to sort every due job of all of them.
-- `lane IS NULL` is jobs_claim's predicate (0011_sqlite_flow_unkeyed_claim), there so the planner
-- may use it: this reads queues without lanes only (a laned queue's claim is flow.ts'), whose
-- jobs all have lane NULL.
SELECT seq, priority, run_at FROM {{prefix}}jobs
WHERE queue = ? AND state IN ('waiting', 'scheduled') AND lane IS NULL AND run_at <= ?
  AND name IN (SELECT value FROM json_each(?))
ORDER BY priority, run_at, seq
LIMIT ?
