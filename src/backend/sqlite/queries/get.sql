-- get: one job by id.
--
-- ?1 job id text
--
-- Returns the row (all columns), or none.
SELECT * FROM {{prefix}}jobs WHERE id = ?
