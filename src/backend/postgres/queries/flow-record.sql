-- flow-record: records $3 starts of a rate-limited queue at $2.
--
-- $1 queue text    $2 at bigint ms    $3 count int
INSERT INTO {{schema}}.flow_starts (queue, at)
SELECT $1, $2::bigint FROM generate_series(1, $3::int)
