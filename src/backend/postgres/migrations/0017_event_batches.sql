-- 0017_event_batches: a statement's events written as one row of `events` instead of one row each.
--
-- 0007's triggers wrote one `events` row per event: a claim or a completion of 500 jobs inserted
-- 500 rows of about 150 bytes and 500 `events_pkey` entries. Those rows were the largest cost of
-- a processed job that is not the job's own row: about 640 of 2,080 WAL bytes and 7.5 µs of
-- server CPU (docs/performance-postgres.md, "Sixth pass" and "Session 29"). Now a statement that
-- makes two events or more writes one row holding them all (a batch): the `batch_*` columns
-- below, one array per field, element i of each making event i, in the order 0007 wrote its rows,
-- compressed and stored out of line by TOAST like any large value. A statement that makes one
-- event writes the row it always did (the batch columns NULL): one-element arrays would cost
-- about 185 WAL bytes more per event than the plain row, and one-job statements are what a
-- lightly loaded queue runs.
--
-- Order and cursors. The log is read in (xid, seq, i) order: i is an event's place in its batch
-- (1, 2, …) and 0 for a row of one event; seq stays the one identity of `events`, so the order of
-- the rows, and 0004's rule (only transactions older than every running one are read), are
-- unchanged. A row of one event keeps its id's form ("xid-seq"); an event of a batch is
-- "xid-seq-i". Ids handed out before this migration resume where they stood.
--
-- A batch row's own columns (at, type, queue, name, job_id, attempt) hold its first event, so a
-- process of an earlier version reading the log during a rolling upgrade sees that event of the
-- batch (and not the others) rather than a row of NULLs; `data` is NULL there (a result may be
-- large). Nothing of this version reads them for a batch.
--
-- Retention works on rows: pruning by count deletes a batch once its oldest event is past the
-- newest `maxEvents` (so fewer events may stay, never more), and by age once its newest event is
-- older than `maxAgeMs`.
ALTER TABLE {{schema}}.events
  -- How many events the batch holds, and the time of its newest: what pruning reads, without
  -- opening the arrays.
  ADD COLUMN batch_events    integer,
  ADD COLUMN batch_newest_at bigint,
  ADD COLUMN batch_at        bigint[],
  ADD COLUMN batch_type      text[],
  ADD COLUMN batch_queue     text[] COLLATE "C",
  ADD COLUMN batch_name      text[] COLLATE "C",
  ADD COLUMN batch_job_id    text[] COLLATE "C",
  ADD COLUMN batch_attempt   integer[],
  ADD COLUMN batch_data      json[];

-- The arrays are compressed with LZ4 where the server has it (PostgreSQL 14 and later, built with
-- lz4, as the Debian and official images are): a batch of 10,000 added events was written in
-- 16.3 ms against 23.6 with the default pglz, at the same size (docs/performance-postgres.md,
-- "Session 29"). Elsewhere the default stays.
DO $$
BEGIN
  EXECUTE 'ALTER TABLE {{schema}}.events
             ALTER COLUMN batch_at SET COMPRESSION lz4, ALTER COLUMN batch_type SET COMPRESSION lz4,
             ALTER COLUMN batch_queue SET COMPRESSION lz4, ALTER COLUMN batch_name SET COMPRESSION lz4,
             ALTER COLUMN batch_job_id SET COMPRESSION lz4, ALTER COLUMN batch_attempt SET COMPRESSION lz4,
             ALTER COLUMN batch_data SET COMPRESSION lz4';
EXCEPTION
  -- Built without lz4 (feature_not_supported), or older than 14 (no SET COMPRESSION).
  WHEN feature_not_supported OR syntax_error THEN NULL;
END $$;

-- The row of `events` that records a statement's events, given as one array per field (element
-- i of each making event i): none for no event, the plain row for one, a batch for more. The one
-- rule for every writer: the triggers below and the statements that delete a job as it finishes
-- (complete.sql, fail.sql, rescue.sql), each as
--   INSERT INTO events (<the columns below>) SELECT r.* FROM (<arrays>) a, event_row(a...) r
CREATE FUNCTION {{schema}}.event_row(ats bigint[], types text[], queues text[], names text[], job_ids text[], attempts integer[], datas json[])
RETURNS TABLE (
  at bigint, type text, queue text, name text, job_id text, attempt integer, data json,
  batch_events integer, batch_newest_at bigint, batch_at bigint[], batch_type text[], batch_queue text[],
  batch_name text[], batch_job_id text[], batch_attempt integer[], batch_data json[]
)
LANGUAGE sql IMMUTABLE AS $$
  SELECT ats[1], types[1], queues[1], names[1], job_ids[1], attempts[1], CASE WHEN c.n = 1 THEN datas[1] END,
         CASE WHEN c.n > 1 THEN c.n END, CASE WHEN c.n > 1 THEN (SELECT max(a) FROM unnest(ats) AS a) END,
         CASE WHEN c.n > 1 THEN ats END, CASE WHEN c.n > 1 THEN types END, CASE WHEN c.n > 1 THEN queues END,
         CASE WHEN c.n > 1 THEN names END, CASE WHEN c.n > 1 THEN job_ids END, CASE WHEN c.n > 1 THEN attempts END,
         CASE WHEN c.n > 1 THEN datas END
  FROM (SELECT cardinality(job_ids) AS n) AS c
  WHERE c.n > 0
$$;

-- Every event of the log, one row each, in no particular order (read in (xid, seq, i) order).
CREATE VIEW {{schema}}.event_log AS
SELECT e.xid, e.seq, u.i, u.at, u.type, u.queue, u.name, u.job_id, u.attempt, u.data
FROM {{schema}}.events AS e
CROSS JOIN LATERAL (
  SELECT 0::bigint AS i, e.at, e.type, e.queue, e.name, e.job_id, e.attempt, e.data
  WHERE e.batch_job_id IS NULL
  UNION ALL
  SELECT b.i, b.at, b.type, b.queue, b.name, b.job_id, b.attempt, b.data
  FROM unnest(e.batch_at, e.batch_type, e.batch_queue, e.batch_name, e.batch_job_id, e.batch_attempt, e.batch_data)
    WITH ORDINALITY AS b(at, type, queue, name, job_id, attempt, data, i)
) AS u;

-- The event an updated job row makes, 0007's rule, or no row: a state change names the new state
-- (or, leaving 'active' for a runnable state, what the attempt's history record says happened;
-- leaving 'dead', a replay); otherwise a changed progress of an active job is a 'progress' event;
-- anything else (a heartbeat, a progress report repeating the last one) is no event. Written once
-- for both forms of record_changed_events below (inlined by the planner: a single SELECT).
CREATE FUNCTION {{schema}}.changed_job_event(
  new_state text, old_state text, history jsonb, new_progress json, old_progress json, started_at bigint,
  finished_at bigint, worker_id text, result json, error jsonb, run_at bigint
) RETURNS TABLE (at bigint, type text, data json)
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN e.type = 'progress' THEN {{schema}}.now_ms(NULL)
              ELSE coalesce(
                CASE WHEN new_state = 'active' THEN started_at
                     WHEN new_state IN ('completed', 'dead', 'cancelled') THEN finished_at
                     WHEN old_state = 'active' THEN (history -> -1 ->> 'finishedAt')::bigint END,
                {{schema}}.now_ms(NULL)) END,
         e.type,
         CASE e.type
           WHEN 'active' THEN json_build_object('workerId', worker_id)
           WHEN 'completed' THEN json_build_object('result', result)
           WHEN 'retrying' THEN json_build_object('error', error, 'runAt', run_at)
           WHEN 'dead' THEN json_build_object('error', error)
           WHEN 'cancelled' THEN json_build_object('previousState', old_state)
           WHEN 'progress' THEN json_build_object('progress', new_progress)
           ELSE NULL END
  FROM (
    SELECT CASE
      WHEN new_state IS DISTINCT FROM old_state THEN CASE
        WHEN new_state IN ('active', 'completed', 'dead', 'cancelled') THEN new_state
        WHEN old_state = 'active' THEN CASE history -> -1 ->> 'outcome'
                                       WHEN 'failed' THEN 'retrying' WHEN 'released' THEN 'released' ELSE 'stalled' END
        WHEN old_state = 'dead' THEN 'replayed'
        ELSE 'waiting' END
      WHEN new_state = 'active' AND new_progress IS NOT NULL AND new_progress::text IS DISTINCT FROM old_progress::text
        THEN 'progress'
      END AS type
  ) AS e
  WHERE e.type IS NOT NULL
$$;

-- 0007's functions, writing one row per statement: the same events, fields and order, and no row
-- at all when the statement made no event (a heartbeat, an empty claim). A statement of one job
-- (what a lightly loaded queue runs) writes its plain row straight away: building the arrays and
-- going through event_row for one event took 30 µs of the server's time per single add against
-- 14 for the plain insert, and counting the rows first 19 (docs/performance-postgres.md,
-- "Session 29").
CREATE OR REPLACE FUNCTION {{schema}}.record_added_events() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  IF (SELECT count(*) FROM added_jobs) = 1 THEN
    INSERT INTO {{schema}}.events (at, type, queue, name, job_id, attempt, data)
    SELECT n.created_at, 'added', n.queue, n.name, n.id, n.attempt,
           json_build_object('state', n.state, 'runAt', n.run_at, 'priority', n.priority)
    FROM added_jobs AS n;
    RETURN NULL;
  END IF;
  INSERT INTO {{schema}}.events (at, type, queue, name, job_id, attempt, data, batch_events, batch_newest_at, batch_at,
                                 batch_type, batch_queue, batch_name, batch_job_id, batch_attempt, batch_data)
  SELECT r.*
  FROM (
    SELECT array_agg(n.created_at) AS ats, array_agg('added'::text) AS types, array_agg(n.queue) AS queues,
           array_agg(n.name) AS names, array_agg(n.id) AS ids, array_agg(n.attempt) AS attempts,
           array_agg(json_build_object('state', n.state, 'runAt', n.run_at, 'priority', n.priority)) AS datas
    FROM added_jobs AS n
  ) AS a
  CROSS JOIN LATERAL {{schema}}.event_row(a.ats, a.types, a.queues, a.names, a.ids, a.attempts, a.datas) AS r;
  RETURN NULL;
END $$;

-- SET enable_nestloop = off: see 0007 (a plan kept from a first call on one row).
CREATE OR REPLACE FUNCTION {{schema}}.record_changed_events() RETURNS trigger
  LANGUAGE plpgsql
  SET enable_nestloop = off
  AS $$
BEGIN
  IF (SELECT count(*) FROM changed_after) = 1 THEN
    INSERT INTO {{schema}}.events (at, type, queue, name, job_id, attempt, data)
    SELECT e.at, e.type, n.queue, n.name, n.id, n.attempt, e.data
    FROM changed_after AS n
    JOIN changed_before AS o ON o.id = n.id
    CROSS JOIN LATERAL {{schema}}.changed_job_event(n.state, o.state, n.history, n.progress, o.progress, n.started_at,
                                                    n.finished_at, n.worker_id, n.result, n.error, n.run_at) AS e;
    RETURN NULL;
  END IF;
  INSERT INTO {{schema}}.events (at, type, queue, name, job_id, attempt, data, batch_events, batch_newest_at, batch_at,
                                 batch_type, batch_queue, batch_name, batch_job_id, batch_attempt, batch_data)
  SELECT r.*
  FROM (
    SELECT array_agg(e.at) AS ats, array_agg(e.type) AS types, array_agg(n.queue) AS queues, array_agg(n.name) AS names,
           array_agg(n.id) AS ids, array_agg(n.attempt) AS attempts, array_agg(e.data) AS datas
    FROM changed_after AS n
    JOIN changed_before AS o ON o.id = n.id
    CROSS JOIN LATERAL {{schema}}.changed_job_event(n.state, o.state, n.history, n.progress, o.progress, n.started_at,
                                                    n.finished_at, n.worker_id, n.result, n.error, n.run_at) AS e
  ) AS a
  CROSS JOIN LATERAL {{schema}}.event_row(a.ats, a.types, a.queues, a.names, a.ids, a.attempts, a.datas) AS r;
  RETURN NULL;
END $$;
