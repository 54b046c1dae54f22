-- flow-claim-ids: claims the jobs a laned queue's claim picked (flow.ts), under the queue's flow
-- row lock; each gets attempt + 1 and a new lease token, like claim.sql.
--
-- $1 now bigint ms    $2 ids text[]    $3 lease_ms bigint    $4 worker_id text    $5 worker_host text
-- $6 worker_pid int
--
-- Returns the claimed rows ({{job_columns}}) and each one's limiter key.
UPDATE {{schema}}.jobs AS j
SET state = 'active',
    attempt = j.attempt + 1,
    lease_token = j.lease_token + 1,
    lease_expires_at = $1::bigint + $3::bigint,
    worker_id = $4,
    worker_host = $5,
    worker_pid = $6,
    started_at = $1::bigint
WHERE j.id = ANY ($2::text[]) AND j.state IN ('waiting', 'scheduled')
RETURNING {{job_columns}}, j.limiter_key
