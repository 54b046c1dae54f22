--[[
  claim: moves up to `limit` runnable jobs of one queue to active, in claim order (lowest
  priority, then earliest run_at, then insertion order), each with attempt + 1 and a lease token
  greater than its last (next_lease_token: at least Redis' time in µs, so that no token repeats
  after a failover lost a claim).

  First promotes due scheduled jobs (earliest first, at most ARGV[5] per call) into their slow
  lanes, so delayed and retried jobs need no separate timer that could fall behind. Then merges
  the fast and slow lanes of the requested names only: jobs with other names are never read,
  so a worker skips (never drops) jobs it has no handler for, at no cost per skipped job.
  A claimed job that waited as a compact record (see keys.ts) leaves its bucket and gets its full
  hash here.

  KEYS[1] meta     <base>meta
  KEYS[2] sched    <base>sched
  KEYS[3] active   <base>active
  KEYS[4] idx      <base>idx
  ARGV[1] now in ms, or '' for Redis TIME
  ARGV[2] lease length in ms
  ARGV[3] limit, >= 1
  ARGV[4] worker identity as JSON {"id","host","pid"}
  ARGV[5] most due scheduled jobs to promote in this call
  ARGV[6..] job names to claim
  Returns { nextDueIn, id1, fields1, id2, fields2, ... }: each claimed job's id and its hash after
  the claim as one string, field and value alternating, separated by NUL bytes (one bulk string
  costs Redis and the client far less than two dozen; no field holds a NUL: JSON escapes it), in
  claim order; nextDueIn is how many ms until the earliest
  job still scheduled comes due, or false when there is none (the caller may wake itself up then:
  a delay, not a time, so the caller's clock need not agree with Redis').
  A paused queue returns { false } and changes nothing.
  Flow control (src/core/flow.ts): a queue whose <base>flow hash holds limits or a hold claims at
  most what they allow, and records its starts in the rate window <base>rate. When they allow
  none, the script returns { { retryIn } } and changes nothing: retryIn is how many ms until a
  rate slot opens or the hold ends, or -1 when the queue waits on running jobs to finish. A claim
  that takes the rate's last open slot ends its reply with { retryIn } too: ms until the next
  slot opens (throttleAfterStarts in src/core/flow.ts).
  A queue that has had jobs with a group or limiter key (flow hash field ln) takes turns across
  lanes (the `lanes` part below, the rules of pickAcrossLanes in src/core/flow.ts): its unkeyed
  jobs form one lane, each group or limiter key another (L:<name>\n<lane>, listed in ls:<name>).
]]
local meta, sched, active, idx = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local base = string.sub(meta, 1, -5)
-- One TIME call serves the tokens and, without an injected clock, the store time in ms.
local timeUs = store_time_us()
local now = ARGV[1] ~= '' and tonumber(ARGV[1]) or math.floor(timeUs / 1000)
if redis.call('HEXISTS', meta, 'paused') == 1 then return { false } end
local leaseMs, limit, worker = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]

promote_due(base, sched, now, tonumber(ARGV[5]))

-- ── flow control: the claim's budget (the rules of claimBudget in src/core/flow.ts) ──────────
local flowKey, rateKey = base .. 'flow', base .. 'rate'
local flowRate = nil      -- true when the starts below go into the rate window
local rateRoom, rateSlotIn = nil, nil -- starts the rate allows now; ms until a slot opens once they are made
local nameRoom = {}       -- capped job name -> how many of it may start
local flow = redis.call('HMGET', flowKey, 'rm', 'rd', 'mr', 'pn', 'hu', 'ln', 'lc')
if flow[1] or flow[3] or flow[4] or flow[5] then
  local retryIn = -1
  local heldUntil = num(flow[5], 0)
  if heldUntil > now then return { { int(heldUntil - now) } } end
  if flow[1] then
    local rateMax, rateMs = tonumber(flow[1]), tonumber(flow[2])
    redis.call('ZREMRANGEBYSCORE', rateKey, '-inf', int(now - rateMs))
    local room = rateMax - redis.call('ZCARD', rateKey)
    if room <= 0 then
      local oldest = redis.call('ZRANGE', rateKey, 0, 0, 'WITHSCORES')
      return { { int(math.max(1, num(oldest[2], now) + rateMs - now)) } }
    end
    limit = math.min(limit, room)
    flowRate = true
    rateRoom = room
    local oldest = redis.call('ZRANGE', rateKey, 0, 0, 'WITHSCORES')
    rateSlotIn = int(math.max(1, num(oldest[2], now) + rateMs - now))
  end
  -- Active jobs, expired leases not yet rescued included: they hold their slot until the rescue.
  if flow[3] then limit = math.min(limit, math.max(0, tonumber(flow[3]) - redis.call('ZCARD', active))) end
  if flow[4] and flow[4] ~= '{}' then
    local caps = cjson.decode(flow[4])
    local running = {}
    for _, id in ipairs(redis.call('ZRANGE', active, 0, -1)) do
      local name = redis.call('HGET', base .. 'j:' .. id, 'n')
      if name then running[name] = (running[name] or 0) + 1 end
    end
    local uncapped, cappedRoom = false, 0
    for i = 6, #ARGV do
      local cap = caps[ARGV[i]]
      if cap then
        nameRoom[ARGV[i]] = math.max(0, cap - (running[ARGV[i]] or 0))
        cappedRoom = cappedRoom + nameRoom[ARGV[i]]
      else
        uncapped = true
      end
    end
    if not uncapped then limit = math.min(limit, cappedRoom) end
  end
  if limit <= 0 then return { { retryIn } } end
end
-- ──────────────────────────────────────────────────────────────────────────────────────────

local buckets = buckets_open(base)
-- The name caps as the budget left them: the turns across lanes count them again.
local laneNameRoom = {}
for name, room in pairs(nameRoom) do laneNameRoom[name] = room end

-- One source per non-empty lane, with its first `limit` entries: no more can be taken from it.
local sources = {}
for i = 6, #ARGV do
  -- A capped name (flow control) contributes at most its room.
  local take = math.min(limit, nameRoom[ARGV[i]] or limit)
  if take > 0 then
  local fastKey = base .. 'f:' .. ARGV[i]
  local ids = redis.call('LRANGE', fastKey, 0, take - 1)
  if #ids > 0 then sources[#sources + 1] = { fast = true, key = fastKey, items = ids, pos = 1, name = ARGV[i] } end
  local slowKey = base .. 'z:' .. ARGV[i]
  local withScores = redis.call('ZRANGE', slowKey, 0, take - 1, 'WITHSCORES')
  if #withScores > 0 then
    local members, priorities = {}, {}
    for j = 1, #withScores, 2 do
      members[#members + 1] = withScores[j]
      priorities[#priorities + 1] = tonumber(withScores[j + 1])
    end
    sources[#sources + 1] = { fast = false, key = slowKey, items = members, priorities = priorities, pos = 1, name = ARGV[i] }
  end
  end
end

-- The claim-order key {priority, run_at, seq, id} of a source's current entry. A fast lane holds
-- priority 0 only; its run_at and seq live in the job's compact record or hash.
local function head(src)
  if src.headPos ~= src.pos then
    local entry = src.items[src.pos]
    if src.fast then
      local packed = compact_get(buckets, entry)
      local v
      if packed then
        local f = compact_fields(buckets, packed)
        v = { f[8], f[12] }
      else
        v = redis.call('HMGET', base .. 'j:' .. entry, 'r', 's')
      end
      src.head = { 0, num(v[1], 0), num(v[2], 0), entry }
    else
      src.head = { src.priorities[src.pos], tonumber(string.sub(entry, 1, 13)), tonumber(string.sub(entry, 14, 25)),
        string.sub(entry, 26) }
    end
    src.headPos = src.pos
  end
  return src.head
end

local function before(x, y)
  if x[1] ~= y[1] then return x[1] < y[1] end
  if x[2] ~= y[2] then return x[2] < y[2] end
  return x[3] < y[3]
end

-- ── flow keys: turns across lanes (pickAcrossLanes in src/core/flow.ts) ─────────────────────
-- `unkeyed`: the unkeyed jobs in claim order as merged above ({ id, fast, source }), the first
-- lane. The keyed lanes follow in turn from after the lane cursor (lc), each with its first jobs
-- in claim order. Takes one job from each lane in turn, then a second, ..., up to `limit`,
-- stopping a lane at its head job's limit (its name's cap, its group's concurrency, its limiter
-- key's rate or hold). Rewinds the sources to the unkeyed jobs taken and removes the keyed ones
-- from their lanes. Returns the picks ({ id, fast }) in turn order, or nil and the retryIn of a
-- claim that can start nothing although jobs wait (ms until a limiter key reopens, -1 when a
-- lane waits on running jobs).
local function take_turns(unkeyed, sources)
  local names = {}
  for i = 6, #ARGV do
    if (laneNameRoom[ARGV[i]] or 1) > 0 then names[#names + 1] = ARGV[i] end
  end
  -- Lanes to visit (lanesToVisit in src/core/job-flow.ts): a few more than the claim can take.
  local cursor = flow[7] or ''
  local maxLanes = limit + 2
  local laneList = {}
  local function collect(min, max)
    local found, seen = {}, {}
    for _, name in ipairs(names) do
      for _, lane in ipairs(redis.call('ZRANGEBYLEX', base .. 'ls:' .. name, min, max, 'LIMIT', 0, maxLanes)) do
        if not seen[lane] then
          seen[lane] = true
          found[#found + 1] = lane
        end
      end
    end
    table.sort(found)
    for _, lane in ipairs(found) do
      if #laneList < maxLanes then laneList[#laneList + 1] = lane end
    end
  end
  collect(cursor == '' and '-' or '(' .. cursor, '+')
  if cursor ~= '' and #laneList < maxLanes then collect('-', '[' .. cursor) end

  -- headsPerLane in src/core/job-flow.ts
  local perLane = #laneList <= 4 and limit or math.ceil(limit / #laneList) + 2
  local lanes = { { lane = '', jobs = {} } }
  for j, pick in ipairs(unkeyed) do lanes[1].jobs[j] = { id = pick[1], fast = pick[2], name = pick[3].name } end
  for _, lane in ipairs(laneList) do
    local jobs = {}
    for _, name in ipairs(names) do
      local laneKey = base .. 'L:' .. name .. '\n' .. lane
      local members = redis.call('ZRANGE', laneKey, 0, perLane - 1, 'WITHSCORES')
      if #members == 0 then redis.call('ZREM', base .. 'ls:' .. name, lane) end
      for j = 1, #members, 2 do
        local m = members[j]
        jobs[#jobs + 1] = { key = { tonumber(members[j + 1]), tonumber(string.sub(m, 1, 13)), tonumber(string.sub(m, 14, 25)) },
          id = string.sub(m, 26), member = m, laneKey = laneKey, name = name }
      end
    end
    table.sort(jobs, function(x, y) return before(x.key, y.key) end)
    for j = perLane + 1, #jobs do jobs[j] = nil end
    for _, job in ipairs(jobs) do
      local f = redis.call('HMGET', base .. 'j:' .. job.id, 'gk', 'gc', 'lk', 'lm', 'ld')
      job.gk, job.gc, job.lk, job.lm, job.ld = f[1], tonumber(f[2]), f[3], tonumber(f[4]), tonumber(f[5])
    end
    lanes[#lanes + 1] = { lane = lane, jobs = jobs }
  end

  -- Running jobs per group, from the active set (read once, when a group is first met; bounded by
  -- the fleet's concurrency). Expired leases not yet rescued hold their slot, as on SQL.
  local groupActive = nil
  local function group_running(key)
    if not groupActive then
      groupActive = {}
      for _, id in ipairs(redis.call('ZRANGE', active, 0, -1)) do
        local g = redis.call('HGET', base .. 'j:' .. id, 'gk')
        if g then groupActive[g] = (groupActive[g] or 0) + 1 end
      end
    end
    return groupActive[key] or 0
  end
  -- A limiter key's window, read when the turns first reach a job of the key.
  local windows = {}
  local function limiter_window(key, ms)
    local w = windows[key]
    if not w then
      local windowKey = base .. 'kr:' .. key
      redis.call('ZREMRANGEBYSCORE', windowKey, '-inf', int(now - ms))
      local n = redis.call('ZCARD', windowKey)
      local oldest = n > 0 and tonumber(redis.call('ZRANGE', windowKey, 0, 0, 'WITHSCORES')[2]) or nil
      w = { n = n, oldest = oldest, heldUntil = num(redis.call('GET', base .. 'kh:' .. key), 0) }
      windows[key] = w
    end
    return w
  end

  local picks, position, stopped = {}, {}, {}
  local groupTaken, limiterTaken = {}, {}
  local lastLane = nil
  local waitsOnRunning, reopensIn = false, nil
  local function reopen(ms)
    if not reopensIn or ms < reopensIn then reopensIn = ms end
  end
  local progress = true
  while progress and #picks < limit do
    progress = false
    for i, lane in ipairs(lanes) do
      if #picks >= limit then break end
      local job = nil
      if not stopped[i] then job = lane.jobs[(position[i] or 0) + 1] end
      if job then
        local blocked = false
        local room = laneNameRoom[job.name]
        if room and room <= 0 then
          blocked, waitsOnRunning = true, true
        end
        if not blocked and job.gk and group_running(job.gk) + (groupTaken[job.gk] or 0) >= job.gc then
          blocked, waitsOnRunning = true, true
        end
        if not blocked and job.lk then
          local w = limiter_window(job.lk, job.ld)
          if w.heldUntil > now then
            blocked = true
            reopen(w.heldUntil - now)
          elseif w.n + (limiterTaken[job.lk] or 0) >= job.lm then
            blocked = true
            reopen(math.max(1, (w.oldest or now) + job.ld - now))
          end
        end
        if blocked then
          stopped[i] = true
        else
          picks[#picks + 1] = job
          position[i] = (position[i] or 0) + 1
          progress = true
          lastLane = lane.lane
          if room then laneNameRoom[job.name] = room - 1 end
          if job.gk then groupTaken[job.gk] = (groupTaken[job.gk] or 0) + 1 end
          if job.lk then limiterTaken[job.lk] = (limiterTaken[job.lk] or 0) + 1 end
        end
      end
    end
  end
  if #picks == 0 then
    local anyStopped = false
    for _ in pairs(stopped) do anyStopped = true end
    if anyStopped then return nil, (not waitsOnRunning and reopensIn) and int(reopensIn) or -1 end
  end

  -- The unkeyed jobs taken are the first `position[1]` of the merge: rewind the sources to them.
  for _, src in ipairs(sources) do src.pos = 1 end
  for j = 1, position[1] or 0 do
    local src = unkeyed[j][3]
    src.pos = src.pos + 1
  end
  local out = {}
  for _, job in ipairs(picks) do
    if job.laneKey then
      redis.call('ZREM', job.laneKey, job.member)
      out[#out + 1] = { job.id, false }
    else
      out[#out + 1] = { job.id, job.fast }
    end
  end
  -- Lanes emptied by this claim leave their lane sets.
  for i = 2, #lanes do
    if (position[i] or 0) > 0 then
      for _, name in ipairs(names) do
        local laneKey = base .. 'L:' .. name .. '\n' .. lanes[i].lane
        if redis.call('EXISTS', laneKey) == 0 then redis.call('ZREM', base .. 'ls:' .. name, lanes[i].lane) end
      end
    end
  end
  if lastLane and lastLane ~= '' then redis.call('HSET', flowKey, 'lc', lastLane) end
  return out
end

-- taken: { id, from a fast lane? }, in claim order.
local taken = {}
if #sources == 1 then
  -- One lane (the common case): it is already in claim order.
  local src = sources[1]
  for j = 1, math.min(limit, #src.items) do
    taken[j] = { src.fast and src.items[j] or string.sub(src.items[j], 26), src.fast, src }
  end
  src.pos = #taken + 1
else
  while #taken < limit do
    local best, bestKey
    for _, src in ipairs(sources) do
      -- nameRoom: a capped name's two lanes share its room (flow control).
      if src.pos <= #src.items and (nameRoom[src.name] == nil or nameRoom[src.name] > 0) then
        local key = head(src)
        if not best or before(key, bestKey) then best, bestKey = src, key end
      end
    end
    if not best then break end
    if nameRoom[best.name] then nameRoom[best.name] = nameRoom[best.name] - 1 end
    taken[#taken + 1] = { bestKey[4], best.fast, best }
    best.pos = best.pos + 1
  end
end

if flow[6] then
  local picked, retryIn = take_turns(taken, sources)
  if not picked then
    buckets_close(buckets)
    return { { retryIn } }
  end
  taken = picked
end

for _, src in ipairs(sources) do
  local consumed = src.pos - 1
  if consumed > 0 then
    if src.fast then
      redis.call('LTRIM', src.key, consumed, -1)
    else
      redis.call('ZREMRANGEBYRANK', src.key, 0, consumed - 1)
    end
  end
end

local expires = int(now + leaseMs)
local nowText = int(now)
local activeData = '{"workerId":' .. worker_id_json(worker) .. '}'
local reply = { false }
local activeArgs, idxArgs = {}, {}
local limiterStarts, limiterKeys = {}, {} -- limiter key -> { n starts, ms window }; the keys in order
for _, pick in ipairs(taken) do
  local id, fromFast = pick[1], pick[2]
  local key = base .. 'j:' .. id
  -- A job from a fast lane may be compact: its full hash is written below, with the claim.
  local packed, bucket = false, nil
  if fromFast then packed, bucket = compact_get(buckets, id) end
  local fields
  if packed then
    fields = compact_fields(buckets, packed)
    compact_remove(buckets, id, bucket)
  else
    fields = redis.call('HGETALL', key)
  end
  local at = {}
  for j = 1, #fields, 2 do at[fields[j]] = j + 1 end
  -- Every script keeps lanes and hashes in step, so a lane entry always names a waiting job;
  -- should one not, it is dropped from the lane above and never claimed.
  if at.st and fields[at.st] == 'w' then
    local updates = {
      'st', 'a',
      'a', int(num(fields[at.a], 0) + 1),
      'k', int(next_lease_token(fields[at.k], timeUs)),
      'le', expires,
      'w', worker,
      'sa', nowText,
    }
    -- The reply is the hash as it is now: patch the copy read above instead of reading it again.
    for j = 1, #updates, 2 do
      local pos = at[updates[j]]
      if pos then
        fields[pos] = updates[j + 1]
      else
        fields[#fields + 1] = updates[j]
        fields[#fields + 1] = updates[j + 1]
      end
    end
    redis.call('HSET', key, unpack(packed and fields or updates))
    log_event(base, 'active', fields[at.n], id, updates[4], now, activeData)
    activeArgs[#activeArgs + 1] = expires
    activeArgs[#activeArgs + 1] = id
    if fromFast then
      idxArgs[#idxArgs + 1] = fields[at.s]
      idxArgs[#idxArgs + 1] = id
    end
    reply[#reply + 1] = id
    reply[#reply + 1] = table.concat(fields, '\0')
    if at.lk then
      local starts = limiterStarts[fields[at.lk]]
      if not starts then
        starts = { n = 0, ms = tonumber(fields[at.ld]) }
        limiterStarts[fields[at.lk]] = starts
        limiterKeys[#limiterKeys + 1] = fields[at.lk]
      end
      starts.n = starts.n + 1
      starts.ms = math.max(starts.ms, tonumber(fields[at.ld]))
    end
  end
end
buckets_close(buckets)
if #activeArgs > 0 then call_chunked('ZADD', active, activeArgs, 2) end
if flowRate and #activeArgs > 0 then
  -- One rate-window entry per start (flow control); members made unique by a counter.
  local n = #activeArgs / 2
  local last = redis.call('HINCRBY', flowKey, 'rs', n)
  local starts = {}
  for j = last - n + 1, last do
    starts[#starts + 1] = nowText
    starts[#starts + 1] = int(j)
  end
  call_chunked('ZADD', rateKey, starts, 2)
end
if #idxArgs > 0 then call_chunked('ZADD', idx, idxArgs, 2) end
-- Each limiter key's starts go into its window kr:<key>; the window expires a minute after its
-- last start could still count, so keys nobody uses any more leave no trace.
for _, key in ipairs(limiterKeys) do
  local starts = limiterStarts[key]
  local last = redis.call('HINCRBY', flowKey, 'rs', starts.n)
  local args = {}
  for j = last - starts.n + 1, last do
    args[#args + 1] = nowText
    args[#args + 1] = int(j)
  end
  local windowKey = base .. 'kr:' .. key
  call_chunked('ZADD', windowKey, args, 2)
  redis.call('PEXPIRE', windowKey, int(starts.ms + 60000))
end

local first = redis.call('ZRANGE', sched, 0, 0, 'WITHSCORES')
if first[2] then reply[1] = int(math.max(0, tonumber(first[2]) - now)) end
if rateRoom and #activeArgs > 0 and #activeArgs / 2 >= rateRoom then reply[#reply + 1] = { rateSlotIn } end
return reply
