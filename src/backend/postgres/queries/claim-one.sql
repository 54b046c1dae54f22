-- claim-one: claim.sql for a claim that names one queue ($2 holds one name, and $11 = $12 = it).
--
-- Not a file of its own SQL: backend.ts builds it from claim.sql (so a change there, say a new
-- column set by the claim, applies here too), filling the placeholders below:
--   claim_head: claim.sql up to the line "the named queues' waiting jobs" (its params CTE)
--   claim_tail: claim.sql from the line "end of the named queues' waiting jobs" (the due walk,
--               the buffered mark, the UPDATE and its RETURNING list)
-- Parameters and result: claim.sql's.
--
-- Why: claim.sql's search of the named queues (the loose scan, the look before locking across
-- queues, the fallback walk) makes its generic plan 111 nodes against this one's 42, and
-- PostgreSQL starts and ends every node of a plan on every execution, run or not. For one queue
-- none of that search is needed: a claim of one job ran 0.23 ms of server time through claim.sql
-- and 0.13 ms through this (jobs' user triggers off; 0.38 against 0.23 ms with them:
-- bench/pg-one-job.ts), and the claim's round trip, as a worker waiting for its next job sees
-- it, went from 0.68-0.82 ms to 0.54-0.62 (docs/performance-postgres.md, "Session 32"). Claims
-- of hundreds of jobs save the same 0.1-0.15 ms per statement, which is little per job.
{{claim_head}}
-- The named queue, unless paused or (flow_checked false) under flow limits: claim.sql's
-- candidate_queues and open_queues for one queue.
open_queues AS MATERIALIZED (
  SELECT p.first_queue AS name FROM params p
  WHERE (SELECT q.paused FROM {{schema}}.queues q WHERE q.name = p.first_queue) IS NOT TRUE
    AND (p.flow_checked OR NOT EXISTS (SELECT 1 FROM {{schema}}.flow_queues f WHERE f.queue = p.first_queue))
),
-- Its best `lim` waiting jobs, locked as they are walked: claim.sql's `walked` for one open
-- queue (`lane IS NULL`: jobs_claim's predicate, see there); a change to that walk's filter or
-- order belongs here too (postgres-claim-one.test.ts holds the two statements to the same jobs).
-- No open queue: a NULL queue, no row.
waiting AS MATERIALIZED (
  SELECT id, priority, run_at, seq FROM {{schema}}.jobs
  WHERE queue = (SELECT name FROM open_queues) AND state = 'waiting' AND lane IS NULL
    AND name = ANY ((SELECT names FROM params)::text[])
  ORDER BY priority, run_at, seq
  LIMIT (SELECT lim FROM params)
  FOR UPDATE SKIP LOCKED
),
{{claim_tail}}
