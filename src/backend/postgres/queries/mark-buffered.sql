-- mark-buffered: records that leases are held unstarted in a worker's prefetch buffer ($3 true),
-- or have started since ($3 false), so rescue.sql does not count an expiry while buffered as a
-- stall (the stall_blame migration). Fenced: a lease no longer held is skipped.
--
-- $1 job ids text[]    $2 lease tokens bigint[]    $3 buffered boolean
--
-- excused_token is in no index, so each mark is a HOT update. The state is compared through an
-- InitPlan for the reason given in heartbeat.sql.
UPDATE {{schema}}.jobs AS j
SET excused_token = CASE WHEN $3::boolean THEN j.lease_token END
FROM unnest($1::text[], $2::bigint[]) AS i(id, token)
WHERE j.id = i.id AND j.lease_token = i.token AND j.state = (SELECT 'active'::text)
