--[[
  Helpers shared by every Conveyor script. scripts.ts prepends this file to each script before
  loading it, so a script's SHA covers exactly the helpers it runs with.

  Key layout and job hash fields: see keys.ts. In short, `base` is "<prefix>:{<queue>}:" and every
  key a script touches starts with it, so one script never leaves one cluster slot.

  Numbers: Redis hands hash fields to Lua as strings and Lua numbers are doubles, exact for the
  integers used here (times in ms, counters). Numbers go back to Redis through int(), never
  tostring(), which would switch to exponent notation past 14 digits.
]]

-- Score offset of finished jobs kept forever (retention null): they sort after every job with a
-- retention, so count pruning can take "the oldest finite ones" by score range alone.
local KEPT = 1125899906842624 -- 2^50; finished_at + KEPT stays below 2^53

-- Most ids handed to one variadic command: Lua's unpack() fails somewhere below 8000 values.
local CHUNK = 1000

local function int(n)
  return string.format('%d', n)
end

-- Store time in ms: the injected clock's (ARGV) when given, otherwise Redis' own.
local function now_ms(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A hash field read with HMGET (a string, or false when missing) as a number.
local function num(value, default)
  if value then return tonumber(value) end
  return default
end

-- Calls a variadic command with a long argument list in slices unpack() can take.
-- `args` holds whole groups of `group` values (e.g. score/member pairs).
local function call_chunked(command, key, args, group)
  local step = CHUNK * group
  for i = 1, #args, step do
    redis.call(command, key, unpack(args, i, math.min(i + step - 1, #args)))
  end
end

-- Member of a slow lane: fixed-width run_at and seq, so that within one priority (the score)
-- the zset's own member order is run_at, then insertion order.
local function lane_member(run_at, seq, id)
  return string.format('%013d%012d', run_at, seq) .. id
end

-- The options field "maxAttempts|retainCompletedMs|retainDeadMs|timeoutMs|backoff".
-- An empty retention means "keep until removed by hand" and comes back as nil.
local function parse_options(o)
  local m, kc, kd = string.match(o, '^(%d+)|(%d*)|(%d*)|')
  return tonumber(m), tonumber(kc), tonumber(kd)
end

-- The job's history (a JSON array kept as text) with one more attempt record appended. The
-- text is spliced, never decoded: a long history of stack traces costs no parsing.
-- Record fields: a attempt, w worker JSON, s started_at, f finished_at, o outcome, e error JSON.
local function history_with(history, attempt, worker, started_at, now, outcome, err)
  local record = '{"a":' .. (attempt or '0') .. ',"w":' .. (worker or 'null') .. ',"s":' .. (started_at or 'null') ..
    ',"f":' .. int(now) .. ',"o":"' .. outcome .. '","e":' .. (err or 'null') .. '}'
  if not history or history == '' then return '[' .. record .. ']' end
  return string.sub(history, 1, -2) .. ',' .. record .. ']'
end

-- Puts a waiting job into the slow lane of its name.
local function to_slow_lane(base, id, name, priority, run_at, seq)
  redis.call('ZADD', base .. 'z:' .. name, priority, lane_member(run_at, seq, id))
end

-- Records a finished job in its state's set (by finished_at) and, when it has a retention
-- deadline, in the expiry set the pruner reads. deadline nil = kept until removed by hand.
-- With `batch` (a table { set = {score, member, ...}, expiry = {...} }) the members are collected
-- for one variadic ZADD per set at the end of the script (flush_finished) instead of added now.
local function add_finished(base, set, id, finished_at, deadline, batch)
  local score = deadline and int(finished_at) or int(finished_at + KEPT)
  if batch then
    local s = batch[set]
    s[#s + 1] = score
    s[#s + 1] = id
    if deadline then
      batch.expiry[#batch.expiry + 1] = int(deadline)
      batch.expiry[#batch.expiry + 1] = id
    end
    return
  end
  redis.call('ZADD', base .. set, score, id)
  if deadline then redis.call('ZADD', base .. 'expiry', int(deadline), id) end
end

local function flush_finished(base, batch)
  for set, args in pairs(batch) do
    if #args > 0 then call_chunked('ZADD', base .. set, args, 2) end
  end
end

-- Deletes a job that is in no lane: its hash and every index entry. `set` is the finished or
-- active set it is in, or nil.
local function delete_job(base, id, set)
  redis.call('DEL', base .. 'j:' .. id)
  redis.call('ZREM', base .. 'idx', id)
  redis.call('ZREM', base .. 'expiry', id)
  if set then redis.call('ZREM', base .. set, id) end
end

-- Moves due scheduled jobs (earliest first, at most `max`) into their slow lanes, relabelled
-- waiting. Returns how many moved.
local function promote_due(base, sched, now, max)
  local due = redis.call('ZRANGEBYSCORE', sched, '-inf', int(now), 'LIMIT', 0, max)
  for _, id in ipairs(due) do
    local key = base .. 'j:' .. id
    local v = redis.call('HMGET', key, 'n', 'p', 'r', 's')
    if v[1] then
      to_slow_lane(base, id, v[1], v[2], tonumber(v[3]), tonumber(v[4]))
      redis.call('HSET', key, 'st', 'w')
    end
  end
  if #due > 0 then call_chunked('ZREM', sched, due, 1) end
  return #due
end

-- Tells subscribed workers that `queue` has claimable jobs (channel '' = wake-ups disabled).
local function wake(channel, queue)
  if channel ~= '' then redis.call('PUBLISH', channel, queue) end
end
