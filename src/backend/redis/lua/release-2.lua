--[[
  release: returns jobs to waiting without using an attempt (worker shutdown), each only while
  it is active under the exact lease token presented (fencing). The job keeps its run_at, so it
  goes back near the front of its slow lane.

  KEYS[1] meta     <base>meta
  KEYS[2] active   <base>active
  ARGV[1] now in ms, or '' for Redis TIME
  ARGV[2] wake-up channel, or '' for none
  ARGV[3] queue name (the wake-up message)
  ARGV[4..] pairs: job id, lease token
  Returns one integer per job, in input order: 1 applied, 0 stale.
]]
local meta, active = KEYS[1], KEYS[2]
local base = string.sub(meta, 1, -5)
local now = now_ms(ARGV[1])
local results = {}
local released = false
local leaving = {} -- running counts to release (running_note)
for i = 4, #ARGV, 2 do
  local id, token = ARGV[i], tonumber(ARGV[i + 1])
  local key = base .. 'j:' .. id
  local v = redis.call('HMGET', key, 'st', 'k', 'a', 'w', 'sa', 'h', 'n', 'p', 'r', 's', 'rc', 'gk')
  if v[1] == 'a' and num(v[2], 0) == token then
    redis.call('ZREM', active, id)
    if v[11] then running_note(leaving, v[7], v[12]) end
    redis.call('HSET', key, 'st', 'w', 'h', history_with(v[6], v[3], v[4], v[5], now, 'released', nil))
    -- The attempt did not count: attempt - 1 (0 is stored as no field at all).
    local attempt = num(v[3], 1) - 1
    log_event(base, 'released', v[7], id, attempt, now, nil)
    if attempt > 0 then redis.call('HSET', key, 'a', int(attempt)) else redis.call('HDEL', key, 'a') end
    redis.call('HDEL', key, 'le', 'sl')
    to_slow_lane(base, id, v[7], v[8], tonumber(v[9]), tonumber(v[10]))
    released = true
    results[#results + 1] = 1
  else
    results[#results + 1] = 0
  end
end
running_release(base, leaving)
if released then wake(ARGV[2], ARGV[3]) end
return results
