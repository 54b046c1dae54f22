-- promote: turns every due `scheduled` job into `waiting`.
--
-- ?1 now ms
--
-- Changes one row per job promoted. Plan: SEARCH conveyor_jobs USING INDEX conveyor_jobs_due (run_at<?)
UPDATE {{prefix}}jobs SET state = 'waiting' WHERE state = 'scheduled' AND run_at <= ?
