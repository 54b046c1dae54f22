--[[
  read-streams: read-events for many queues in one step, on a single server (a cluster reads each
  queue's stream with read-events-1.lua: its streams live on different nodes). The same reads,
  and one reading of Redis' TIME for all of them: every script that writes an event after this
  one stamps it with a later time (or, on a stream whose last id is ahead of the clock, an id
  after that one), as for read-events (RedisEventLog in event-log.ts). One call where there was
  one per queue: an idle read of a log of hundreds of queues paid a script call per queue.
  A script holds Redis until it ends, so it stops once it has read `budget` entries: the caller
  reads the streams after the last one answered in another call. Read-only. Takes any number of
  keys (VARIADIC_KEYS in scripts.ts), at least one.

  KEYS[1..n] streams   <base>ev of each queue read
  ARGV[1] count: at most this many entries of each stream; 0 for each stream's last entry alone
  ARGV[2] budget: no stream is read once this many entries were (the first one always is)
  ARGV[3..n + 2] the first stream id to return of each stream, inclusive (not read with count 0)
  Returns { TIME seconds, TIME microseconds, { entries of KEYS[1], ..., of KEYS[m] } }, m <= n: the
  streams read, in order.
]]
local t = redis.call('TIME')
local count = tonumber(ARGV[1])
local budget = tonumber(ARGV[2])
local out = {}
local read = 0
for i = 1, #KEYS do
  if read >= budget then break end
  local entries
  if count == 0 then
    entries = redis.call('XREVRANGE', KEYS[i], '+', '-', 'COUNT', 1)
  else
    entries = redis.call('XRANGE', KEYS[i], ARGV[i + 2], '+', 'COUNT', count)
  end
  out[i] = entries
  read = read + #entries
end
return { t[1], t[2], out }
