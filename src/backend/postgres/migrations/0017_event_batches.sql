-- 0017_event_batches: the event log written as one row per statement instead of one per event.
--
-- 0007's triggers wrote one `events` row per event: a claim or a completion of 500 jobs inserted
-- 500 rows of about 150 bytes and 500 `events_pkey` entries. Those rows were the largest cost of
-- a processed job that is not the job's own row: about 640 of 2,080 WAL bytes and 7.5 µs of
-- server CPU (docs/performance-postgres.md, "Sixth pass" and "Session 29"). Here each statement's
-- events go into one `event_batches` row, as arrays in the order 0007 wrote its rows (one array
-- per field, element i of each making event i), compressed and stored out of line by TOAST like
-- any large value: one heap tuple and one index entry per statement.
--
-- Order and cursors. Readers read `events` and `event_batches` together (`event_log` below;
-- queries/read-events.sql), in (xid, seq, i) order: i is an event's place in its batch (1, 2, …)
-- and 0 for a row of `events`. Each table takes seq from its own identity, so a batch and an
-- `events` row may share (xid, seq); i tells them apart, and the order stays total. The rule of
-- 0004 (only transactions older than every running one are read) is unchanged. Cursors of rows
-- of `events` keep their form ("xid-seq"), so ids handed out before this migration resume
-- where they stood.
--
-- `events` stays: it holds the events written before this migration, and a process of an earlier
-- version (still running during a rolling upgrade) writes the event of a job deleted as it
-- finishes there itself (complete.sql, fail.sql and rescue.sql of that version): both are read
-- with the batches and pruned with them. Nothing new writes it.
--
-- Retention works on whole batches: pruning by count deletes a batch once its oldest event is
-- past the newest `maxEvents` (so fewer events may stay, never more), and by age once its newest
-- event is older than `maxAgeMs`.
CREATE TABLE {{schema}}.event_batches (
  xid      xid8    NOT NULL DEFAULT pg_current_xact_id(),
  seq      bigint  GENERATED ALWAYS AS IDENTITY,
  -- How many events the batch holds, and the time of its newest: what pruning reads, without
  -- opening the arrays.
  events    integer NOT NULL,
  newest_at bigint  NOT NULL,
  -- Element i of each array is event i, with the fields of an `events` row.
  at       bigint[]  NOT NULL,
  type     text[]    NOT NULL,
  queue    text[]    COLLATE "C" NOT NULL,
  name     text[]    COLLATE "C" NOT NULL,
  job_id   text[]    COLLATE "C" NOT NULL,
  attempt  integer[] NOT NULL,
  data     json[]    NOT NULL,
  PRIMARY KEY (xid, seq)
) WITH (
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 500,
  autovacuum_vacuum_insert_scale_factor = 0,
  autovacuum_vacuum_insert_threshold = 500
);

-- The arrays are compressed with LZ4 where the server has it (PostgreSQL 14 and later, built with
-- lz4, as the Debian and official images are): a batch of 10,000 added events was written in
-- 16.3 ms against 23.6 with the default pglz, at the same size (docs/performance-postgres.md,
-- "Session 29"). Elsewhere the default stays.
DO $$
BEGIN
  EXECUTE 'ALTER TABLE {{schema}}.event_batches
             ALTER COLUMN at SET COMPRESSION lz4, ALTER COLUMN type SET COMPRESSION lz4,
             ALTER COLUMN queue SET COMPRESSION lz4, ALTER COLUMN name SET COMPRESSION lz4,
             ALTER COLUMN job_id SET COMPRESSION lz4, ALTER COLUMN attempt SET COMPRESSION lz4,
             ALTER COLUMN data SET COMPRESSION lz4';
EXCEPTION
  -- Built without lz4 (feature_not_supported), or older than 14 (no SET COMPRESSION).
  WHEN feature_not_supported OR syntax_error THEN NULL;
END $$;

-- Every event of the log, one row each, in no particular order (read in (xid, seq, i) order):
-- the rows of `events` with i = 0, and each batch's events with their place in it.
CREATE VIEW {{schema}}.event_log AS
SELECT e.xid, e.seq, 0::bigint AS i, e.at, e.type, e.queue, e.name, e.job_id, e.attempt, e.data
FROM {{schema}}.events AS e
UNION ALL
SELECT b.xid, b.seq, u.i, u.at, u.type, u.queue, u.name, u.job_id, u.attempt, u.data
FROM {{schema}}.event_batches AS b
CROSS JOIN LATERAL unnest(b.at, b.type, b.queue, b.name, b.job_id, b.attempt, b.data)
  WITH ORDINALITY AS u(at, type, queue, name, job_id, attempt, data, i);

-- 0007's functions, writing one batch per statement: the same events, fields and order, and no
-- row at all when the statement made no event (a heartbeat, an empty claim).
CREATE OR REPLACE FUNCTION {{schema}}.record_added_events() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {{schema}}.event_batches (events, newest_at, at, type, queue, name, job_id, attempt, data)
  SELECT count(*), max(n.created_at), array_agg(n.created_at), array_agg('added'::text), array_agg(n.queue),
         array_agg(n.name), array_agg(n.id), array_agg(n.attempt),
         array_agg(json_build_object('state', n.state, 'runAt', n.run_at, 'priority', n.priority))
  FROM added_jobs AS n
  HAVING count(*) > 0;
  RETURN NULL;
END $$;

-- SET enable_nestloop = off: see 0007 (a plan kept from a first call on one row).
CREATE OR REPLACE FUNCTION {{schema}}.record_changed_events() RETURNS trigger
  LANGUAGE plpgsql
  SET enable_nestloop = off
  AS $$
BEGIN
  INSERT INTO {{schema}}.event_batches (events, newest_at, at, type, queue, name, job_id, attempt, data)
  SELECT count(*), max(ev.at), array_agg(ev.at), array_agg(ev.type), array_agg(ev.queue), array_agg(ev.name),
         array_agg(ev.id), array_agg(ev.attempt), array_agg(ev.data)
  FROM (
    SELECT CASE WHEN e.type = 'progress' THEN {{schema}}.now_ms(NULL)
                ELSE coalesce(
                  CASE WHEN n.state = 'active' THEN n.started_at
                       WHEN n.state IN ('completed', 'dead', 'cancelled') THEN n.finished_at
                       WHEN o.state = 'active' THEN (n.history -> -1 ->> 'finishedAt')::bigint END,
                  {{schema}}.now_ms(NULL)) END AS at,
           e.type, n.queue, n.name, n.id, n.attempt,
           CASE e.type
             WHEN 'active' THEN json_build_object('workerId', n.worker_id)
             WHEN 'completed' THEN json_build_object('result', n.result)
             WHEN 'retrying' THEN json_build_object('error', n.error, 'runAt', n.run_at)
             WHEN 'dead' THEN json_build_object('error', n.error)
             WHEN 'cancelled' THEN json_build_object('previousState', o.state)
             WHEN 'progress' THEN json_build_object('progress', n.progress)
             ELSE NULL END AS data
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
    WHERE e.type IS NOT NULL
  ) AS ev
  HAVING count(*) > 0;
  RETURN NULL;
END $$;
