-- flow-queues: every queue with a flow row (the backend caches it to route claims).
SELECT queue FROM {{schema}}.flow_queues
