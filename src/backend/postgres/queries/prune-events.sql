-- prune-events: deletes the oldest events past their age or beyond the count, in log order.
--
-- $1 now: bigint ms, NULL = the database clock    $2 max events kept int    $3 limit int
-- $4 max age ms bigint
--
-- Looks only at the first $3 events of the log (the oldest), so a call reads no more rows than
-- it may delete. Returns the number deleted. `cut` is MATERIALIZED on purpose: referenced once,
-- PostgreSQL would inline it into the EXISTS and re-run its OFFSET scan (up to $2 index entries)
-- for every head row, which took longer than the pruning interval and starved job pruning.
WITH head AS (
  SELECT e.xid, e.seq, e.at FROM {{schema}}.events AS e ORDER BY e.xid, e.seq LIMIT $3
), cut AS MATERIALIZED (
  SELECT e.xid, e.seq FROM {{schema}}.events AS e ORDER BY e.xid DESC, e.seq DESC OFFSET $2 LIMIT 1
), doomed AS (
  SELECT h.xid, h.seq FROM head AS h
  WHERE h.at < {{schema}}.now_ms($1) - $4::bigint
     OR EXISTS (SELECT 1 FROM cut AS c WHERE (h.xid, h.seq) <= (c.xid, c.seq))
), deleted AS (
  DELETE FROM {{schema}}.events AS e USING doomed AS d
  WHERE e.xid = d.xid AND e.seq = d.seq
  RETURNING 1
)
SELECT count(*)::int AS deleted FROM deleted
