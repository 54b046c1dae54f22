--[[
  mark-buffered: records that leases are held unstarted in a worker's prefetch buffer, or have
  started since, so rescue does not count an expiry while buffered as a stall. Field xt
  (excused token) holds the lease token under which an expiry must not be blamed; compared
  with k, so a new claim starts unexcused without a write. Fenced: a lease no longer held is
  skipped.

  KEYS[1] meta     <base>meta
  ARGV[1] '1' buffered, '0' started
  ARGV[2..] pairs: job id, lease token
  Returns 0.
]]
local base = string.sub(KEYS[1], 1, -5)
local buffered = ARGV[1] == '1'
for i = 2, #ARGV, 2 do
  local key = base .. 'j:' .. ARGV[i]
  local v = redis.call('HMGET', key, 'st', 'k')
  if v[1] == 'a' and num(v[2], 0) == tonumber(ARGV[i + 1]) then
    if buffered then redis.call('HSET', key, 'xt', v[2]) else redis.call('HDEL', key, 'xt') end
  end
end
return 0
