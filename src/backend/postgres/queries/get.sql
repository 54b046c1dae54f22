-- get: one job by id.
--
-- $1 now: bigint ms, NULL = the database clock    $2 job id text
-- $3 queue text: only that queue's job; NULL = any queue
--
-- Returns the row ({{job_columns}}) plus observed_at, the store's now, against which a due
-- `scheduled` job is reported as `waiting`.
SELECT {{job_columns}}, {{schema}}.now_ms($1) AS observed_at
FROM {{schema}}.jobs AS j
WHERE j.id = $2 AND ($3::text IS NULL OR j.queue = $3)
