--[[
  promote: moves due scheduled jobs (earliest first, at most ARGV[2]) into their slow lanes,
  relabelled waiting. Claims do this themselves; this is the maintenance pass that keeps stored
  states current for queues nobody claims from.

  KEYS[1] meta     <base>meta
  KEYS[2] sched    <base>sched
  ARGV[1] now in ms, or '' for Redis TIME
  ARGV[2] most jobs to move
  ARGV[3] wake-up channel, or '' for none
  ARGV[4] queue name (the wake-up message)
  Returns how many jobs moved.
]]
local base = string.sub(KEYS[1], 1, -5)
local moved = promote_due(base, KEYS[2], now_ms(ARGV[1]), tonumber(ARGV[2]))
if moved > 0 then wake(ARGV[3], ARGV[4]) end
return moved
