--[[
  replay: moves a dead job back to waiting with a fresh set of attempts (attempt 0, run_at now),
  counting the replay. Its payload, last error and history are kept.

  KEYS[1] meta     <base>meta
  KEYS[2] dead     <base>dead
  KEYS[3] expiry   <base>expiry
  KEYS[4] names    <base>names
  ARGV[1] now in ms, or '' for Redis TIME
  ARGV[2] job id
  ARGV[3] wake-up channel, or '' for none
  ARGV[4] queue name (the wake-up message)
  Returns 'replayed', 'not-found' or 'not-dead'.
]]
local meta, dead, expiry = KEYS[1], KEYS[2], KEYS[3]
local base = string.sub(meta, 1, -5)
local now = now_ms(ARGV[1])
local id = ARGV[2]
local key = base .. 'j:' .. id
local v = redis.call('HMGET', key, 'st', 'n', 'p', 's', 'rp')
if not v[1] then
  -- A compact job is waiting.
  if compact_get(buckets_open(base), id) then return 'not-dead' end
  return 'not-found'
end
if v[1] ~= 'd' then return 'not-dead' end
redis.call('ZREM', dead, id)
redis.call('ZREM', expiry, id)
redis.call('HSET', key, 'st', 'w', 'r', int(now), 'rp', int(num(v[5], 0) + 1))
redis.call('HDEL', key, 'a', 'sl', 'f', 'le')
log_event(base, 'replayed', v[2], id, 0, now, nil)
to_slow_lane(base, id, v[2], v[3], now, tonumber(v[4]))
redis.call('SADD', KEYS[4], v[2])
wake(ARGV[3], ARGV[4])
return 'replayed'
