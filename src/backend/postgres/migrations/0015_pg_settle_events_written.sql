-- 0015_pg_settle_events_written: the hottest statements write their own events; the trigger
-- keeps recording every other change of a job.
--
-- `{{schema}}` is replaced by the backend's schema (quoted) before this runs.
--
-- claim.sql, complete.sql, complete-and-claim.sql and fail.sql (one per job processed, twice)
-- now insert their events into `events` themselves, from their own RETURNING rows, in the same
-- statement as the change (docs/performance-postgres.md, "Sixth pass"): the same types, times,
-- attempts and details as the trigger below writes. The trigger function (0007) then skips the
-- changes of exactly those statements, recognised by the first line of their text,
-- `-- conveyor:events-written`, and only at trigger depth 1: the changes the statement made
-- itself. A change a nested statement makes (a flow parent released or failed by its last
-- child's settle, through flow_child_settled) fires this trigger at depth 2 and is recorded as
-- before; so is every statement without that line (rescue, release, cancel, replay, promote,
-- the flow statements, a statement of an older Conveyor still running during an upgrade).
--
-- One order changes: 0007's trigger wrote a flow parent's release (depth 2, fired first) before
-- its last child's completion; the child's event is now written during the statement and the
-- parent's at its end, so the completion comes first. Neither order was a contract (0007: each
-- job's own events stay in order, which is what readers rely on).
--
-- current_query() is the statement the client sent (for a prepared statement, its source text),
-- whatever nests inside it. The check costs a comparison of 26 bytes per statement.
--
-- Only the function changes: the triggers (0007, recreated by settle_event_log in 0012) call it
-- by name, and with the event log off they do not exist.
CREATE OR REPLACE FUNCTION {{schema}}.record_changed_events() RETURNS trigger
  LANGUAGE plpgsql
  SET enable_nestloop = off
  AS $$
BEGIN
  IF pg_trigger_depth() = 1 AND starts_with(current_query(), '-- conveyor:events-written' || chr(10)) THEN
    RETURN NULL;
  END IF;
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
