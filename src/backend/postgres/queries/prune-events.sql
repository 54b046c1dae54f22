-- prune-events: deletes the oldest events past their age or beyond the count, in log order.
--
-- $1 now: bigint ms, NULL = the database clock    $2 max events kept int    $3 limit int
-- $4 max age ms bigint
--
-- The log is rows of `events` (one event each) and of `event_batches` (one statement's events
-- each, migration 0017), pruned whole: a batch goes once its newest event is past the age, or
-- once its oldest is past the newest $2 events (so at most $2 events stay). Looks only at the
-- first $3 rows of each table (the oldest), so a call reads no more rows than it may delete.
-- Returns the number of events deleted. `cut` is MATERIALIZED on purpose: referenced once,
-- PostgreSQL would inline it into the EXISTS and re-run its scan for every head row, which took
-- longer than the pruning interval and starved job pruning. `cut` walks the rows from the newest,
-- counting their events, to the first that holds the event $2 + 1 from the end: with batches of
-- hundreds that is a few hundred rows for the default 100,000 events.
WITH cut AS MATERIALIZED (
  SELECT c.xid, c.seq
  FROM (
    SELECT r.xid, r.seq, sum(r.events) OVER (ORDER BY r.xid DESC, r.seq DESC ROWS UNBOUNDED PRECEDING) AS newest_events
    FROM (
      (SELECT e.xid, e.seq, 1 AS events FROM {{schema}}.events AS e ORDER BY e.xid DESC, e.seq DESC)
      UNION ALL
      (SELECT b.xid, b.seq, b.events FROM {{schema}}.event_batches AS b ORDER BY b.xid DESC, b.seq DESC)
    ) AS r
  ) AS c
  WHERE c.newest_events > $2
  LIMIT 1
), head AS (
  SELECT e.xid, e.seq, e.at FROM {{schema}}.events AS e ORDER BY e.xid, e.seq LIMIT $3
), batch_head AS (
  SELECT b.xid, b.seq, b.newest_at FROM {{schema}}.event_batches AS b ORDER BY b.xid, b.seq LIMIT $3
), deleted AS (
  DELETE FROM {{schema}}.events AS e USING head AS h
  WHERE e.xid = h.xid AND e.seq = h.seq
    AND (h.at < {{schema}}.now_ms($1) - $4::bigint
         OR EXISTS (SELECT 1 FROM cut AS c WHERE (h.xid, h.seq) <= (c.xid, c.seq)))
  RETURNING 1 AS events
), deleted_batches AS (
  DELETE FROM {{schema}}.event_batches AS b USING batch_head AS h
  WHERE b.xid = h.xid AND b.seq = h.seq
    AND (h.newest_at < {{schema}}.now_ms($1) - $4::bigint
         OR EXISTS (SELECT 1 FROM cut AS c WHERE (h.xid, h.seq) <= (c.xid, c.seq)))
  RETURNING b.events
)
SELECT (coalesce((SELECT sum(d.events) FROM deleted AS d), 0) + coalesce((SELECT sum(d.events) FROM deleted_batches AS d), 0))::int AS deleted
