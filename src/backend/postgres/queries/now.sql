-- now: the store's clock, ms since the epoch. Only sent when no test clock is injected.
SELECT {{schema}}.now_ms(NULL) AS now
