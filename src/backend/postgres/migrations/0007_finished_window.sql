-- 0007_finished_window: the finished jobs of a queue by finish time (Backend.finishedWindow, the
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
