-- 0003_flows: dedup windows (JobOptions.dedup).
--
-- `{{schema}}` is replaced by the backend's schema (quoted) before this runs.
--
-- One row per (queue, dedup key) whose window was ever opened: the job it was opened for and when
-- it ends (ms, store clock). An ended window is as good as none; prune-dedup.sql deletes ended
-- rows. The rules are in src/backend/dedup.ts.
CREATE TABLE {{schema}}.dedup_windows (
  queue      text   COLLATE "C" NOT NULL,
  key        text   COLLATE "C" NOT NULL,
  job_id     text   COLLATE "C" NOT NULL,
  expires_at bigint NOT NULL,
  PRIMARY KEY (queue, key)
);

CREATE INDEX dedup_windows_expires ON {{schema}}.dedup_windows (expires_at);

-- Decides one job that carries a dedup window, in the caller's transaction, holding the window's
-- row lock until it commits: a concurrent producer with the same key waits here, then sees this
-- one's outcome. Returns ('opened', the job's id) when the caller must store the job (the window
-- now belongs to it), or ('dropped' | 'extended' | 'replaced', the window's job id).
--
-- The row is made to exist first (INSERT ... ON CONFLICT DO NOTHING waits for a concurrent
-- inserter of the same key to commit or roll back) and then locked: a lock on a missing row would
-- lock nothing, and two producers would both open a window. VOLATILE, so each statement inside
-- sees what the one before it (and a producer it waited for) committed.
CREATE FUNCTION {{schema}}.dedup_window(
  p_queue text, p_key text, p_job_id text, p_ttl_ms bigint, p_mode text, p_payload json, p_run_at bigint,
  p_now bigint, p_channel text
) RETURNS TABLE (outcome text, window_job_id text)
  LANGUAGE plpgsql VOLATILE
  AS $$
DECLARE
  w record;
BEGIN
  LOOP
    INSERT INTO {{schema}}.dedup_windows (queue, key, job_id, expires_at)
    VALUES (p_queue, p_key, p_job_id, p_now + p_ttl_ms)
    ON CONFLICT (queue, key) DO NOTHING;
    IF FOUND THEN
      RETURN QUERY SELECT 'opened'::text, p_job_id;
      RETURN;
    END IF;
    SELECT d.job_id, d.expires_at INTO w
    FROM {{schema}}.dedup_windows d WHERE d.queue = p_queue AND d.key = p_key
    FOR UPDATE;
    EXIT WHEN FOUND;
    -- Pruned between the two statements: start again.
  END LOOP;

  IF w.expires_at > p_now THEN
    IF p_mode = 'drop' THEN
      RETURN QUERY SELECT 'dropped'::text, w.job_id;
      RETURN;
    END IF;
    IF p_mode = 'extend' THEN
      UPDATE {{schema}}.dedup_windows SET expires_at = p_now + p_ttl_ms WHERE queue = p_queue AND key = p_key;
      RETURN QUERY SELECT 'extended'::text, w.job_id;
      RETURN;
    END IF;
    -- replace: only a job that has not started (a claim holding its row makes this wait, then
    -- re-check the state).
    UPDATE {{schema}}.jobs
    SET payload = p_payload,
        run_at = p_run_at,
        state = CASE WHEN p_run_at > p_now THEN 'scheduled' ELSE 'waiting' END
    WHERE id = w.job_id AND state IN ('waiting', 'scheduled');
    IF FOUND THEN
      UPDATE {{schema}}.dedup_windows SET expires_at = p_now + p_ttl_ms WHERE queue = p_queue AND key = p_key;
      IF p_run_at <= p_now THEN PERFORM pg_notify(p_channel, p_queue); END IF;
      RETURN QUERY SELECT 'replaced'::text, w.job_id;
      RETURN;
    END IF;
  END IF;

  UPDATE {{schema}}.dedup_windows SET job_id = p_job_id, expires_at = p_now + p_ttl_ms
  WHERE queue = p_queue AND key = p_key;
  RETURN QUERY SELECT 'opened'::text, p_job_id;
END
$$;
