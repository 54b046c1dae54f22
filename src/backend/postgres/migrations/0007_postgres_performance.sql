-- 0007_postgres_performance: the event log written once per statement instead of once per row,
-- and per-(queue, state) job counts kept beside the jobs for stats().
--
-- 0004's row-level trigger ran a PL/pgSQL function and one single-row INSERT for every job a
-- statement touched: a claim or a completion of 500 jobs made 500 function calls and 500 INSERT
-- executions into `events`. Measured with no-op jobs (20,000 jobs, one worker at concurrency 10,
-- 500 per fetch), it cost PostgreSQL about a quarter of its processing rate; see
-- docs/performance-postgres.md ("The event log") and `npm run bench -- --backend postgres
-- --event-log-cost`.
--
-- Here two statement-level triggers read the statement's transition tables (every row it
-- inserted, or every row it updated before and after) and write all of that statement's events
-- with one INSERT … SELECT. The events are the same, row for row, as 0004's trigger wrote: same
-- types, times, attempts and details, in the same transaction as the change, so the (xid, seq)
-- order and the readers' rule (read-events.sql: only transactions older than every running one)
-- are untouched. Within one statement the events of different jobs follow the order the
-- statement's rows come out of the join below (0004's followed the executor's row order; neither
-- is a contract: each job changes at most once per statement).
--
-- PostgreSQL allows a transition table only on a trigger for one event and without a column list,
-- so there are two triggers, and the UPDATE one fires for every UPDATE of `jobs` (heartbeats too,
-- which change neither state nor progress and so write no event: the WHERE below drops them).
-- A statement that touches no row fires it with empty tables: one cheap INSERT of nothing.
--
-- Nested statements (a flow trigger updating the parent inside a child's completion) fire these
-- at their own end, before the outer statement's: a released parent's event precedes its last
-- child's completion event, as it did with 0004's trigger (which ran after flow_child_settled,
-- in trigger-name order).

DROP TRIGGER jobs_events ON {{schema}}.jobs;
DROP FUNCTION {{schema}}.record_job_event();

CREATE FUNCTION {{schema}}.record_added_events() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {{schema}}.events (at, type, queue, name, job_id, attempt, data)
  SELECT n.created_at, 'added', n.queue, n.name, n.id, n.attempt,
         json_build_object('state', n.state, 'runAt', n.run_at, 'priority', n.priority)
  FROM added_jobs AS n;
  RETURN NULL;
END $$;

CREATE TRIGGER jobs_events_added AFTER INSERT ON {{schema}}.jobs
  REFERENCING NEW TABLE AS added_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.record_added_events();

-- The event of one updated row, as 0004 decided it: a state change names the new state (or,
-- leaving 'active' for a runnable state, what the attempt's history record says happened; leaving
-- 'dead', a replay); otherwise a changed progress of an active job is a 'progress' event;
-- anything else (a heartbeat, a progress report repeating the last one) is no event.
--
-- SET enable_nestloop = off: PL/pgSQL plans the join below once per session and keeps the plan,
-- estimated from the transition tables of that first call. A session whose first UPDATE touched
-- one row kept a nested loop, and a later claim of 1,000 jobs then compared 1,000 × 1,000 rows:
-- 450-500 ms inside the trigger, against 12-40 ms with the hash join this setting leaves
-- (measured at load 21; docs/performance-postgres.md). The setting holds only while this
-- function runs.
CREATE FUNCTION {{schema}}.record_changed_events() RETURNS trigger
  LANGUAGE plpgsql
  SET enable_nestloop = off
  AS $$
BEGIN
  INSERT INTO {{schema}}.events (at, type, queue, name, job_id, attempt, data)
  SELECT CASE WHEN e.type = 'progress' THEN {{schema}}.now_ms(NULL)
              ELSE coalesce(
                CASE WHEN n.state = 'active' THEN n.started_at
                     WHEN n.state IN ('completed', 'dead', 'cancelled') THEN n.finished_at
                     WHEN o.state = 'active' THEN (n.history -> -1 ->> 'finishedAt')::bigint END,
                {{schema}}.now_ms(NULL)) END,
         e.type, n.queue, n.name, n.id, n.attempt,
         CASE e.type
           WHEN 'active' THEN json_build_object('workerId', n.worker_id)
           WHEN 'completed' THEN json_build_object('result', n.result)
           WHEN 'retrying' THEN json_build_object('error', n.error, 'runAt', n.run_at)
           WHEN 'dead' THEN json_build_object('error', n.error)
           WHEN 'cancelled' THEN json_build_object('previousState', o.state)
           WHEN 'progress' THEN json_build_object('progress', n.progress)
           ELSE NULL END
  FROM changed_after AS n
  JOIN changed_before AS o ON o.id = n.id
  CROSS JOIN LATERAL (
    SELECT CASE
      WHEN n.state IS DISTINCT FROM o.state THEN CASE
        WHEN n.state IN ('active', 'completed', 'dead', 'cancelled') THEN n.state
        WHEN o.state = 'active' THEN CASE n.history -> -1 ->> 'outcome'
                                       WHEN 'failed' THEN 'retrying' WHEN 'released' THEN 'released' ELSE 'stalled' END
        WHEN o.state = 'dead' THEN 'replayed'
        ELSE 'waiting' END
      WHEN n.state = 'active' AND n.progress IS NOT NULL AND n.progress::text IS DISTINCT FROM o.progress::text
        THEN 'progress'
      END AS type
  ) AS e
  WHERE e.type IS NOT NULL;
  RETURN NULL;
END $$;

CREATE TRIGGER jobs_events_changed AFTER UPDATE ON {{schema}}.jobs
  REFERENCING OLD TABLE AS changed_before NEW TABLE AS changed_after
  FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.record_changed_events();

-- Jobs per (queue, state), for stats(): before this it counted every row of the table (a
-- sequential scan, 0.3 s at a million jobs), now it sums this table. Maintained by the three
-- statement-level triggers below as append-only deltas, one row per (queue, state) a statement
-- changed (a claim of 500 adds two: waiting -500, active +500), in the transaction of the change,
-- so in any snapshot the sums are exactly the counts of the jobs visible in it. Append-only on
-- purpose: a single counter row per (queue, state) updated by every claim and completion would
-- queue concurrent workers on its row lock until each commit. prune.sql folds the deltas back
-- into one row per (queue, state) (a DELETE … RETURNING re-inserted as sums in one statement, so
-- concurrent folds and writers never lose a delta), which keeps the table a few rows per queue.
-- TRUNCATE of jobs does not fire these: truncate this table with it.
CREATE TABLE {{schema}}.job_counts (
  queue text   COLLATE "C" NOT NULL,
  state text   NOT NULL,
  n     bigint NOT NULL
) WITH (
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_insert_scale_factor = 0,
  autovacuum_vacuum_insert_threshold = 1000
);

CREATE FUNCTION {{schema}}.count_added_jobs() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {{schema}}.job_counts (queue, state, n)
  SELECT queue, state, count(*) FROM added_jobs GROUP BY queue, state;
  RETURN NULL;
END $$;

CREATE FUNCTION {{schema}}.count_changed_jobs() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  -- Rows whose state (and queue) did not change cancel out: a heartbeat adds nothing.
  INSERT INTO {{schema}}.job_counts (queue, state, n)
  SELECT queue, state, sum(n)
  FROM (SELECT queue, state, -1 AS n FROM changed_before
        UNION ALL
        SELECT queue, state, 1 FROM changed_after) AS d
  GROUP BY queue, state
  HAVING sum(n) <> 0;
  RETURN NULL;
END $$;

CREATE FUNCTION {{schema}}.count_removed_jobs() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {{schema}}.job_counts (queue, state, n)
  SELECT queue, state, -count(*) FROM removed_jobs GROUP BY queue, state;
  RETURN NULL;
END $$;

CREATE TRIGGER jobs_counts_added AFTER INSERT ON {{schema}}.jobs
  REFERENCING NEW TABLE AS added_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.count_added_jobs();
CREATE TRIGGER jobs_counts_changed AFTER UPDATE ON {{schema}}.jobs
  REFERENCING OLD TABLE AS changed_before NEW TABLE AS changed_after
  FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.count_changed_jobs();
CREATE TRIGGER jobs_counts_removed AFTER DELETE ON {{schema}}.jobs
  REFERENCING OLD TABLE AS removed_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.count_removed_jobs();

-- The jobs already stored (the triggers above hold the table's lock from here to the commit, so
-- no change slips between this count and them).
INSERT INTO {{schema}}.job_counts (queue, state, n)
SELECT queue, state, count(*) FROM {{schema}}.jobs GROUP BY queue, state;
