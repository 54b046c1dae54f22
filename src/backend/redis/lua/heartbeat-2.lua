--[[
  heartbeat: extends every lease in the batch that is still held to now + leaseMs, and reports
  the ones that are not, with why.

  KEYS[1] meta     <base>meta
  KEYS[2] active   <base>active
  ARGV[1] now in ms, or '' for Redis TIME
  ARGV[2] lease length in ms
  ARGV[3..] pairs: job id, lease token
  Returns the lost leases as a flat array { position (1-based), reason, ... } where reason is
  'gone' (no such job), 'cancelled' (cancelled while held under this very token) or 'expired'
  (rescued, finished or claimed again since).
]]
local meta, active = KEYS[1], KEYS[2]
local base = string.sub(meta, 1, -5)
local now = now_ms(ARGV[1])
local expires = int(now + tonumber(ARGV[2]))
local lost = {}
local extended = {}
for i = 3, #ARGV, 2 do
  local id, token = ARGV[i], tonumber(ARGV[i + 1])
  local key = base .. 'j:' .. id
  local v = redis.call('HMGET', key, 'st', 'k')
  local position = (i - 1) / 2
  if v[1] == 'a' and num(v[2], 0) == token then
    redis.call('HSET', key, 'le', expires)
    extended[#extended + 1] = expires
    extended[#extended + 1] = id
  else
    local reason = 'expired'
    -- A compact job is waiting (never claimed): it exists, so a lease on it has expired.
    if not v[1] and not compact_get(buckets_open(base), id) then
      reason = 'gone'
    elseif v[1] == 'x' and num(v[2], 0) == token then
      reason = 'cancelled'
    end
    lost[#lost + 1] = position
    lost[#lost + 1] = reason
  end
end
if #extended > 0 then call_chunked('ZADD', active, extended, 2) end
return lost
