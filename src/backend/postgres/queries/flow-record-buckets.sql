-- flow-record-buckets: records one start at $2 in each bucket of $1 (repeats count).
--
-- $1 buckets text[]    $2 at bigint ms
INSERT INTO {{schema}}.flow_starts (queue, at)
SELECT bucket, $2::bigint FROM unnest($1::text[]) AS b(bucket)
