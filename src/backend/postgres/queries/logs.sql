-- logs: a job's log lines, oldest first.
--
-- $1 job id text    $2 queue text: only when the job is that queue's; NULL = any queue
SELECT g.at, g.attempt, g.line
FROM {{schema}}.job_logs AS g
JOIN {{schema}}.jobs AS j ON j.id = g.job_id
WHERE g.job_id = $1 AND ($2::text IS NULL OR j.queue = $2)
ORDER BY g.seq
