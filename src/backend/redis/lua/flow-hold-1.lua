--[[
  flow-hold: no job of the queue starts for ARGV[2] ms from now (RetryLater with pause:
  "queue"); a longer hold already in place is kept. With ARGV[3], a job id: only jobs with that
  job's limiter key wait (pause: "key"); a job without one holds nothing.

  KEYS[1] flow     <base>flow (see flow-set-2.lua)
  ARGV[1] now in ms, or '' for Redis TIME
  ARGV[2] hold length in ms
  ARGV[3] job id whose limiter key to hold, or absent / '' to hold the queue
  Returns 1 when something is held, 0 when the job has no limiter key.
]]
local now = now_ms(ARGV[1])
local untilMs = now + tonumber(ARGV[2])
if ARGV[3] and ARGV[3] ~= '' then
  local base = string.sub(KEYS[1], 1, -5)
  local limiterKey = redis.call('HGET', base .. 'j:' .. ARGV[3], 'lk')
  if not limiterKey then return 0 end
  -- kh:<key> holds the time the hold ends (the claim compares it with its clock); it expires a
  -- minute after that, so held keys of idle tenants do not pile up.
  local holdKey = base .. 'kh:' .. limiterKey
  local held = tonumber(redis.call('GET', holdKey) or '0')
  if untilMs > held then redis.call('SET', holdKey, int(untilMs), 'PX', int(untilMs - now + 60000)) end
  return 1
end
local held = tonumber(redis.call('HGET', KEYS[1], 'hu') or '0')
if untilMs > held then redis.call('HSET', KEYS[1], 'hu', int(untilMs)) end
return 1
