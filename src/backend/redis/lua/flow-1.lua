--[[
  flow: stores a whole flow (queue.addFlow) atomically, every job as a hash of its own: a parent
  in 'wc' (waiting for its children; in <base>wc), any other job in its slow lane when due, else
  in the scheduled set. Nothing is written when any job's id exists already. See the Flows section
  of _common.lua for the fields that link parents and children. The jobs may be in several queues
  (keys of several slots): only on a single Redis server; on a cluster the backend refuses a flow
  that leaves its root's queue.

  KEYS[1] meta of the root's queue (<base>meta), for routing
  KEYS[2] (optional) attempt key <base>added:<token> in the root's queue, when the connection may
          send this call twice: a second run answers the first one's reply (attempt_replay in _common.lua)
  ARGV[1] now in ms, or '' for Redis TIME
  ARGV[2..] 14 values per job, parents before their children: key base ("<prefix>:{<queue>}:"),
            queue, id, name, payload JSON, priority, run_at ms or '' (then now + delay), delay ms,
            options, meta JSON or '', number of children, policy ('fail' | 'continue'), position
            of its parent among the jobs (from 1), or 0 for the root, flow fields or '' (as in
            enqueue-4.lua: the job's group and limiter key)
  Returns one integer per job, in input order: 0 stored (or, when any was a duplicate, would have
  been), 1 duplicate.
]]
local attempt = KEYS[2]
local replayed = attempt_replay(attempt)
if replayed then return replayed end
local now = now_ms(ARGV[1])
local N, FIRST = 14, 2
local count = (#ARGV - 1) / N

local flags, any, tables = {}, false, {}
for i = 0, count - 1 do
  local a = FIRST + i * N
  local base, id = ARGV[a], ARGV[a + 2]
  local t = tables[base]
  if not t then
    t = buckets_open(base)
    tables[base] = t
  end
  local dup = compact_get(t, id) or redis.call('EXISTS', base .. 'j:' .. id) == 1
  flags[i + 1] = dup and 1 or 0
  any = any or dup
end
if any then return flags end

local nowText = int(now)
local woken, later = {}, {}
for i = 0, count - 1 do
  local a = FIRST + i * N
  local base, queue, id, name, payload, priority = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]
  local children, parent = tonumber(ARGV[a + 10]), tonumber(ARGV[a + 12])
  local key = base .. 'j:' .. id
  local seq = redis.call('HINCRBY', base .. 'meta', 'seq', 1)
  local runAt = ARGV[a + 6] ~= '' and tonumber(ARGV[a + 6]) or now + tonumber(ARGV[a + 7])
  local state = children > 0 and 'wc' or (runAt > now and 's' or 'w')
  redis.call('HSET', key, 'n', name, 'd', payload, 'p', priority, 'r', int(runAt), 'c', nowText, 's', int(seq),
    'o', ARGV[a + 8], 'st', state)
  if ARGV[a + 9] ~= '' then redis.call('HSET', key, 'm', ARGV[a + 9]) end
  if ARGV[a + 13] ~= '' then
    -- Before to_slow_lane below, which reads the job's lane from its hash.
    redis.call('HSET', key, unpack(cjson.decode(ARGV[a + 13])))
    redis.call('HSET', base .. 'flow', 'ln', '1')
  end
  if children > 0 then
    redis.call('HSET', key, 'pc', int(children), 'pf', ARGV[a + 11])
    redis.call('ZADD', base .. 'wc', seq, id)
  end
  if parent > 0 then
    local pa = FIRST + (parent - 1) * N
    local pbase, pqueue, pid = ARGV[pa], ARGV[pa + 1], ARGV[pa + 2]
    redis.call('HSET', key, 'pi', pid, 'pq', pqueue, 'pb', pbase, 'pp', int(i))
    redis.call('HSET', pbase .. 'fc:' .. pid, int(i), queue .. '\n' .. id .. '\n' .. name)
  end
  redis.call('ZADD', base .. 'idx', seq, id)
  redis.call('SADD', base .. 'names', name)
  log_event(base, 'added', name, id, 0, now, added_details(state, runAt, tonumber(priority), now))
  if state == 'w' then
    to_slow_lane(base, id, name, priority, runAt, seq)
    woken[queue] = base
  elseif state == 's' then
    redis.call('ZADD', base .. 'sched', int(runAt), id)
    ready_mark(base, runAt)
    if not later[queue] or runAt < later[queue][2] then later[queue] = { base, runAt } end
  end
end
for queue, base in pairs(woken) do wake(channel_of(base), queue) end
for queue, at in pairs(later) do wake(channel_of(at[1]), queue .. ' ' .. int(at[2] - now)) end
return attempt_keep(attempt, flags)
