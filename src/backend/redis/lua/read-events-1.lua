--[[
  read-events: a page of one queue's event log (the stream <base>ev, see log_event in
  _common.lua) and Redis' time when it was read, in one step. Every script that writes an event
  after this one stamps it with a later time (or, on a stream whose last id is ahead of the
  clock, an id after that one), so a reader knows which part of the stream can no longer change
  (RedisEventLog in event-log.ts). Read-only.

  KEYS[1] stream   <base>ev
  ARGV[1] first stream id to return (inclusive)
  ARGV[2] count: at most this many entries; 0 for the stream's last entry alone
  Returns { TIME seconds, TIME microseconds, entries }.
]]
local t = redis.call('TIME')
local count = tonumber(ARGV[2])
local entries
if count == 0 then
  entries = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
else
  entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', count)
end
return { t[1], t[2], entries }
