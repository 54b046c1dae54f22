-- 0003_flows: dedup windows (JobOptions.dedup).
--
-- `{{prefix}}` is replaced by the backend's table prefix (default "conveyor_").
--
-- One row per (queue, dedup key) whose window was ever opened: the job it was opened for and when
-- it ends (ms, store clock). An ended window is as good as none; prune deletes ended rows. The
-- rules are in src/backend/dedup.ts.
CREATE TABLE {{prefix}}dedup_windows (
  queue      TEXT    NOT NULL,
  key        TEXT    NOT NULL,
  job_id     TEXT    NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (queue, key)
) STRICT, WITHOUT ROWID;

CREATE INDEX {{prefix}}dedup_windows_expires ON {{prefix}}dedup_windows (expires_at);

-- Flows (queue.addFlow; rules in src/backend/flows.ts). A child names its parent; a parent counts
-- the children that have not settled and keeps its failure policy ('fail' | 'continue').
ALTER TABLE {{prefix}}jobs ADD COLUMN parent_id TEXT;
ALTER TABLE {{prefix}}jobs ADD COLUMN parent_queue TEXT;
ALTER TABLE {{prefix}}jobs ADD COLUMN pending_children INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {{prefix}}jobs ADD COLUMN on_child_failure TEXT;

-- Cancelling a parent finds its children through this; only jobs of flows are in it.
CREATE INDEX {{prefix}}jobs_parent ON {{prefix}}jobs (parent_id) WHERE parent_id IS NOT NULL;
-- The waiting-children count of stats().
CREATE INDEX {{prefix}}jobs_waiting_children ON {{prefix}}jobs (queue) WHERE state = 'waiting-children';

-- One row per (parent, child), written with the flow; the child's outcome is copied in when it
-- settles (state NULL until then), so the parent reads its children's results even after the
-- children were pruned. Deleted with the parent.
CREATE TABLE {{prefix}}flow_children (
  parent_id   TEXT    NOT NULL,
  child_id    TEXT    NOT NULL,
  -- Order the children were added in.
  position    INTEGER NOT NULL,
  child_queue TEXT    NOT NULL,
  child_name  TEXT    NOT NULL,
  state       TEXT,
  result      TEXT,
  error       TEXT,
  PRIMARY KEY (parent_id, child_id)
) STRICT, WITHOUT ROWID;

-- A child's final settle, by whatever statement (complete, fail, rescue, cancel), releases its
-- parent in the same transaction: the trigger runs inside the statement that settles the child,
-- so no crash can fall between the two. Only a child's first settle counts for its parent (a
-- replayed child settles again: its outcome record is updated, the parent left alone). The parent
-- becomes 'scheduled' at its own run_at (claimable at once unless its delay has not passed), or
-- 'dead' at once when the child failed and its policy is 'fail'. NEW.finished_at is the settle's
-- "now" on the store clock.
CREATE TRIGGER {{prefix}}flow_child_settled
AFTER UPDATE OF state ON {{prefix}}jobs
WHEN OLD.parent_id IS NOT NULL
 AND NEW.state IN ('completed', 'dead', 'cancelled')
 AND OLD.state NOT IN ('completed', 'dead', 'cancelled')
BEGIN
  UPDATE {{prefix}}jobs
  SET pending_children = pending_children - 1,
      state = CASE
        WHEN NEW.state <> 'completed' AND on_child_failure = 'fail' THEN 'dead'
        WHEN pending_children = 1 THEN 'scheduled'
        ELSE state END,
      error = CASE WHEN NEW.state <> 'completed' AND on_child_failure = 'fail'
        THEN json_object('name', 'ChildFailedError',
                         'message', 'child ' || OLD.id || ' (' || OLD.name || ' in queue ' || OLD.queue || ') ended ' || NEW.state
                                    || '; the flow''s policy is "fail"',
                         'stack', NULL)
        ELSE error END,
      finished_at = CASE WHEN NEW.state <> 'completed' AND on_child_failure = 'fail' THEN NEW.finished_at ELSE finished_at END,
      expires_at = CASE WHEN NEW.state <> 'completed' AND on_child_failure = 'fail' THEN NEW.finished_at + retain_dead_ms ELSE expires_at END
  WHERE id = OLD.parent_id AND state = 'waiting-children'
    AND EXISTS (SELECT 1 FROM {{prefix}}flow_children
                WHERE parent_id = OLD.parent_id AND child_id = OLD.id AND state IS NULL);
  -- Other processes watching the file wake the parent's queue (see the queues table).
  UPDATE {{prefix}}queues SET wake = wake + 1
  WHERE name = OLD.parent_queue
    AND EXISTS (SELECT 1 FROM {{prefix}}jobs WHERE id = OLD.parent_id AND state = 'scheduled');
  UPDATE {{prefix}}flow_children
  SET state = NEW.state,
      result = CASE WHEN NEW.state = 'completed' THEN NEW.result END,
      error = CASE WHEN NEW.state = 'dead' THEN NEW.error END
  WHERE parent_id = OLD.parent_id AND child_id = OLD.id;
END;

-- Cancelling a parent that waits for its children cancels the children that have not started
-- (and, through this same trigger, theirs: the backend turns recursive_triggers on). Running
-- children carry on; their settles are recorded as usual.
CREATE TRIGGER {{prefix}}flow_parent_cancelled
AFTER UPDATE OF state ON {{prefix}}jobs
WHEN NEW.state = 'cancelled' AND OLD.state = 'waiting-children'
BEGIN
  UPDATE {{prefix}}jobs
  SET state = 'cancelled', finished_at = NEW.finished_at, expires_at = NEW.finished_at + retain_completed_ms
  WHERE parent_id = NEW.id AND state IN ('waiting', 'scheduled', 'waiting-children');
END;

CREATE TRIGGER {{prefix}}flow_parent_deleted
AFTER DELETE ON {{prefix}}jobs
WHEN OLD.on_child_failure IS NOT NULL
BEGIN
  DELETE FROM {{prefix}}flow_children WHERE parent_id = OLD.id;
END;
