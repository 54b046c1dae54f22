-- heartbeat: extends one lease, fenced by its token.
--
-- ?1 lease_expires_at ms    ?2 job id text    ?3 lease token integer
--
-- Changes one row when the lease was still held, none otherwise (lease-state.sql tells why).
UPDATE {{prefix}}jobs SET lease_expires_at = ? WHERE id = ? AND lease_token = ? AND state = 'active'
