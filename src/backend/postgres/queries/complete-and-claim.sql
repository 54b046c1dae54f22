-- complete-and-claim: complete.sql and claim.sql as ONE statement, so a worker that wants more
-- work settles its finished batch and takes the next one in one round trip and one commit.
--
-- Not a file of its own SQL: backend.ts builds it from complete.sql and claim.sql (so a change
-- to either, say a new claim filter, applies here too), filling the placeholders below:
--   complete:       complete.sql without its last line (the CTE list ending in `settled`)
--   claim:          claim.sql, its parameters after $1 moved up by three ($2 -> $5 ...)
--   claimed_nulls:  a NULL for each column claim.sql returns (counted in its RETURNING list)
--
-- $1 now: bigint ms, NULL = the database clock
-- $2..$4 complete.sql's $2..$4 (job ids, lease tokens, results)
-- $5..   claim.sql's $2.. (queues, names, limit, lease_ms, worker_id, worker_host, worker_pid)
--
-- Returns one row per job claimed (claim.sql's columns; settled_* NULL) and one more row with
-- every completion applied (settled_ids, settled_tokens: arrays, empty when none; claim.sql's
-- columns NULL).
-- The claimed rows go out as columns, as claim.sql's do: wrapped in row_to_json they cost the
-- server about 4 µs more per job (the function looks up every column's output category row by
-- row; docs/performance-postgres.md, "Session 28"). The completions go out as one row of two
-- arrays, not as a row each padded with claim.sql's thirty NULL columns.
--
-- One statement, one snapshot: the claim cannot see the completions, and does not need to (it
-- takes waiting and due rows, the completions change active ones). A claim that locks nothing
-- (an empty queue) costs the completion nothing. A claim nested in a CTE keeps its own WITH list:
-- none of its CTEs modifies data, which PostgreSQL allows only at the top level.
{{complete}},
claimed AS (
{{claim}}
)
SELECT NULL::text[] AS settled_ids, NULL::bigint[] AS settled_tokens, c.* FROM claimed c
UNION ALL
SELECT coalesce(array_agg(s.id), '{}'), coalesce(array_agg(s.lease_token), '{}'), {{claimed_nulls}} FROM settled s
