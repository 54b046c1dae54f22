--[[
  enqueue: inserts a batch of jobs into one queue, atomically. A job whose id already exists in
  the queue (in any state) is a duplicate and nothing is written for it.

  Where a new job goes:
  - due now, priority 0, and run_at not before the fast-lane watermark: appended to the fast
    lane of its name (a LIST: the cheapest structure, ~25 bytes per job). The watermark is the
    latest run_at ever appended to a fast lane of this queue, so every fast lane stays sorted by
    (run_at, seq) and claim order can read it front to back. Such a job is stored compactly, as
    one field of a bucket hash (see compact_add in _common.lua), unless it carries meta or does
    not fit; then, like every other job, it gets a hash of its own (j:<id>);
  - due now otherwise (a priority, or an explicit run_at in the past): its slow lane (ZSET);
  - not due yet: the scheduled set, by run_at; claim promotes it once due.

  KEYS[1] meta     <base>meta
  KEYS[2] sched    <base>sched
  KEYS[3] idx      <base>idx
  KEYS[4] names    <base>names
  KEYS[5] (optional) attempt key <base>added:<token>, when the connection may send this call twice:
          a second run answers the first one's reply (attempt_replay in _common.lua)
  ARGV[1] now in ms, or '' for Redis TIME
  ARGV[2] wake-up channel, or '' for none
  ARGV[3] queue name (the wake-up message: "<queue>" when jobs are claimable now, and
          "<queue> <ms>" when the earliest new scheduled job comes due in <ms>)
  ARGV[4] '1': all or nothing (when any job is a duplicate, nothing is written); '' otherwise
  ARGV[5] D, the number of jobs with a dedup window (never with all or nothing), followed by 4
          values for each: the job's position among the jobs (from 1), dedup key, ttl ms, mode
  ARGV[6 + 4D..] 10 values per job: id, name, payload JSON, priority, run_at ms or '' (then
            now + delay), delay ms, options ("maxAttempts|retainCompleted|retainDead|timeout|backoff"),
            meta JSON or '' for none, flow fields or '' for none (a JSON array of hash fields and
            values: ln lane, gk/gc group key and concurrency, lk/lm/ld limiter key, max and window
            ms; such a job waits in its lane's slow lane, never compact, and its queue's flow hash
            gets ln = 1: its claims take turns across lanes, see claim-4.lua), and the id's stored
            form (id_store in _common.lua: made by the caller, Redis spends ~3 µs on it in Lua)
  Returns one value per job, in input order: 0 inserted (or, all or nothing, would have been),
  1 duplicate, or "<dropped|extended|replaced> <id>" for a job an open dedup window took in.
]]
local meta, sched, idx, names = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local attempt = KEYS[5]
local replayed = attempt_replay(attempt)
if replayed then return replayed end
local base = string.sub(meta, 1, -5)
local now = now_ms(ARGV[1])
local windows = tonumber(ARGV[5])
local FIRST = 6 + windows * 4
local count = (#ARGV - FIRST + 1) / 10
local taken, replacedDue = {}, false
if windows > 0 then
  taken, replacedDue = dedup_decide(base, now, ARGV, 6, FIRST - 1, function(pos)
    local a = FIRST + (pos - 1) * 10
    return ARGV[a], ARGV[a + 2], ARGV[a + 4], ARGV[a + 5]
  end)
end

if ARGV[4] == '1' then
  -- Read-only pass first: an id that exists, or repeats an earlier one of the batch, is a duplicate.
  local table0 = buckets_open(base)
  local seen, flags, any = {}, {}, false
  for i = 0, count - 1 do
    local a = FIRST + i * 10
    local id = ARGV[a]
    local dup = seen[id] or compact_get(table0, id, ARGV[a + 9]) or redis.call('EXISTS', base .. 'j:' .. id) == 1
    seen[id] = true
    flags[i + 1] = dup and 1 or 0
    any = any or dup
  end
  if any then return flags end
end

-- The queue's counters in one read, written back in one HSET at the end (a single add is a
-- dozen commands; each one saved is a measurable share of it): seq (insertion order, one per
-- stored job), fw (the fast-lane watermark) and the bucket table (wb, wn, do, wl, lv: buckets_open);
-- rx, the queue's mark in the ready index (ready_mark in _common.lua: nothing to write when marked).
local counters = redis.call('HMGET', meta, 'seq', 'fw', 'wb', 'wn', 'do', 'rx', 'wl', 'lv')
ready_known(base, counters[6])
local seq = num(counters[1], 0)
local startSeq = seq
local watermark = num(counters[2], 0)
local startWatermark = watermark
local nowText = int(now)
local fast = {}      -- name -> ids to append to its fast lane, in order
local fastNames = {}
local newNames = {}
local schedArgs, idxArgs = {}, {}
local buckets = buckets_from(base, counters[3], counters[4], counters[5], counters[7], counters[8])
local result = {}
local due = false
local firstRunAt = nil -- earliest run_at among the new scheduled jobs

local laned = false
for i = 0, count - 1 do
  local a = FIRST + i * 10
  local id, name = ARGV[a], ARGV[a + 1]
  -- Flow control: a job with a group or limiter key (its hash fields), else nil.
  local flowFields = ARGV[a + 8] ~= '' and cjson.decode(ARGV[a + 8]) or nil
  local lane = false
  if flowFields then
    for j = 1, #flowFields, 2 do
      if flowFields[j] == 'ln' then lane = flowFields[j + 1] end
    end
  end
  local key = base .. 'j:' .. id
  -- Its fast lane entry, bucket field and "added" event entry hold its stored form (id_store).
  local sid = ARGV[a + 9]
  local packed, bucket = compact_get(buckets, id, sid)
  if taken[i + 1] then
    result[i + 1] = taken[i + 1]
  elseif packed or redis.call('EXISTS', key) == 1 then
    result[i + 1] = 1
  else
    result[i + 1] = 0
    seq = seq + 1
    local priority = tonumber(ARGV[a + 3])
    local runAt = ARGV[a + 4] ~= '' and tonumber(ARGV[a + 4]) or now + tonumber(ARGV[a + 5])
    local state = 'w'
    local compact = false
    if runAt > now then
      state = 's'
      if not firstRunAt or runAt < firstRunAt then firstRunAt = runAt end
      schedArgs[#schedArgs + 1] = int(runAt)
      schedArgs[#schedArgs + 1] = id
      idxArgs[#idxArgs + 1] = seq
      idxArgs[#idxArgs + 1] = id
    else
      due = true
      if not lane and priority == 0 and runAt >= watermark then
        watermark = runAt
        local lane = fast[name]
        if not lane then
          lane = {}
          fast[name] = lane
          fastNames[#fastNames + 1] = name
        end
        lane[#lane + 1] = sid
        if ARGV[a + 7] == '' then
          local options = ARGV[a + 6]
          if buckets.options ~= options and (not buckets.options or buckets.count == 0) then
            -- The queue's default options (stored once, left out of records that share them):
            -- those of the first compact job while no compact job exists, so a queue whose first
            -- job was unusual takes its common options up again once that job has left.
            buckets.options = options
            redis.call('HSET', meta, 'do', options)
          end
          compact = compact_add(buckets, sid, compact_pack(buckets, seq, now, runAt, options, name, ARGV[a + 2], sid), bucket)
        end
      else
        to_slow_lane(base, id, name, priority, runAt, seq, lane)
        idxArgs[#idxArgs + 1] = seq
        idxArgs[#idxArgs + 1] = id
      end
    end
    if not compact then
      redis.call('HSET', key, 'n', name, 'd', ARGV[a + 2], 'p', ARGV[a + 3], 'r', int(runAt), 'c', nowText,
        's', int(seq), 'o', ARGV[a + 6], 'st', state)
      if ARGV[a + 7] ~= '' then redis.call('HSET', key, 'm', ARGV[a + 7]) end
      if flowFields then
        redis.call('HSET', key, unpack(flowFields))
        laned = true
      end
    end
    newNames[name] = true
    log_event(base, 'added', name, sid, 0, now, added_details(state, runAt, priority, now))
  end
end

for _, name in ipairs(fastNames) do call_chunked('RPUSH', base .. 'f:' .. name, fast[name], 1) end
if #fastNames > 0 then ready_mark(base, 0) end
if #schedArgs > 0 then call_chunked('ZADD', sched, schedArgs, 2) end
if firstRunAt then ready_mark(base, firstRunAt) end
if #idxArgs > 0 then call_chunked('ZADD', idx, idxArgs, 2) end
if laned then redis.call('HSET', base .. 'flow', 'ln', '1') end
-- buckets_close, the watermark and seq in one write.
local changed = {}
if seq ~= startSeq then changed[#changed + 1], changed[#changed + 2] = 'seq', int(seq) end
if watermark ~= startWatermark then changed[#changed + 1], changed[#changed + 2] = 'fw', int(watermark) end
if buckets.dirty then
  changed[#changed + 1], changed[#changed + 2] = 'wb', int(buckets.n)
  changed[#changed + 1], changed[#changed + 2] = 'wn', int(buckets.count)
end
if #changed > 0 then redis.call('HSET', meta, unpack(changed)) end
local nameList = {}
for name in pairs(newNames) do nameList[#nameList + 1] = name end
if #nameList > 0 then call_chunked('SADD', names, nameList, 1) end
if due or replacedDue then wake(ARGV[2], ARGV[3]) end
if firstRunAt then wake(ARGV[2], ARGV[3] .. ' ' .. int(firstRunAt - now)) end
return attempt_keep(attempt, result)
