--[[
  schedule-list: every cron schedule of one queue, read at one instant.

  KEYS[1] crons    <base>crons (see schedule-upsert-1.lua)
  ARGV[1] none: the script takes no arguments
  Returns a flat array, 7 values per schedule: id, definition JSON, anchor_at, last_tick_at or '',
  version, created_at, updated_at.
]]
local base = string.sub(KEYS[1], 1, -6)
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local f = redis.call('HMGET', base .. 'cron:' .. id, 'd', 'a', 'l', 'v', 'c', 'u')
  if f[1] then
    out[#out + 1] = id
    out[#out + 1] = f[1]
    out[#out + 1] = f[2]
    out[#out + 1] = f[3] or ''
    out[#out + 1] = f[4]
    out[#out + 1] = f[5]
    out[#out + 1] = f[6]
  end
end
return out
