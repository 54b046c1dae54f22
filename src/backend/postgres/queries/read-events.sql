-- read-events: the event log after a cursor, oldest first (see migrations 0004 and 0017 for the
-- order: (xid, seq, i), i an event's place in its row's batch, 0 for a row of one event).
--
-- $1 cursor xid xid8    $2 cursor seq bigint    $3 cursor i bigint    $4 limit int
--
-- Only events of transactions older than every one still running: a row that becomes visible
-- later always sorts after these, so the cursor never passes an event unseen. The rows are walked
-- by events_pkey from the cursor's row, each batch's events sorted within it (an incremental
-- sort), so a page reads its own rows and no more.
WITH horizon AS MATERIALIZED (
  SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin
)
SELECT e.xid::text AS xid, e.seq, u.i, u.at, u.type, u.queue, u.name, u.job_id, u.attempt, u.data
FROM {{schema}}.events AS e
CROSS JOIN LATERAL (
  SELECT 0::bigint AS i, e.at, e.type, e.queue, e.name, e.job_id, e.attempt, e.data
  WHERE e.batch_job_id IS NULL
  UNION ALL
  SELECT b.i, b.at, b.type, b.queue, b.name, b.job_id, b.attempt, b.data
  FROM unnest(e.batch_at, e.batch_type, e.batch_queue, e.batch_name, e.batch_job_id, e.batch_attempt, e.batch_data)
    WITH ORDINALITY AS b(at, type, queue, name, job_id, attempt, data, i)
) AS u
WHERE (e.xid, e.seq) >= ($1::xid8, $2::bigint)
  AND (e.xid, e.seq, u.i) > ($1::xid8, $2::bigint, $3::bigint)
  AND e.xid < (SELECT h.xmin FROM horizon AS h)
ORDER BY e.xid, e.seq, u.i
LIMIT $4
