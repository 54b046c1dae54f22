--[[
  pause: pauses or resumes one queue. A paused queue's jobs stay waiting and counted; claims
  take nothing from it. Resuming wakes subscribed workers.

  KEYS[1] meta     <base>meta
  ARGV[1] '1' to pause, '0' to resume
  ARGV[2] wake-up channel, or '' for none
  ARGV[3] queue name (the wake-up message)
  Returns nothing.
]]
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'paused', '1')
else
  redis.call('HDEL', KEYS[1], 'paused')
  -- A claim that met the queue paused took it out of the ready index.
  ready_mark(string.sub(KEYS[1], 1, -5), 0)
  wake(ARGV[2], ARGV[3])
end
return false
