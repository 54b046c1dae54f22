-- read-events: the event log after a cursor, oldest first (see migrations 0004 and 0017 for the
-- order: (xid, seq, i), i an event's place in its row's batch, 0 for a row of one event).
--
-- $1 cursor xid xid8    $2 cursor seq bigint    $3 cursor i bigint    $4 limit int
--
-- Only events of transactions older than every one still running: a row that becomes visible
-- later always sorts after these, so the cursor never passes an event unseen. `event_log` (0017)
-- is `events` with each batch unnested beside it: the planner walks events_pkey from the cursor's
-- row (the (xid, seq) bound below) and sorts each batch's events within it (an incremental sort),
-- so a page reads its own rows and no more.
WITH horizon AS MATERIALIZED (
  SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin
)
SELECT l.xid::text AS xid, l.seq, l.i, l.at, l.type, l.queue, l.name, l.job_id, l.attempt, l.data
FROM {{schema}}.event_log AS l
WHERE (l.xid, l.seq) >= ($1::xid8, $2::bigint)
  AND (l.xid, l.seq, l.i) > ($1::xid8, $2::bigint, $3::bigint)
  AND l.xid < (SELECT h.xmin FROM horizon AS h)
ORDER BY l.xid, l.seq, l.i
LIMIT $4
