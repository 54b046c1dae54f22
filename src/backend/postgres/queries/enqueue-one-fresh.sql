-- enqueue-one-fresh: enqueue-fresh.sql for one job (a single `add` of a producer-made id, without
-- a group or limiter key, outside a caller's transaction).
--
-- Not a file of its own SQL: backend.ts builds it from enqueue-fresh.sql (same parameters in the
-- same places, same answer), with each array parameter, which holds one element here, passed as
-- that element: `unnest(…)` of the job's columns becomes a one-row `VALUES`, `cardinality(…)` 1,
-- and every other `$n::type[]` a `$n::type`. The server then parses no array literals (twenty of
-- them per add: its CPU per single add went from 250 to 230 µs, docs/performance-postgres.md,
-- "Session 18"), and the client builds none.
{{enqueue}}
