--[[
  stats: one queue's counts per state and the age of its longest-waiting job, from one snapshot.
  Read-only. A scheduled job whose run_at has passed counts as waiting.

  KEYS[1] meta       <base>meta
  KEYS[2] sched      <base>sched
  KEYS[3] active     <base>active
  KEYS[4] completed  <base>completed
  KEYS[5] cancelled  <base>cancelled
  KEYS[6] dead       <base>dead
  KEYS[7] names      <base>names
  ARGV[1] now in ms, or '' for Redis TIME
  Returns { paused (0/1), waiting, scheduled, active, completed, cancelled, dead,
  oldest waiting run_at or false, now, waiting-children }.
]]
local meta, sched = KEYS[1], KEYS[2]
local base = string.sub(meta, 1, -5)
local now = now_ms(ARGV[1])
local waiting = 0
local oldest = nil
local function seen(runAt)
  if runAt and (not oldest or runAt < oldest) then oldest = runAt end
end

-- Most priority levels visited per slow lane for the oldest run_at; a lane with more levels
-- than this reports the oldest among its first ones.
local MAX_LEVELS = 100
local buckets = buckets_open(base)

for _, name in ipairs(redis.call('SMEMBERS', KEYS[7])) do
  local fastKey = base .. 'f:' .. name
  local n = redis.call('LLEN', fastKey)
  if n > 0 then
    waiting = waiting + n
    -- A fast lane is sorted by run_at: its head is its oldest job.
    local head = redis.call('LINDEX', fastKey, 0)
    -- The lane's entry is the id's stored form, the same as its bucket field (id_store).
    local packed = compact_get(buckets, head, head)
    if packed then
      seen(tonumber(compact_fields(buckets, packed, head)[8]))
    else
      seen(num(redis.call('HGET', base .. 'j:' .. id_text(head), 'r'), nil))
    end
  end
  local slowKey = base .. 'z:' .. name
  n = redis.call('ZCARD', slowKey)
  if n > 0 then
    waiting = waiting + n
    -- Within one priority the first member has the earliest run_at: visit each level's first.
    local level = redis.call('ZRANGE', slowKey, 0, 0, 'WITHSCORES')
    local visited = 0
    while level[1] and visited < MAX_LEVELS do
      seen(tonumber(string.sub(level[1], 1, 13)))
      visited = visited + 1
      level = redis.call('ZRANGEBYSCORE', slowKey, '(' .. level[2], '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    end
  end
end

-- Jobs with a group or limiter key wait in lanes of their own (flow control): one per lane of the
-- name; a lane left empty is still listed until a claim visits it.
for _, name in ipairs(redis.call('SMEMBERS', KEYS[7])) do
  for _, lane in ipairs(redis.call('ZRANGE', base .. 'ls:' .. name, 0, -1)) do
    local laneKey = base .. 'L:' .. name .. '\n' .. lane
    local n = redis.call('ZCARD', laneKey)
    if n > 0 then
      waiting = waiting + n
      seen(tonumber(string.sub(redis.call('ZRANGE', laneKey, 0, 0)[1], 1, 13)))
    end
  end
end

local due = redis.call('ZCOUNT', sched, '-inf', int(now))
if due > 0 then
  waiting = waiting + due
  seen(tonumber(redis.call('ZRANGE', sched, 0, 0, 'WITHSCORES')[2]))
end
return {
  redis.call('HEXISTS', meta, 'paused'),
  waiting,
  redis.call('ZCARD', sched) - due,
  redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]),
  redis.call('ZCARD', KEYS[5]),
  redis.call('ZCARD', KEYS[6]),
  oldest and int(oldest) or false,
  int(now),
  redis.call('ZCARD', base .. 'wc'),
}
