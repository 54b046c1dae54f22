--[[
  once: records an idempotency key on the injected clock (only used when the backend has one;
  on Redis' own clock the backend uses a plain SET NX PX instead). The key stores its deadline
  on that clock, not as a Redis TTL (which runs on real time and would disagree with a test's
  fake clock); an index by deadline lets prune delete and count the expired ones.

  KEYS[1] key      {<prefix>:idem}:k:<key>
  KEYS[2] index    {<prefix>:idem}:exp
  ARGV[1] now in ms (the injected clock)
  ARGV[2] ttl in ms
  Returns 1 when recorded now (go ahead), 0 when already recorded and not yet expired.
]]
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local deadline = num(redis.call('GET', KEYS[1]), nil)
if deadline and deadline > now then return 0 end
redis.call('SET', KEYS[1], int(now + ttl))
redis.call('ZADD', KEYS[2], int(now + ttl), KEYS[1])
return 1
