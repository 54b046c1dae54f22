--[[
  queues-at: every queue name of the prefix (the registry set) and Redis' time when it was read,
  in one step. A queue is registered before its first event is written, so a queue missing from
  this answer has no event stamped before this time (RedisEventLog in event-log.ts). Read-only.

  KEYS[1] registry   <prefix>:queues
  ARGV[1] none: the script takes no arguments
  Returns { TIME seconds, TIME microseconds, names }.
]]
local t = redis.call('TIME')
return { t[1], t[2], redis.call('SMEMBERS', KEYS[1]) }
