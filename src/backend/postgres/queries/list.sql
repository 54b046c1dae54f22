-- list: jobs newest first, optionally filtered by queue, name and state, one page at a time.
--
-- $1 now: bigint ms, NULL = the database clock    $2 queue text (NULL = any)
-- $3 name text (NULL = any)    $4 state text (NULL = any)    $5 limit int    $6 offset int
-- $7 before_seq bigint: keyset cursor, only rows with a smaller seq (NULL = from the newest)
-- $8 created_from bigint ms (NULL = no bound)    $9 created_until bigint ms, exclusive (NULL = none)
-- $10 newer boolean: true turns $7 into a reverse cursor: the rows with a larger seq, oldest
--     first (the previous page; the caller turns it round)
--
-- Returns rows like get.sql. State `waiting` includes due `scheduled` jobs; `scheduled` only
-- future ones. Sent unprepared on purpose: PostgreSQL then plans it with the actual parameters,
-- folds the filters that are NULL away, and picks the index the remaining ones need.
--
-- "Newest first" is a top-N sort on seq over the matching rows, with no index on seq: list is
-- an operator's call, and retention keeps the finished rows bounded, whereas an index on seq
-- would tax every insert and state change of the hot path.
SELECT {{job_columns}}, {{schema}}.now_ms($1) AS observed_at
FROM {{schema}}.jobs AS j
WHERE ($2::text IS NULL OR j.queue = $2)
  AND ($3::text IS NULL OR j.name = $3)
  AND ($4::text IS NULL
       OR ($4 = 'waiting' AND (j.state = 'waiting' OR (j.state = 'scheduled' AND j.run_at <= {{schema}}.now_ms($1))))
       OR ($4 = 'scheduled' AND j.state = 'scheduled' AND j.run_at > {{schema}}.now_ms($1))
       OR ($4 NOT IN ('waiting', 'scheduled') AND j.state = $4))
  AND ($7::bigint IS NULL OR CASE WHEN $10::boolean THEN j.seq > $7 ELSE j.seq < $7 END)
  AND ($8::bigint IS NULL OR j.created_at >= $8)
  AND ($9::bigint IS NULL OR j.created_at < $9)
ORDER BY CASE WHEN $10::boolean THEN j.seq END, j.seq DESC
LIMIT $5 OFFSET $6
