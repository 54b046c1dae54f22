-- list-waiting: one queue's waiting jobs (list with state "waiting" and a queue), a page at a time,
-- by keyset in either direction, from indexes alone however deep the backlog.
--
-- $1 now: bigint ms, NULL = the database clock    $2 queue text    $3 name text (NULL = any)
-- $4 limit int    $5 offset int    $6 cursor seq bigint (NULL = from the newest)
-- $7 newer boolean: false = the jobs below the cursor, newest first; true = the jobs above it,
--    oldest first (the previous page; the caller turns it round)
-- $8 created_from bigint ms (NULL = no bound)    $9 created_until bigint ms, exclusive (NULL = none)
--
-- Waiting jobs come from two places: rows in state 'waiting' (jobs_waiting_seq, in seq order)
-- and due 'scheduled' rows promoteDue has not relabelled yet (jobs_scheduled; few). Each part
-- yields at most limit + offset rows in the page's order and the two are merged, so a page
-- reads about limit + offset index entries, never the backlog. Sent unprepared (like list), so
-- the CASEs on $7 fold to one direction and the index is walked in that order.
SELECT {{job_columns}}, {{schema}}.now_ms($1) AS observed_at
FROM (
  (SELECT w.id, w.seq FROM {{schema}}.jobs AS w
   WHERE w.queue = $2 AND w.state = 'waiting'
     AND ($3::text IS NULL OR w.name = $3)
     AND ($6::bigint IS NULL OR CASE WHEN $7::boolean THEN w.seq > $6::bigint ELSE w.seq < $6::bigint END)
     AND ($8::bigint IS NULL OR w.created_at >= $8)
     AND ($9::bigint IS NULL OR w.created_at < $9)
   ORDER BY CASE WHEN $7::boolean THEN w.seq END, w.seq DESC
   LIMIT $4::int + $5::int)
  UNION ALL
  (SELECT s.id, s.seq FROM {{schema}}.jobs AS s
   WHERE s.state = 'scheduled' AND s.run_at <= {{schema}}.now_ms($1) AND s.queue = $2
     AND ($3::text IS NULL OR s.name = $3)
     AND ($6::bigint IS NULL OR CASE WHEN $7::boolean THEN s.seq > $6 ELSE s.seq < $6 END)
     AND ($8::bigint IS NULL OR s.created_at >= $8)
     AND ($9::bigint IS NULL OR s.created_at < $9)
   ORDER BY CASE WHEN $7::boolean THEN s.seq END, s.seq DESC
   LIMIT $4::int + $5::int)
) AS picked
JOIN {{schema}}.jobs AS j ON j.id = picked.id
ORDER BY CASE WHEN $7::boolean THEN picked.seq END, picked.seq DESC
LIMIT $4 OFFSET $5
