-- flow-cursor: the last lane a laned queue's claim served; the next claim starts after it.
--
-- $1 queue text    $2 lane text
UPDATE {{schema}}.flow_queues SET lane_cursor = $2 WHERE queue = $1
