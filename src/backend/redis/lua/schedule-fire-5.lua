--[[
  schedule-fire: fires one cron schedule: the compare-and-set of its last tick and the enqueue of
  the tick's jobs, in one script. Applies only while the schedule still has the version and the
  last tick the firing was computed from, and the new tick is later; otherwise writes nothing.
  The enqueue is enqueue-4.lua itself, included below as a function, so a fired job is stored
  exactly as an added one.

  KEYS[1] meta     <base>meta      KEYS[2] sched   <base>sched
  KEYS[3] idx      <base>idx       KEYS[4] names   <base>names      (as enqueue-4.lua)
  KEYS[5] crons    <base>crons     (see schedule-upsert-1.lua)
  ARGV[1] schedule id
  ARGV[2] version the firing was computed from
  ARGV[3] last_tick_at it was computed from, or '' for none yet
  ARGV[4] the new last_tick_at (ms)
  ARGV[5..] the arguments of enqueue-4.lua (now, channel, queue, all-or-nothing, dedup windows, 10 per job);
            none when the firing enqueues no job
  Returns {0} when refused; {1, then enqueue-4.lua's answer per job (0 inserted, 1 duplicate)}.
]]
--#include enqueue-4.lua as enqueue_jobs
local key = string.sub(KEYS[5], 1, -6) .. 'cron:' .. ARGV[1]
local current = redis.call('HMGET', key, 'v', 'l')
if current[1] ~= ARGV[2] then return {0} end
local last = current[2] or ''
if last ~= ARGV[3] then return {0} end
local tick = ARGV[4]
if last ~= '' and tonumber(last) >= tonumber(tick) then return {0} end
for _ = 1, 4 do table.remove(ARGV, 1) end
-- The included enqueue reads a fifth key as its attempt key (enqueue-4.lua): a firing has none.
table.remove(KEYS, 5)
local answer = {1}
if #ARGV > 0 then
  for _, flag in ipairs(enqueue_jobs()) do answer[#answer + 1] = flag end
end
redis.call('HSET', key, 'l', tick)
return answer
