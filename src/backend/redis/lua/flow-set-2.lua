--[[
  flow-set: sets one queue's flow limits (src/core/flow.ts), or removes them, and wakes the
  queue's workers (claims that found nothing under the old limits may under the new ones).

  KEYS[1] flow     <base>flow   HASH rm rate max, rd rate window ms, mr max running,
                                pn per-name caps (JSON object), hu held until ms, rs start counter,
                                ln 1 once the queue had keyed jobs, lc lane cursor (claim-4.lua)
                                rn starts in the rate window (claim-4.lua, trim_window),
                                rc 1 while running counts are kept in <base>run (running_note)
  KEYS[2] rate     <base>rate   ZSET the rate window: one member per claim, "<counter>:<starts>",
                                scored by its time
  ARGV[1] rate max, or '' for none      ARGV[2] rate window ms, or ''
  ARGV[3] max running, or ''            ARGV[4] per-name caps as JSON ('{}' for none)
  ARGV[5] wake-up channel, or ''        ARGV[6] queue name (the wake-up message)
  Returns nothing.
]]
local flow, rate = KEYS[1], KEYS[2]
local function set(field, value)
  if value == '' then redis.call('HDEL', flow, field) else redis.call('HSET', flow, field, value) end
end
set('rm', ARGV[1])
set('rd', ARGV[2])
set('mr', ARGV[3])
set('pn', ARGV[4] ~= '{}' and ARGV[4] or '')
-- A rate window outlives no rate limit.
if ARGV[1] == '' then
  redis.call('DEL', rate)
  redis.call('HDEL', flow, 'rn')
end
-- Running counts (running_note in _common.lua) are kept while a per-name cap or keyed jobs need
-- them; without either they stop here, with the counts, and the next claim that needs them counts
-- the active jobs again.
if ARGV[4] == '{}' and redis.call('HEXISTS', flow, 'ln') == 0 then
  redis.call('HDEL', flow, 'rc')
  redis.call('DEL', string.sub(flow, 1, -5) .. 'run')
end
-- Nothing left but the start counter: the queue is claimed the plain way again. A queue that
-- has had jobs with a group or limiter key (ln, lane cursor lc) keeps taking turns across lanes.
if redis.call('HEXISTS', flow, 'hu') == 0 and redis.call('HEXISTS', flow, 'ln') == 0 and ARGV[1] == '' and ARGV[3] == '' and ARGV[4] == '{}' then
  redis.call('DEL', flow)
end
wake(ARGV[5], ARGV[6])
return false
