-- complete-and-claim: complete.sql and claim.sql as ONE statement, so a worker that wants more
-- work settles its finished batch and takes the next one in one round trip and one commit.
--
-- Not a file of its own SQL: backend.ts builds it from complete.sql and claim.sql (so a change
-- to either, say a new claim filter, applies here too), filling the two placeholders below:
--   complete: complete.sql without its last line (the CTE list ending in `settled`)
--   claim:    claim.sql, its parameters after $1 moved up by three ($2 -> $5 ...)
--
-- $1 now: bigint ms, NULL = the database clock
-- $2..$4 complete.sql's $2..$4 (job ids, lease tokens, results)
-- $5..   claim.sql's $2.. (queues, names, limit, lease_ms, worker_id, worker_host, worker_pid)
--
-- Returns one row per completion applied (settled_id, settled_token; job NULL) and one per job
-- claimed (job: the claimed row as JSON, as claim.sql returns it; settled_* NULL).
--
-- One statement, one snapshot: the claim cannot see the completions, and does not need to (it
-- takes waiting and due rows, the completions change active ones). A claim that locks nothing
-- (an empty queue) costs the completion nothing. A claim nested in a CTE keeps its own WITH list:
-- none of its CTEs modifies data, which PostgreSQL allows only at the top level.
{{complete}},
claimed AS (
{{claim}}
)
SELECT s.id AS settled_id, s.lease_token AS settled_token, NULL::json AS job FROM settled s
UNION ALL
SELECT NULL, NULL, row_to_json(c) FROM claimed c
