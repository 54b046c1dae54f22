-- claim: moves up to $4 runnable jobs to `active` under a fresh lease, in one statement.
--
-- $1 now: bigint ms, NULL = the database clock    $2 queues text[]    $3 names text[]
-- $4 limit int    $5 lease_ms bigint    $6 worker_id text    $7 worker_host text    $8 worker_pid int
-- $9 flow_checked boolean: false skips every queue with flow limits (0003_flow_control); the
--    flow path (flow.ts) passes true for one such queue after sizing the claim under its lock
-- $10 starts_at_once int: the jobs after the first $10 in claim order are marked buffered
--    (ClaimRequest.startsAtOnce); NULL marks none
-- $11 first_queue text, $12 last_queue text: the first and the last of $2 in byte order (COLLATE
--    "C"), computed once per queue list by the caller (named-range.ts), not per claim
--
-- Returns the claimed rows ({{job_columns}}, marked_buffered) in no particular order; the caller
-- sorts them.
--
-- A claim that names one queue (a worker of one queue, the flow path) runs claim-one.sql instead:
-- this statement with the search of the named queues below replaced by one walk of that queue.
--
-- Runnable = waiting, or scheduled and due; queue not paused; name among $3. Order: priority,
-- then run_at, then seq (insertion order). Per named queue that holds waiting jobs (found by
-- the loose scan below), one walk of jobs_claim that stops after $4 rows (already in claim
-- order): with one such queue that walk locks what it takes; with several, the walks only look
-- and the best $4 of them are locked by id (`peek`, `won`: fourth pass, docs/performance-growth.md).
-- For all named queues together, one walk of jobs_scheduled over the due part of the
-- scheduled rows (future jobs are never read), sorted, $4 kept. FOR UPDATE SKIP LOCKED makes
-- concurrent claimers step over each other's rows instead of queueing behind them; rows locked
-- here but not among the best $4 are unlocked when the statement commits. The two walks are
-- separate MATERIALIZED CTEs because PostgreSQL allows no FOR UPDATE under a UNION, and
-- MATERIALIZED guarantees each runs exactly once (a LIMIT ... SKIP LOCKED subquery the planner
-- re-ran could lock a different set the second time).
--
-- (A claim naming only 'q' runs claim-one.sql now; the plan below is claim.sql's as it was then.)
-- EXPLAIN (ANALYZE) of the generic plan before the loose scan and the single due walk (third
-- pass, docs/performance-postgres.md; the waiting walk is unchanged), PostgreSQL 15; 100k waiting and 1k future jobs in
-- queue 'q', 1k waiting in another queue; claim of 10 from 'q' (sorts, hashes and the
-- open_queues anti-join on `queues` trimmed):
--   Update on jobs j (actual rows=10)
--     CTE waiting
--       ->  Nested Loop (actual rows=10)
--             ->  CTE Scan on open_queues q_1 (actual rows=1)
--             ->  Limit (actual rows=10)
--                   ->  LockRows (actual rows=10)
--                         ->  Index Scan using jobs_claim on jobs (actual rows=10)
--                               Index Cond: (queue = q_1.name)
--                               Filter: ((state = 'waiting') AND (name = ANY (params_1.names)))
--     CTE due
--       ->  Nested Loop (actual rows=0)
--             ->  Limit -> LockRows -> Sort (actual rows=0)
--                   ->  Index Scan using jobs_scheduled on jobs jobs_1 (actual rows=0)
--                         Index Cond: (run_at <= params_2.now)
--                         Filter: ((queue = q_2.name) AND (state = 'scheduled') AND (name = ANY (params_2.names)))
--     InitPlan 6 (returns $16)
--       ->  Limit (actual rows=10) -> Sort -> Append (CTE Scan on waiting, CTE Scan on due)
--     ->  Index Scan using jobs_pkey on jobs j (actual rows=10)
--           Index Cond: (id = ANY ($16))
--   Execution Time: 0.465 ms
-- Ten index entries read for ten jobs claimed, whatever the backlog; the 1k future jobs are
-- never touched.
WITH RECURSIVE params AS MATERIALIZED (
  -- Every parameter the planner would otherwise look into, read through this one-row CTE. With
  -- their values hidden, a custom plan is estimated exactly like the generic one, so after five
  -- executions PostgreSQL keeps the generic plan of this prepared statement instead of planning
  -- every claim afresh (planning it costs more than running it). Hidden or not, the plan is the
  -- same: index walks that stop after `lim` rows.
  SELECT $2::text[] AS queues, $3::text[] AS names, $4::int AS lim, {{schema}}.now_ms($1) AS now,
         $9::boolean AS flow_checked, $10::int AS starts_at_once,
         $11::text COLLATE "C" AS first_queue, $12::text COLLATE "C" AS last_queue
),
-- ── the named queues' waiting jobs: from here to the line "end of the named queues' waiting
-- jobs", claim-one.sql takes this part's place for a claim that names one queue ──
-- The named queues that hold waiting jobs, found without one probe per named queue: a loose
-- index scan of the waiting rows' queues (jobs_waiting_seq or jobs_claim, whichever the planner
-- picks; one descent per distinct queue with waiting jobs, from the first
-- named queue to the last) gives them directly when it finds at most 32 such queues (and no
-- more than there are names). When it finds more, every named queue is probed, as before: the
-- scan stops after 33 descents, so that case pays about 33 descents more than probing alone. So a
-- worker naming 1,000 queues of which 999 are empty pays two or three descents, not 1,000 probes
-- (docs/performance-postgres.md, "Third pass"); one naming 1,000 busy queues pays the probes.
-- Nothing here reads all of $2 when the scan finds few queues (fifth pass, docs/performance-growth.md):
-- the range comes in $11/$12, a found queue is looked up in $2 (at most 32 lookups), and `named`
-- (every name, de-duplicated) is read only when every named queue is probed.
named AS MATERIALIZED (
  SELECT DISTINCT q.name FROM params, unnest(params.queues) AS q(name)
),
waiting_queues AS (
  -- Recursive: the statement starts WITH RECURSIVE (which the non-recursive CTEs ignore).
  SELECT (SELECT min(j.queue) FROM {{schema}}.jobs j WHERE j.state = 'waiting' AND j.queue >= (SELECT first_queue FROM params)) AS queue
  UNION ALL
  SELECT (SELECT min(j.queue) FROM {{schema}}.jobs j WHERE j.state = 'waiting' AND j.queue > w.queue)
  FROM waiting_queues w, params p
  WHERE w.queue < p.last_queue
),
scanned AS MATERIALIZED (
  SELECT w.queue FROM waiting_queues w, params p WHERE w.queue IS NOT NULL AND w.queue <= p.last_queue
  LIMIT (SELECT least(cardinality(queues), 32) + 1 FROM params)
),
-- Paused queues are left out here, per branch: the few queues the scan found are looked up by
-- primary key (as an anti-join the planner read the whole queues table, one row per queue ever
-- used, on every claim); when every named queue is probed, the anti-join reads it once.
candidate_queues AS (
  SELECT s.queue AS name FROM scanned s, params p
  WHERE (SELECT count(*) FROM scanned) <= (SELECT least(cardinality(queues), 32) FROM params)
    AND s.queue = ANY (p.queues)
    AND (SELECT q.paused FROM {{schema}}.queues q WHERE q.name = s.queue) IS NOT TRUE
  UNION ALL
  SELECT name FROM named
  WHERE (SELECT count(*) FROM scanned) > (SELECT least(cardinality(queues), 32) FROM params)
    AND NOT EXISTS (SELECT 1 FROM {{schema}}.queues q WHERE q.name = named.name AND q.paused)
),
open_queues AS MATERIALIZED (
  SELECT q.name
  FROM params, candidate_queues q
  -- Flow control: a queue with limits is claimed only under its flow row's lock (flow.ts).
  WHERE (params.flow_checked OR NOT EXISTS (SELECT 1 FROM {{schema}}.flow_queues f WHERE f.queue = q.name))
),
open_count AS MATERIALIZED (
  SELECT count(*) AS n FROM open_queues
),
-- Several open queues: look before locking. Each queue's best `lim` waiting jobs are read
-- without locks, the best `lim` of them all are the winners, and only the winners are locked
-- (`won`). Locking every queue's best `lim` and keeping `lim` locked 5,000 rows for a claim of 5
-- over 1,000 queues of 5 jobs: a write (and a WAL record) per locked row. When another claimer
-- holds a winner (or took it meanwhile), `won` comes up short and the claim falls back to the
-- locking walk of every open queue (`walked`), so the merged order holds under contention too.
-- One open queue (the common case among several named: the others are empty or paused) skips
-- the look: its walk locks exactly what it takes. claim-one.sql's `waiting` is this walk for a
-- claim that names one queue; a change to the walk's filter or order belongs in both.
-- `lane IS NULL` is jobs_claim's predicate (migration flow_unkeyed_claim): every job of a queue this statement reads has
-- no lane (keyed jobs live in laned queues, which take the lane path), so it only lets the
-- planner use the index.
peek AS MATERIALIZED (
  SELECT c.id, c.priority, c.run_at, c.seq
  FROM params, open_queues q
  CROSS JOIN LATERAL (
    SELECT id, priority, run_at, seq FROM {{schema}}.jobs
    WHERE queue = q.name AND state = 'waiting' AND lane IS NULL AND name = ANY(params.names)
    ORDER BY priority, run_at, seq
    LIMIT params.lim
  ) AS c
  WHERE (SELECT n FROM open_count) > 1
),
winners AS MATERIALIZED (
  SELECT id FROM peek ORDER BY priority, run_at, seq LIMIT (SELECT lim FROM params)
),
won AS MATERIALIZED (
  -- FOR UPDATE re-reads a row changed since the look; one no longer waiting drops out.
  -- The state is compared behind an InitPlan, not as a literal: with the literal the planner
  -- ANDed a bitmap of the whole jobs_waiting_seq index (every waiting job of every queue) with
  -- the winners' ids, on every claim, even a one-queue claim with no winners (this CTE runs
  -- for `waiting` below either way). The ids alone are a few jobs_pkey probes.
  SELECT id, priority, run_at, seq FROM {{schema}}.jobs
  WHERE id = ANY (ARRAY(SELECT id FROM winners)) AND state = (SELECT 'waiting'::text)
  FOR UPDATE SKIP LOCKED
),
walked AS MATERIALIZED (
  SELECT c.id, c.priority, c.run_at, c.seq
  FROM params, open_queues q
  CROSS JOIN LATERAL (
    SELECT id, priority, run_at, seq FROM {{schema}}.jobs
    WHERE queue = q.name AND state = 'waiting' AND lane IS NULL AND name = ANY(params.names)
    ORDER BY priority, run_at, seq
    LIMIT params.lim
    FOR UPDATE SKIP LOCKED
  ) AS c
  WHERE (SELECT n FROM open_count) = 1 OR (SELECT count(*) FROM won) < (SELECT count(*) FROM winners)
),
-- A fallback walk re-takes the winners it locked already (its own locks do not skip), so a
-- winner can be in both: `won` adds only the ones `walked` lacks. Not UNION: that sorted or hashed
-- every walked row (0.7 ms of a claim of 510, docs/performance-postgres.md "Fifth pass"), while
-- this anti-join costs nothing when `won` is empty (one open queue) and one
-- probe per winner otherwise.
waiting AS (
  SELECT * FROM walked
  UNION ALL
  SELECT * FROM won WHERE NOT EXISTS (SELECT 1 FROM walked w WHERE w.id = won.id)
),
-- ── end of the named queues' waiting jobs ──
-- Due scheduled jobs of every named queue in one walk of jobs_scheduled (its due part: future
-- jobs are never read), not one walk per named queue.
--
-- The parameters are scalar subqueries here, not a join with params: joined, `run_at <= now`
-- became a join filter above a sequential scan of every scheduled row (190-290 ms at 200k delayed
-- jobs, 1,039 jobs/s; docs/performance-growth.md). As a subquery it is an index condition, but a
-- lone `run_at <= <unknown>` is estimated at a third of the rows, which still tips the plan to a
-- bitmap or sequential scan as the delayed set grows. The always-true lower bound makes the pair
-- a range, which PostgreSQL estimates at 0.5% of the rows when a bound is unknown
-- (DEFAULT_RANGE_INEQ_SEL): an index range scan (plain or bitmap) at any size. Due rows are few in practice
-- (promoteDue relabels them), so that estimate is the realistic one, not just the useful one.
due AS MATERIALIZED (
  SELECT id, priority, run_at, seq FROM {{schema}}.jobs
  WHERE state = 'scheduled'
    AND run_at <= (SELECT now FROM params) AND run_at >= -9223372036854775808
    AND queue = ANY((SELECT queues FROM params)::text[]) AND name = ANY((SELECT names FROM params)::text[])
    AND NOT EXISTS (SELECT 1 FROM {{schema}}.queues p WHERE p.name = jobs.queue AND p.paused)
    AND ((SELECT flow_checked FROM params) OR NOT EXISTS (SELECT 1 FROM {{schema}}.flow_queues f WHERE f.queue = jobs.queue))
  ORDER BY priority, run_at, seq
  LIMIT (SELECT lim FROM params)
  FOR UPDATE OF jobs SKIP LOCKED
),
-- The first claimed job the worker does not start at once (ClaimRequest.startsAtOnce): it and
-- every job after it in claim order are recorded as buffered (excused_token = the new lease
-- token, what mark-buffered.sql writes), in this UPDATE's row versions rather than in a second
-- statement's. The row at that offset of all candidates is the one at that offset of the jobs
-- claimed, or past them (then none is marked). No row (starts_at_once NULL): none is marked.
first_buffered AS MATERIALIZED (
  SELECT c.priority, c.run_at, c.seq
  FROM (SELECT * FROM waiting UNION ALL SELECT * FROM due) AS c
  WHERE (SELECT starts_at_once FROM params) IS NOT NULL
  ORDER BY c.priority, c.run_at, c.seq
  OFFSET (SELECT starts_at_once FROM params) LIMIT 1
)
UPDATE {{schema}}.jobs AS j
SET state = 'active',
    attempt = j.attempt + 1,
    lease_token = {{next_lease_token}},
    -- "now" from params, once per statement rather than twice per row.
    lease_expires_at = (SELECT now FROM params) + $5::bigint,
    worker_id = $6,
    worker_host = $7,
    worker_pid = $8,
    started_at = (SELECT now FROM params),
    excused_token = CASE WHEN (j.priority, j.run_at, j.seq) >= (SELECT f.priority, f.run_at, f.seq FROM first_buffered f)
                         THEN {{next_lease_token}} ELSE j.excused_token END
WHERE j.id = ANY (ARRAY(
  SELECT c.id FROM (SELECT * FROM waiting UNION ALL SELECT * FROM due) AS c
  ORDER BY c.priority, c.run_at, c.seq
  LIMIT (SELECT lim FROM params)
))
RETURNING {{job_columns}}, j.excused_token IS NOT DISTINCT FROM j.lease_token AS marked_buffered
