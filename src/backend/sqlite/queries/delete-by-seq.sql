-- delete-by-seq: deletes one job by its seq.
--
-- ?1 seq integer
DELETE FROM {{prefix}}jobs WHERE seq = ?
