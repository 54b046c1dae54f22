-- read-events: the event log after a cursor, oldest first (see migration 0003 for the order).
--
-- $1 cursor xid xid8    $2 cursor seq bigint    $3 limit int
--
-- Only events of transactions older than every one still running: a row that becomes visible
-- later always sorts after these, so the cursor never passes an event unseen.
SELECT e.xid::text AS xid, e.seq, e.at, e.type, e.queue, e.name, e.job_id, e.attempt, e.data
FROM {{schema}}.events AS e
WHERE (e.xid, e.seq) > ($1::xid8, $2::bigint)
  AND e.xid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY e.xid, e.seq
LIMIT $3
