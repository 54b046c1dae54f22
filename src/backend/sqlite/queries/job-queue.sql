-- job-queue: one job's queue.
--
-- ?1 job id text
--
-- Returns one value, the queue, or no row when there is no such job.
SELECT queue FROM {{prefix}}jobs WHERE id = ?
