--[[
  schedule-upsert: creates or replaces one cron schedule of a queue (rules in src/core/schedule.ts).
  A new schedule's anchor is now. An update keeps the last fired tick, bumps the version (a firing
  computed from the old definition is then refused), and moves the anchor to now only when the
  timing (time zone and pattern) changed.

  KEYS[1] crons    <base>crons   (SET of the queue's schedule ids; each schedule is the HASH
                                   <base>cron:<id>: d definition JSON, t timing, a anchor_at,
                                   l last_tick_at (absent before the first tick), v version,
                                   c created_at, u updated_at)
  ARGV[1] now in ms, or '' for Redis TIME
  ARGV[2] schedule id
  ARGV[3] definition JSON
  ARGV[4] timing
  Returns {created (1 or 0), anchor_at, last_tick_at or '', version, created_at, updated_at}.
]]
local crons = KEYS[1]
local key = string.sub(crons, 1, -6) .. 'cron:' .. ARGV[2]
local now = int(now_ms(ARGV[1]))
local old = redis.call('HMGET', key, 't', 'a', 'l', 'v', 'c')
if not old[4] then
  redis.call('HSET', key, 'd', ARGV[3], 't', ARGV[4], 'a', now, 'v', '1', 'c', now, 'u', now)
  redis.call('SADD', crons, ARGV[2])
  return {1, now, '', '1', now, now}
end
local anchor = old[2]
if old[1] ~= ARGV[4] then anchor = now end
local version = int(tonumber(old[4]) + 1)
redis.call('HSET', key, 'd', ARGV[3], 't', ARGV[4], 'a', anchor, 'v', version, 'u', now)
return {0, anchor, old[3] or '', version, old[5], now}
