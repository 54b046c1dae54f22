-- remove: deletes one finished (completed, dead or cancelled) job.
--
-- ?1 job id text
--
-- Changes one row when removed, none when there is no such job or it has not finished.
DELETE FROM {{prefix}}jobs WHERE id = ? AND state IN ('completed', 'dead', 'cancelled')
