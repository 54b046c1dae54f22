-- 0008_stall_blame: which lease expiries may count toward a job's quarantine (maxStalls).
--
-- `{{prefix}}` is replaced by the backend's table prefix (default "conveyor_").
--
-- excused_token is the lease token under which the job must not be blamed if that lease expires:
-- the worker held it unstarted in its prefetch buffer (Backend.markBuffered), or the rescuer saw
-- its worker running other jobs when one of them expired (the death does not say which job
-- caused it). Compared with lease_token, so every new claim starts unexcused without a write.
ALTER TABLE {{prefix}}jobs ADD COLUMN excused_token INTEGER;
