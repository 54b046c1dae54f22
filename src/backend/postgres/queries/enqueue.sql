-- enqueue: a whole batch in one INSERT; ids that already exist are skipped, not overwritten.
--
-- $1  now: bigint ms, NULL = the database clock
-- $2  id text[]          $3  queue text[]          $4  name text[]         $5  payload text[] (JSON)
-- $6  priority int[]     $7  run_at bigint[] (NULL = now + delay_ms)        $8  delay_ms bigint[]
-- $9  max_attempts int[] $10 backoff text[] (JSON) $11 timeout_ms bigint[]
-- $12 retain_completed_ms bigint[]                 $13 retain_dead_ms bigint[]
-- $14 meta text[] (JSON object, or NULL)           $15 the distinct queues of $3, text[]
-- $16 lane text[]        $17 group key text[]      $18 group concurrency int[]
-- $19 limiter key text[] $20 limiter max int[]     $21 limiter window bigint[]
--     (flow control, flow.ts jobFlowColumns: all six NULL when no job of the batch has a group or
--     a limiter key; NULL elements for the jobs without one)
-- Element i of $2..$14 and $16..$21 describes job i. The caller sends each id once (it settles repeats within
-- a batch itself: the first occurrence is the one stored).
--
-- Returns one row per id that already existed (id), or a single row with id NULL when none did:
-- a batch of 20,000 new jobs answers with one row, not 20,000.
--
-- Rows are inserted in array order (a function scan feeds the insert row by row), so seq, the
-- FIFO tie-breaker, follows the caller's order without sorting the batch.
--
-- A job with a group or limiter key is stored with its lane (migration 0005) in this INSERT, so it
-- never enters jobs_claim (lane IS NULL only, 0014), and its queue's flow row turns the lane path
-- on (`laned`, run only when $16 is given) in the same statement.
--
-- Wakes workers with one NOTIFY per queue that got a job it can run now. NOTIFY is delivered at
-- commit, so inside a caller's transaction ({ tx }) a rollback wakes nobody; PostgreSQL also
-- folds identical notifications of one transaction into one.
WITH clock AS MATERIALIZED (
  SELECT {{schema}}.now_ms($1) AS now
),
inserted AS (
  INSERT INTO {{schema}}.jobs AS j (id, queue, name, payload, meta, state, priority, run_at, created_at, max_attempts,
                                    backoff, timeout_ms, retain_completed_ms, retain_dead_ms,
                                    lane, group_key, group_concurrency, limiter_key, limiter_max, limiter_duration_ms)
  SELECT i.id, i.queue, i.name, i.payload::json, i.meta::json,
         CASE WHEN coalesce(i.run_at, c.now + i.delay_ms) > c.now THEN 'scheduled' ELSE 'waiting' END,
         i.priority, coalesce(i.run_at, c.now + i.delay_ms), c.now, i.max_attempts, i.backoff::json, i.timeout_ms,
         i.retain_completed_ms, i.retain_dead_ms,
         i.lane, i.group_key, i.group_concurrency, i.limiter_key, i.limiter_max, i.limiter_duration_ms
  FROM clock c,
       unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::int[], $7::bigint[], $8::bigint[],
              $9::int[], $10::text[], $11::bigint[], $12::bigint[], $13::bigint[], $14::text[],
              $16::text[], $17::text[], $18::int[], $19::text[], $20::int[], $21::bigint[])
         AS i(id, queue, name, payload, priority, run_at, delay_ms, max_attempts, backoff, timeout_ms,
              retain_completed_ms, retain_dead_ms, meta,
              lane, group_key, group_concurrency, limiter_key, limiter_max, limiter_duration_ms)
  ON CONFLICT (id) DO NOTHING
  RETURNING j.id, j.queue, j.state, j.lane
),
laned AS (
  -- Only a queue not laned yet: ON CONFLICT DO UPDATE would lock the row even when its WHERE
  -- keeps it, and every claim of the queue locks that row (flow-lock.sql).
  INSERT INTO {{schema}}.flow_queues (queue, lanes)
  SELECT DISTINCT i.queue, true FROM inserted AS i
  WHERE $16::text[] IS NOT NULL AND i.lane IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM {{schema}}.flow_queues AS f WHERE f.queue = i.queue AND f.lanes)
  ON CONFLICT (queue) DO UPDATE SET lanes = true WHERE NOT {{schema}}.flow_queues.lanes
),
known_queues AS (
  INSERT INTO {{schema}}.queues (name)
  SELECT name FROM unnest($15::text[]) AS q(name)
  ON CONFLICT (name) DO NOTHING
),
woken AS (
  SELECT count(pg_notify({{channel}}, queue)) AS n
  FROM (SELECT queue FROM inserted WHERE state = 'waiting' GROUP BY queue) AS q
),
existing AS (
  -- Only looked for when fewer rows went in than were sent (the common case skips it), with
  -- EXCEPT: hashed or sorted, never a nested loop over a batch the planner guessed small.
  SELECT given.id FROM unnest($2::text[]) AS given(id)
  WHERE (SELECT count(*) FROM inserted) < cardinality($2::text[])
  EXCEPT
  SELECT id FROM inserted
)
-- Scanning `woken` first makes sure its NOTIFYs are sent even when no id existed.
SELECT existing.id FROM woken LEFT JOIN existing ON true
