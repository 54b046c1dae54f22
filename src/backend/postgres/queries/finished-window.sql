-- finished-window: the jobs of one queue that completed or died in a time window (Backend.finishedWindow).
--
-- $1 queue text    $2 from bigint ms    $3 until bigint ms (exclusive)    $4 sample limit int
--
-- Returns one count row per state (n set, the times NULL), then up to $4 sample rows per state
-- (n NULL), earliest finished first. Every part is one range of jobs_finished (queue, state,
-- finished_at, seq; migration pg_settle_finished_index); the states are literals so the partial
-- index's predicate is provably met.
SELECT 'completed' AS state,
       (SELECT count(*) FROM {{schema}}.jobs
        WHERE queue = $1 AND state = 'completed' AND finished_at >= $2 AND finished_at < $3) AS n,
       NULL::bigint AS run_at, NULL::bigint AS started_at, NULL::bigint AS finished_at
UNION ALL
SELECT 'dead',
       (SELECT count(*) FROM {{schema}}.jobs
        WHERE queue = $1 AND state = 'dead' AND finished_at >= $2 AND finished_at < $3),
       NULL, NULL, NULL
UNION ALL
(SELECT 'completed', NULL, run_at, started_at, finished_at FROM {{schema}}.jobs
 WHERE queue = $1 AND state = 'completed' AND finished_at >= $2 AND finished_at < $3
 ORDER BY finished_at LIMIT $4)
UNION ALL
(SELECT 'dead', NULL, run_at, started_at, finished_at FROM {{schema}}.jobs
 WHERE queue = $1 AND state = 'dead' AND finished_at >= $2 AND finished_at < $3
 ORDER BY finished_at LIMIT $4)
