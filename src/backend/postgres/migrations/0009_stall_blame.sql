-- 0009_stall_blame: which lease expiries may count toward a job's quarantine (maxStalls).
--
-- `{{schema}}` is replaced by the backend's schema (quoted) before this runs.
--
-- excused_token is the lease token under which the job must not be blamed if that lease expires:
-- the worker held it unstarted in its prefetch buffer (Backend.markBuffered), or the rescuer saw
-- its worker running other jobs when one of them expired (the death does not say which job
-- caused it). Compared with lease_token, so every new claim starts unexcused without a write.
-- No index covers it: setting it is a HOT update, like a heartbeat's.
ALTER TABLE {{schema}}.jobs ADD COLUMN excused_token bigint;
