--[[
  flow-hold: no job of the queue starts for ARGV[2] ms from now (RetryLater with pause:
  "queue"); a longer hold already in place is kept.

  KEYS[1] flow     <base>flow (see flow-set-2.lua)
  ARGV[1] now in ms, or '' for Redis TIME
  ARGV[2] hold length in ms
  Returns nothing.
]]
local untilMs = now_ms(ARGV[1]) + tonumber(ARGV[2])
local held = tonumber(redis.call('HGET', KEYS[1], 'hu') or '0')
if untilMs > held then redis.call('HSET', KEYS[1], 'hu', int(untilMs)) end
return false
