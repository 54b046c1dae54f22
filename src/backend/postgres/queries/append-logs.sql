-- append-logs: appends lines to a running job's log, fenced by its lease, and drops the oldest
-- lines beyond the bound, in one statement.
--
-- $1 now: bigint ms, NULL = the database clock    $2 job id text    $3 lease token bigint
-- $4 lines text[] (already bounded by boundLogLines)
-- $5 int: how many of the job's existing lines to keep (the bound minus the new lines)
--
-- Returns one row when applied, none when the lease was stale. FOR SHARE makes a settle of the
-- job that commits meanwhile visible to the check (READ COMMITTED re-reads a locked row), so a
-- line never lands after its job left `active`. The trim sees the snapshot before the insert,
-- hence $5 counts only the lines that were already there.
WITH job AS (
  SELECT j.id, j.attempt FROM {{schema}}.jobs AS j
  WHERE j.id = $2 AND j.lease_token = $3 AND j.state = 'active'
  FOR SHARE
), added AS (
  INSERT INTO {{schema}}.job_logs (job_id, at, attempt, line)
  SELECT job.id, {{schema}}.now_ms($1), job.attempt, l.line
  FROM job, unnest($4::text[]) WITH ORDINALITY AS l(line, n)
  ORDER BY l.n
), trimmed AS (
  DELETE FROM {{schema}}.job_logs AS g
  WHERE g.job_id = (SELECT id FROM job)
    AND g.seq <= (SELECT o.seq FROM {{schema}}.job_logs AS o WHERE o.job_id = $2
                  ORDER BY o.seq DESC OFFSET $5 LIMIT 1)
)
SELECT 1 AS applied FROM job
