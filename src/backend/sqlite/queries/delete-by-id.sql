-- delete-by-id: deletes one job by id.
--
-- ?1 job id text
DELETE FROM {{prefix}}jobs WHERE id = ?
