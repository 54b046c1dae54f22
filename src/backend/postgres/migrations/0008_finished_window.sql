-- 0008_finished_window: the finished jobs of a queue by finish time (Backend.finishedWindow, the
-- dashboard's fleet-wide charts).
--
-- `{{schema}}` is replaced by the backend's schema (quoted) before this runs.
--
-- jobs_done and jobs_dead hold only rows with a retention deadline, and jobs_done mixes
-- completed with cancelled; this one holds every completed or dead row, per queue and state, in
-- finish order, so a window is one index range and its counts never touch the heap of a
-- freshly vacuumed table. Cancelled rows stay out: the charts do not show them.
CREATE INDEX jobs_finished_at ON {{schema}}.jobs (queue, state, finished_at)
  WHERE state IN ('completed', 'dead');

-- A queue's waiting jobs newest first, a page at a time (list with state "waiting" and a
-- cursor, list-waiting.sql): without it a page sorted the whole backlog. Partial, so it is as
-- small as the backlog; it costs one index entry per enqueue (a claimed row leaves it).
CREATE INDEX jobs_waiting_seq ON {{schema}}.jobs (queue, seq) WHERE state = 'waiting';
