--[[
  schedule-remove: deletes one cron schedule of a queue. Jobs it already enqueued stay.

  KEYS[1] crons    <base>crons (see schedule-upsert-1.lua)
  ARGV[1] schedule id
  Returns 1 when a schedule was deleted, 0 when there was none.
]]
local key = string.sub(KEYS[1], 1, -6) .. 'cron:' .. ARGV[1]
redis.call('SREM', KEYS[1], ARGV[1])
return redis.call('DEL', key)
