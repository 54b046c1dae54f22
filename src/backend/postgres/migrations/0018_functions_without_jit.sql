-- 0018_functions_without_jit: the functions that turn a plan type off never JIT-compile.
--
-- `{{schema}}` is replaced by the backend's schema (quoted) before this runs.
--
-- A function that sets enable_nestloop (or enable_seqscan, enable_bitmapscan) off for its own
-- plans makes the planner add disable_cost (1e10) to every node of that type it cannot avoid, and
-- such an estimate passes each JIT threshold (jit_above_cost is 100,000 by default): a session
-- with JIT on then compiles the statement, with inlining and optimization, every time it runs.
-- record_changed_events (0017) has two nested loops it cannot avoid (its lateral calls of
-- changed_job_event and event_row), so in such a session every UPDATE of two jobs or more spent
-- 330-420 ms compiling its trigger's INSERT: a claim or a completion of 500 jobs took about 350 ms
-- where it takes 8 without (docs/performance-postgres.md, "Session 30"). Conveyor's own pools turn
-- JIT off for their sessions (pool-client.ts), but a caller's pool (PostgresBackendOptions.pool)
-- and a caller's transaction keep the server's setting. The flow functions below set plan types
-- off for the same reason; they get the same setting so that no plan they are ever given can
-- compile either. Each setting holds only while its function runs.
--
-- A later migration that redefines one of these functions (CREATE OR REPLACE FUNCTION) replaces
-- its settings with those it names: it must name `SET jit = off` again.
ALTER FUNCTION {{schema}}.record_changed_events() SET jit = off;
ALTER FUNCTION {{schema}}.flow_running(text) SET jit = off;
ALTER FUNCTION {{schema}}.flow_windows(text[], bigint[]) SET jit = off;
ALTER FUNCTION {{schema}}.flow_forget(text[], bigint[]) SET jit = off;
