-- 0013_removal_on_settle: the running jobs that are deleted as they settle, indexed on their own.
--
-- `{{schema}}` is replaced by the backend's schema (quoted) before this runs.
--
-- complete.sql deletes a job kept for 0 ms (removeOnComplete: true) instead of updating it, and
-- fail.sql one kept dead for 0 ms (removeOnFail: true). Both looked for such jobs among the
-- batch's ids: one jobs_pkey probe per job of every batch, to find none in most deployments,
-- or (planned with estimates for a few rows) a sequential scan of the whole table. These
-- partial indexes hold only running jobs with such a retention: empty unless the option is
-- used, so the look is one probe of an empty index. A job enters one when it is claimed with the
-- option set and leaves it when it settles; other jobs never enter them, so they cost other jobs
-- nothing (no entry, and `state` changing already makes those updates non-HOT).
CREATE INDEX jobs_active_removed_on_complete ON {{schema}}.jobs (id) WHERE state = 'active' AND retain_completed_ms = 0;
CREATE INDEX jobs_active_removed_on_fail ON {{schema}}.jobs (id) WHERE state = 'active' AND retain_dead_ms = 0;
