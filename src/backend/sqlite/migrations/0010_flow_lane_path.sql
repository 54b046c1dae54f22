-- 0010_flow_lane_path: a keyed claim and its completion maintain one partial index fewer.
--
-- `{{prefix}}` is replaced by the backend's table prefix (default "conveyor_").
--
-- jobs_group_running (0005) held one entry per active job with a group: every keyed claim
-- inserted one per job and every completion, failure, release or rescue deleted it again, for a
-- read the claim can make from the active rows instead (jobs_lease, a set bounded by the fleet's
-- concurrency, as the queue's running counts already are read). The claim of a laned queue now
-- counts a group's running jobs with the names' (docs/flow-control.md, "Fifth round"). Dropping
-- an index changes no row, so a database holding jobs, running ones included, upgrades as is.
DROP INDEX {{prefix}}jobs_group_running;

-- jobs_lanes (0005) again with `state` last: the lane walk's probes ("the next lane after x with
-- waiting or scheduled jobs") then read the index alone instead of one table row per lane. The
-- order is unchanged (state after seq, like jobs_claim), so the heads read each lane the same way.
DROP INDEX {{prefix}}jobs_lanes;
CREATE INDEX {{prefix}}jobs_lanes ON {{prefix}}jobs (queue, lane, priority, run_at, seq, state)
  WHERE lane IS NOT NULL AND state IN ('waiting', 'scheduled');

-- A queue turned laned used to move only its waiting and scheduled unkeyed jobs to lane '': a job
-- running (or dead) at that moment kept lane NULL, and once a retry, release, rescue or replay
-- put it back it waited where no lane claim looks, for ever. flow.ts now moves every job that
-- may wait again; this repairs databases turned laned before that.
UPDATE {{prefix}}jobs SET lane = ''
WHERE lane IS NULL AND state NOT IN ('completed', 'cancelled')
  AND queue IN (SELECT queue FROM {{prefix}}flow_queues WHERE lanes = 1);
