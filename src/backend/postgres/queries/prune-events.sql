-- prune-events: deletes the oldest events past their age or beyond the count, in log order.
--
-- $1 now: bigint ms, NULL = the database clock    $2 max events kept int    $3 limit int
-- $4 max age ms bigint
--
-- A row holds one event or a statement's batch of them (migration 0017) and is deleted whole:
-- once its newest event is past the age, or once its oldest is past the newest $2 events (so at
-- most $2 events stay). Looks only at the first $3 rows of the log (the oldest), so a call reads
-- no more rows than it may delete. Returns the number of events deleted. `cut` is MATERIALIZED on
-- purpose: referenced once, PostgreSQL would inline it into the EXISTS and re-run its scan for
-- every head row, which took longer than the pruning interval and starved job pruning. `cut`
-- walks the rows from the newest, counting their events, to the first that holds the event $2 + 1
-- from the end: with batches of hundreds that is a few hundred rows for the default 100,000.
WITH cut AS MATERIALIZED (
  SELECT c.xid, c.seq
  FROM (
    SELECT e.xid, e.seq, sum(coalesce(e.batch_events, 1)) OVER (ORDER BY e.xid DESC, e.seq DESC ROWS UNBOUNDED PRECEDING) AS newest_events
    FROM {{schema}}.events AS e
  ) AS c
  WHERE c.newest_events > $2
  ORDER BY c.xid DESC, c.seq DESC
  LIMIT 1
), head AS (
  SELECT e.xid, e.seq, coalesce(e.batch_newest_at, e.at) AS newest_at FROM {{schema}}.events AS e ORDER BY e.xid, e.seq LIMIT $3
), doomed AS (
  SELECT h.xid, h.seq FROM head AS h
  WHERE h.newest_at < {{schema}}.now_ms($1) - $4::bigint
     OR EXISTS (SELECT 1 FROM cut AS c WHERE (h.xid, h.seq) <= (c.xid, c.seq))
), deleted AS (
  DELETE FROM {{schema}}.events AS e USING doomed AS d
  WHERE e.xid = d.xid AND e.seq = d.seq
  RETURNING coalesce(e.batch_events, 1) AS events
)
SELECT coalesce(sum(d.events), 0)::int AS deleted FROM deleted AS d
