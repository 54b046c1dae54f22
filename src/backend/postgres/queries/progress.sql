-- progress: stores the latest progress report of a running job, fenced by its lease.
--
-- $1 job id text    $2 lease token bigint    $3 progress text (JSON)
--
-- Returns one row when applied, none when the lease was stale. `progress` is in no index, so
-- this is a HOT update.
UPDATE {{schema}}.jobs
SET progress = $3::json
WHERE id = $1 AND lease_token = $2 AND state = 'active'
RETURNING 1 AS applied
