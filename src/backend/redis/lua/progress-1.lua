--[[
  progress: stores the latest progress report of a running job, only while it is active under
  the exact lease token presented (fencing).

  KEYS[1] job      <base>j:<id>
  ARGV[1] lease token
  ARGV[2] progress JSON
  Returns 1 applied, 0 stale.
]]
local v = redis.call('HMGET', KEYS[1], 'st', 'k')
if v[1] == 'a' and num(v[2], 0) == tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'pg', ARGV[2])
  return 1
end
return 0
