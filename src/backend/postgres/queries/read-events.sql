-- read-events: the event log after a cursor, oldest first (see migrations 0004 and 0017 for the
-- order: (xid, seq, i), i an event's place in its batch, 0 for a row of `events`).
--
-- $1 cursor xid xid8    $2 cursor seq bigint    $3 cursor i bigint    $4 limit int
--
-- Only events of transactions older than every one still running: a row that becomes visible
-- later always sorts after these, so the cursor never passes an event unseen.
--
-- Each table is read on its own, in order and at most $4 events, and the two merged: each is then
-- a walk of its primary key from the cursor (the batches' events sorted within each batch only),
-- where one ORDER BY over the whole `event_log` view could sort everything after the cursor.
WITH horizon AS MATERIALIZED (
  SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin
)
SELECT l.xid::text AS xid, l.seq, l.i, l.at, l.type, l.queue, l.name, l.job_id, l.attempt, l.data
FROM (
  (SELECT e.xid, e.seq, 0::bigint AS i, e.at, e.type, e.queue, e.name, e.job_id, e.attempt, e.data
   FROM {{schema}}.events AS e
   WHERE (e.xid, e.seq) > ($1::xid8, $2::bigint)
     AND e.xid < (SELECT h.xmin FROM horizon AS h)
   ORDER BY e.xid, e.seq
   LIMIT $4)
  UNION ALL
  (SELECT b.xid, b.seq, u.i, u.at, u.type, u.queue, u.name, u.job_id, u.attempt, u.data
   FROM {{schema}}.event_batches AS b
   CROSS JOIN LATERAL unnest(b.at, b.type, b.queue, b.name, b.job_id, b.attempt, b.data)
     WITH ORDINALITY AS u(at, type, queue, name, job_id, attempt, data, i)
   WHERE (b.xid, b.seq) >= ($1::xid8, $2::bigint)
     AND (b.xid, b.seq, u.i) > ($1::xid8, $2::bigint, $3::bigint)
     AND b.xid < (SELECT h.xmin FROM horizon AS h)
   ORDER BY b.xid, b.seq, u.i
   LIMIT $4)
) AS l
ORDER BY l.xid, l.seq, l.i
LIMIT $4
