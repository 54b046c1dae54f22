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
  ARGV[4] worker identity as JSON {"id","host","pid"}, or {"id"} when the id holds the host and pid (encodeWorker in codec.ts)
  ARGV[5] most due scheduled jobs to promote in this call
  ARGV[6] '1': end the reply with the ready index as this claim leaves it (the queues it lists as
          claimable now, ready-1.lua's answer): a claim over many queues reads it there for its
          next claim instead of in a call of its own (ready-index.ts); '' otherwise
  ARGV[7..] job names to claim
  Returns { nextDueIn, id1, fields1, id2, fields2, ... }: each claimed job's id and its hash after
  the claim as one string, field and value alternating, separated by NUL bytes (one bulk string
  costs Redis and the client far less than two dozen; no field holds a NUL: JSON escapes it), in
  claim order; nextDueIn is how many ms until the earliest
  job still scheduled comes due, or false when there is none (the caller may wake itself up then:
  a delay, not a time, so the caller's clock need not agree with Redis').
  A paused queue returns { false } and changes nothing.
  Flow control (src/core/flow.ts): a queue whose <base>flow hash holds limits or a hold claims at
  most what they allow, and records its starts in the rate window <base>rate. When they allow
  none, the script returns { { retryIn } } and starts nothing (it may still write what it
  counted or trimmed on the way: the running counts' first count, a rate or limiter window's
  kept count, the lane cursor): retryIn is how many ms until a
  rate slot opens or the hold ends, or -1 when the queue waits on running jobs to finish. A claim
  that takes the rate's last open slot ends its reply with { retryIn } too: ms until the next
  slot opens (throttleAfterStarts in src/core/flow.ts).
  With ARGV[6] '1' every reply above gets one more last element: the ready index's list.
  A queue that has had jobs with a group or limiter key (flow hash field ln) takes turns across
  lanes (the `lanes` part below, the rules of pickAcrossLanes in src/core/flow.ts): its unkeyed
  jobs form one lane, each group or limiter key another (L:<name>\n<lane>, listed in ls:<name>).
]]
local meta, sched, active, idx = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local base = string.sub(meta, 1, -5)
-- One TIME call serves the tokens and, without an injected clock, the store time in ms.
local timeUs = store_time_us()
local now = ARGV[1] ~= '' and tonumber(ARGV[1]) or math.floor(timeUs / 1000)
local NAMES_FROM = 7
-- Every return of the script's own goes through here: the ready index after this claim, when asked.
local function answer(reply)
  if ARGV[6] == '1' then reply[#reply + 1] = redis.call('ZRANGEBYSCORE', READY_KEY, '-inf', int(now)) end
  return reply
end
local queueState = redis.call('HMGET', meta, 'paused', 'rx')
ready_known(base, queueState[2])
if queueState[1] then
  -- Out of the ready index while paused: resuming (pause-1.lua) marks it again.
  ready_write(base, false)
  return answer({ false })
end
local leaseMs, limit, worker = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]

promote_due(base, sched, now, tonumber(ARGV[5]))

-- ── flow control: the claim's budget (the rules of claimBudget in src/core/flow.ts) ──────────
local flowKey, rateKey = base .. 'flow', base .. 'rate'
local flowRate = nil      -- true when the starts below go into the rate window
local rateStarts = 0      -- the starts in the rate window before this claim's (flow field rn)
local rateRoom, rateSlotIn = nil, nil -- starts the rate allows now; ms until a slot opens once they are made
local nameRoom = {}       -- capped job name -> how many of it may start
local flow = redis.call('HMGET', flowKey, 'rm', 'rd', 'mr', 'pn', 'hu', 'ln', 'lc', 'rn', 'rc', 'rs')
-- Flow hash fields this claim changes, written in one HSET by flow_write (before any return that
-- follows a change); rs, the counter that makes rate-window members unique, taken from here.
local flowChanges, memberCounter = {}, num(flow[10], 0)
local function flow_write()
  local args = {}
  for field, value in pairs(flowChanges) do
    args[#args + 1] = field
    args[#args + 1] = value
  end
  if #args > 0 then redis.call('HSET', flowKey, unpack(args)) end
  flowChanges = {}
end
local function next_member(starts)
  memberCounter = memberCounter + 1
  flowChanges.rs = int(memberCounter)
  return int(memberCounter) .. ':' .. int(starts)
end

-- Running counts per name and group (running_note in _common.lua), for a queue with per-name
-- caps or keyed jobs. The first claim that needs them counts the active jobs once (expired
-- leases not yet rescued included: they hold their slot until the rescue, as on SQL) and marks
-- them; from then on claims add their jobs and the scripts that take jobs out of active take
-- them off, so no claim reads the active jobs again.
local runKey = base .. 'run'
local counting = flow[6] or (flow[4] and flow[4] ~= '{}')
local runKnown = {} -- field -> running count, as read (or counted) by this claim
if counting and not flow[9] then
  redis.call('DEL', runKey)
  local counts = {}
  for _, id in ipairs(redis.call('ZRANGE', active, 0, -1)) do
    local key = base .. 'j:' .. id
    local v = redis.call('HMGET', key, 'st', 'n', 'gk')
    if v[1] == 'a' then
      running_note(counts, v[2], v[3])
      redis.call('HSET', key, 'rc', '1')
    end
  end
  local args = {}
  for field, n in pairs(counts) do
    args[#args + 1] = field
    args[#args + 1] = int(n)
  end
  if #args > 0 then call_chunked('HSET', runKey, args, 2) end
  redis.call('HSET', flowKey, 'rc', '1')
  runKnown = setmetatable(counts, { __index = function() return 0 end })
end
-- Reads the running counts of `fields` this claim does not know yet, in one HMGET.
local function running_read(fields)
  local unknown = {}
  for _, field in ipairs(fields) do
    if runKnown[field] == nil then unknown[#unknown + 1] = field end
  end
  for i = 1, #unknown, CHUNK do
    local slice = { unpack(unknown, i, math.min(i + CHUNK - 1, #unknown)) }
    local got = redis.call('HMGET', runKey, unpack(slice))
    for j, field in ipairs(slice) do runKnown[field] = num(got[j], 0) end
  end
end
local function running_count(field)
  if runKnown[field] == nil then running_read({ field }) end
  return runKnown[field]
end

-- A rate window (the queue's `rate`, a limiter key's kr:<key>) holds one member per claim that
-- started jobs in it, "<counter>:<starts>", scored by the claim's time (a member without ':' is
-- one start, as layout 2 wrote them), and its starts are kept in a count (the queue's: flow
-- field rn; a limiter key's: kn:<key>), so a claim of 50 adds one member, not 50, and reads the
-- count instead of counting members. trim_window forgets the claims that left the window (their
-- starts off the count) and returns the count and whether it changed; a missing count (layout 2
-- data) is summed from the members once.
local function member_starts(member)
  local at = string.find(member, ':', 1, true)
  return at and tonumber(string.sub(member, at + 1)) or 1
end
local function trim_window(windowKey, cutoff, count)
  if count == nil then
    redis.call('ZREMRANGEBYSCORE', windowKey, '-inf', cutoff)
    count = 0
    for _, member in ipairs(redis.call('ZRANGE', windowKey, 0, -1)) do count = count + member_starts(member) end
    return count, true
  end
  local gone = redis.call('ZRANGEBYSCORE', windowKey, '-inf', cutoff)
  if #gone == 0 then return count, false, 0 end
  for _, member in ipairs(gone) do count = count - member_starts(member) end
  redis.call('ZREMRANGEBYSCORE', windowKey, '-inf', cutoff)
  return math.max(0, count), true, #gone
end
if flow[1] or flow[3] or flow[4] or flow[5] then
  local retryIn = -1
  local heldUntil = num(flow[5], 0)
  if heldUntil > now then return answer({ { int(heldUntil - now) } }) end
  if flow[1] then
    local rateMax, rateMs = tonumber(flow[1]), tonumber(flow[2])
    local starts, changed = trim_window(rateKey, int(now - rateMs), tonumber(flow[8]))
    if changed then flowChanges.rn = int(starts) end
    rateStarts = starts
    local room = rateMax - starts
    if room <= 0 then
      flow_write()
      local oldest = redis.call('ZRANGE', rateKey, 0, 0, 'WITHSCORES')
      return answer({ { int(math.max(1, num(oldest[2], now) + rateMs - now)) } })
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
    local capped = {}
    for i = NAMES_FROM, #ARGV do
      if caps[ARGV[i]] then capped[#capped + 1] = 'n:' .. ARGV[i] end
    end
    running_read(capped)
    local uncapped, cappedRoom = false, 0
    for i = NAMES_FROM, #ARGV do
      local cap = caps[ARGV[i]]
      if cap then
        nameRoom[ARGV[i]] = math.max(0, cap - running_count('n:' .. ARGV[i]))
        cappedRoom = cappedRoom + nameRoom[ARGV[i]]
      else
        uncapped = true
      end
    end
    if not uncapped then limit = math.min(limit, cappedRoom) end
  end
  if limit <= 0 then
    flow_write()
    return answer({ { retryIn } })
  end
end
-- ──────────────────────────────────────────────────────────────────────────────────────────

local buckets = buckets_open(base)
-- The name caps as the budget left them: the turns across lanes count them again.
local laneNameRoom = {}
for name, room in pairs(nameRoom) do laneNameRoom[name] = room end

-- One source per non-empty lane, with its first `limit` entries: no more can be taken from it.
local sources = {}
for i = NAMES_FROM, #ARGV do
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
-- priority 0 only; its run_at and seq live in the job's compact record or hash. A fast lane's
-- entry is the id's stored form (id_store), the same as its bucket field, and stays so (as the
-- id of the claim-order key) until the claim below takes it.
local function head(src)
  if src.headPos ~= src.pos then
    local entry = src.items[src.pos]
    if src.fast then
      local packed = compact_get(buckets, entry, entry)
      local v
      if packed then
        local f = compact_fields(buckets, packed, entry)
        v = { f[8], f[12] }
      else
        v = redis.call('HMGET', base .. 'j:' .. id_text(entry), 'r', 's')
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
-- A limiter key's window, read when the turns first reach a job of the key, written once at the
-- end by windows_write. Its count kn:<key> is "<starts> <until> <members> <trim at>" (layout 3:
-- "<starts>"): the starts of the members in kr:<key>; until when (Redis' own clock, ms) both keys
-- are known to live, so a claim renews their expiry (a minute after the last start could still
-- count) only when it is near, not on every claim; how many members kr:<key> holds, and at how
-- many the next claim trims it. Between trims the count includes starts that left the window,
-- so it is at least the window's: a key whose count leaves room has room, and only a key whose
-- count says full is trimmed first (window_full). The trim at twice the members the last trim
-- kept (and 16) bounds the set to about twice the window's claims at a cost of one trim per that
-- many claims.
local windows, windowKeys = {}, {}
local redisNow = math.floor(timeUs / 1000)
-- Trims a window to its starts in (now - its window, now], exactly.
local function window_trim(w)
  local n, changed, removed = trim_window(base .. 'kr:' .. w.key, int(now - w.cutoffMs), w.counted and w.n or nil)
  w.n, w.exact = n, true
  w.changed = w.changed or changed
  w.members = (removed and w.members) and w.members - removed or redis.call('ZCARD', base .. 'kr:' .. w.key)
  w.trimAt = 2 * w.members + 16
end
local function limiter_window(key, ms)
  local w = windows[key]
  if not w then
    local got = redis.call('MGET', base .. 'kn:' .. key, base .. 'kh:' .. key)
    local count, livesUntil, members, trimAt = nil, 0, nil, nil
    if got[1] then
      local c, u, m, t = string.match(got[1], '^(%d+) ?(%d*) ?(%d*) ?(%d*)$')
      count, livesUntil, members, trimAt = tonumber(c), tonumber(u) or 0, tonumber(m), tonumber(t)
    end
    w = { key = key, n = count or 0, counted = count ~= nil, exact = false, changed = false, livesUntil = livesUntil,
      members = members, trimAt = trimAt, starts = 0, ms = ms, cutoffMs = ms, heldUntil = num(got[2], 0) }
    if not (count and members and trimAt) or members > trimAt then window_trim(w) end
    windows[key] = w
    windowKeys[#windowKeys + 1] = key
  end
  return w
end
-- Whether a key's window has no room for one more start after `taken` of this claim's.
local function window_full(w, max, taken)
  if w.n + taken < max then return false end
  if not w.exact then window_trim(w) end
  return w.n + taken >= max
end
-- The time of the oldest start in a window, read only for a key that blocks (when it reopens).
local function window_oldest(w)
  if w.oldest == nil then
    w.oldest = w.n > 0 and tonumber(redis.call('ZRANGE', base .. 'kr:' .. w.key, 0, 0, 'WITHSCORES')[2]) or now
  end
  return w.oldest
end
-- Records the claim's starts in each limiter key's window (one member for the claim's starts of
-- the key) and writes the counts that changed.
local function windows_write()
  for _, key in ipairs(windowKeys) do
    local w = windows[key]
    local windowKey, countKey = base .. 'kr:' .. key, base .. 'kn:' .. key
    local n = w.n + w.starts
    local members = w.members + (w.starts > 0 and 1 or 0)
    local function count_text(livesUntil)
      return int(n) .. ' ' .. int(livesUntil) .. ' ' .. int(members) .. ' ' .. int(w.trimAt)
    end
    if w.starts > 0 then
      redis.call('ZADD', windowKey, int(now), next_member(w.starts))
      local ttl = w.ms + 60000
      -- A window with no member before this ZADD (new, or trimmed empty: Redis deleted the set)
      -- is a new key without any expiry, whatever the count says: it is renewed too.
      if w.livesUntil - redisNow < ttl or w.members == 0 then
        -- Renewed to twice that, so the next renewal is a minute (or a window) away.
        redis.call('PEXPIRE', windowKey, int(2 * ttl))
        redis.call('SET', countKey, count_text(redisNow + 2 * ttl), 'PX', int(2 * ttl))
      else
        redis.call('SET', countKey, count_text(w.livesUntil), 'KEEPTTL')
      end
    elseif w.changed then
      if n <= 0 then
        redis.call('DEL', countKey)
      elseif w.counted then
        redis.call('SET', countKey, count_text(w.livesUntil), 'KEEPTTL')
      else
        -- A layout 2 window had no count: it gets one expiring with the window.
        local ttl = redis.call('PTTL', windowKey)
        if ttl > 0 then redis.call('SET', countKey, count_text(redisNow + ttl), 'PX', ttl) else redis.call('SET', countKey, count_text(0)) end
      end
    end
  end
end

-- `unkeyed`: the unkeyed jobs in claim order as merged above ({ id, fast, source }), the first
-- lane. The keyed lanes follow in turn from after the lane cursor (lc), each with its first jobs
-- in claim order. Takes one job from each lane in turn, then a second, ..., up to `limit`,
-- stopping a lane at its head job's limit (its name's cap, its group's concurrency, its limiter
-- key's rate or hold). Rewinds the sources to the unkeyed jobs taken and removes the keyed ones
-- from their lanes. Returns the picks ({ id, fast, nil, hash }) in turn order, or nil and the retryIn of a
-- claim that can start nothing although jobs wait (ms until a limiter key reopens, -1 when a
-- lane waits on running jobs).
local function take_turns(unkeyed, sources)
  -- Each name once: a lane key read twice would list its jobs twice (and the ranks removed
  -- below would count them twice).
  local names, named = {}, {}
  for i = NAMES_FROM, #ARGV do
    if (laneNameRoom[ARGV[i]] or 1) > 0 and not named[ARGV[i]] then
      named[ARGV[i]] = true
      names[#names + 1] = ARGV[i]
    end
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
  local readOf = {} -- lane key -> how many of its first entries were read (at most perLane)
  for j, pick in ipairs(unkeyed) do lanes[1].jobs[j] = { id = pick[1], fast = pick[2], name = pick[3].name } end
  -- A lane key's entries are in claim order already: with one name a lane is its key's first
  -- entries as they come, and the claim-order keys are parsed only to merge several names.
  local merge = #names > 1
  for _, lane in ipairs(laneList) do
    local jobs = {}
    for _, name in ipairs(names) do
      local laneKey = base .. 'L:' .. name .. '\n' .. lane
      local members, step
      if merge then
        members, step = redis.call('ZRANGE', laneKey, 0, perLane - 1, 'WITHSCORES'), 2
      else
        members, step = redis.call('ZRANGE', laneKey, 0, perLane - 1), 1
      end
      if #members == 0 then redis.call('ZREM', base .. 'ls:' .. name, lane) end
      readOf[laneKey] = #members / step
      for j = 1, #members, step do
        local m = members[j]
        local job = { id = string.sub(m, 26), laneKey = laneKey, name = name }
        if merge then job.key = { tonumber(members[j + 1]), tonumber(string.sub(m, 1, 13)), tonumber(string.sub(m, 14, 25)) } end
        jobs[#jobs + 1] = job
      end
    end
    if merge then
      table.sort(jobs, function(x, y) return before(x.key, y.key) end)
      for j = perLane + 1, #jobs do jobs[j] = nil end
    end
    lanes[#lanes + 1] = { lane = lane, jobs = jobs }
  end
  -- A keyed job's hash is read when the turns first reach it, not for every head job: most
  -- claims reach a fraction of the heads they read. The whole hash, since a picked job's claim
  -- below needs it all (and then does not read it again).
  local function read_flow(job)
    if job.fields or not job.laneKey then return end
    local fields = redis.call('HGETALL', base .. 'j:' .. job.id)
    local at = {}
    for j = 1, #fields, 2 do at[fields[j]] = j + 1 end
    job.fields, job.at = fields, at
    job.gk, job.lk = at.gk and fields[at.gk], at.lk and fields[at.lk]
    if job.gk then job.gc = tonumber(fields[at.gc]) end
    if job.lk then job.lm, job.ld = tonumber(fields[at.lm]), tonumber(fields[at.ld]) end
  end

  -- Running jobs per group (the running counts above): a group's lane is named as its count's
  -- field, g:<key>, so the counts of the groups visited are read in one HMGET.
  local groupLanes = {}
  for _, lane in ipairs(laneList) do
    if string.sub(lane, 1, 2) == 'g:' then groupLanes[#groupLanes + 1] = lane end
  end
  running_read(groupLanes)
  local function group_running(key)
    return running_count('g:' .. key)
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
        read_flow(job)
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
          elseif window_full(w, job.lm, limiterTaken[job.lk] or 0) then
            blocked = true
            reopen(math.max(1, window_oldest(w) + job.ld - now))
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
  -- The jobs taken from one lane key are its first entries (the turns take a lane's jobs in
  -- claim order, which is the key's own order: score = priority, then run_at and seq in the
  -- fixed-width member): one ZREMRANGEBYRANK per key instead of a ZREM per job.
  local out, takenOf, laneKeys = {}, {}, {}
  for _, job in ipairs(picks) do
    if job.laneKey then
      if not takenOf[job.laneKey] then
        takenOf[job.laneKey] = 0
        laneKeys[#laneKeys + 1] = job.laneKey
      end
      takenOf[job.laneKey] = takenOf[job.laneKey] + 1
      out[#out + 1] = { job.id, false, nil, job.fields, job.at }
    else
      out[#out + 1] = { job.id, job.fast }
    end
  end
  for _, laneKey in ipairs(laneKeys) do redis.call('ZREMRANGEBYRANK', laneKey, 0, takenOf[laneKey] - 1) end
  -- Lanes emptied by this claim leave their lane sets.
  for i = 2, #lanes do
    if (position[i] or 0) > 0 then
      for _, name in ipairs(names) do
        local laneKey = base .. 'L:' .. name .. '\n' .. lanes[i].lane
        -- A lane key read whole (fewer entries than asked for) is empty once all of them are taken;
        -- one read only in part is asked.
        local read, taken = readOf[laneKey] or 0, takenOf[laneKey] or 0
        local empty
        if read < perLane then
          empty = taken >= read
        else
          empty = taken >= read and redis.call('EXISTS', laneKey) == 0
        end
        if empty then redis.call('ZREM', base .. 'ls:' .. name, lanes[i].lane) end
      end
    end
  end
  if lastLane and lastLane ~= '' then flowChanges.lc = lastLane end
  return out
end

-- taken: { id, from a fast lane?, its source, its hash when already read }, in claim order.
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
    windows_write()
    flow_write()
    return answer({ { retryIn } })
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
-- A compact job has no attempt or lease token yet: its first token (next_lease_token of none),
-- known once; where its fields sit: COMPACT_AT.
local firstToken = int(next_lease_token(nil, timeUs))
local reply = { false }
local activeArgs, idxArgs = {}, {}
local started = {} -- running counts this claim adds to (running_note), while the queue counts
for _, pick in ipairs(taken) do
  local id, fromFast = pick[1], pick[2]
  -- A job from a fast lane may be compact: its full hash is written below, with the claim.
  local packed, bucket, field = false, nil, nil
  local sid = id
  if fromFast then
    packed, bucket, field = compact_get(buckets, id, id)
    id = id_text(id)
  end
  local key = base .. 'j:' .. id
  local fields
  if packed then
    fields = compact_fields(buckets, packed, field)
    compact_remove(buckets, bucket, field)
  else
    -- A keyed job's hash was read by the turns (take_turns) already.
    fields = pick[4] or redis.call('HGETALL', key)
  end
  local at = pick[5] or (packed and COMPACT_AT)
  if not at then
    at = {}
    for j = 1, #fields, 2 do at[fields[j]] = j + 1 end
  end
  -- Every script keeps lanes and hashes in step, so a lane entry always names a waiting job;
  -- should one not, it is dropped from the lane above and never claimed.
  if at.st and fields[at.st] == 'w' then
    local updates = {
      'st', 'a',
      'a', packed and '1' or int(num(fields[at.a], 0) + 1),
      'k', packed and firstToken or int(next_lease_token(fields[at.k], timeUs)),
      'le', expires,
      'w', worker,
      'sa', nowText,
    }
    if counting then
      updates[#updates + 1] = 'rc'
      updates[#updates + 1] = '1'
      running_note(started, fields[at.n], at.gk and fields[at.gk])
    end
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
    log_event(base, 'active', fields[at.n], sid, updates[4], now, activeData)
    activeArgs[#activeArgs + 1] = expires
    activeArgs[#activeArgs + 1] = id
    if fromFast then
      idxArgs[#idxArgs + 1] = fields[at.s]
      idxArgs[#idxArgs + 1] = id
    end
    reply[#reply + 1] = id
    reply[#reply + 1] = table.concat(fields, '\0')
    if at.lk then
      local w = limiter_window(fields[at.lk], tonumber(fields[at.ld]))
      w.starts = w.starts + 1
      w.ms = math.max(w.ms, tonumber(fields[at.ld]))
    end
  end
end
buckets_close(buckets)
if #activeArgs > 0 then call_chunked('ZADD', active, activeArgs, 2) end
if flowRate and #activeArgs > 0 then
  -- One rate-window member for this claim's starts (trim_window), made unique by a counter.
  local n = #activeArgs / 2
  redis.call('ZADD', rateKey, nowText, next_member(n))
  flowChanges.rn = int(rateStarts + n)
end
if #idxArgs > 0 then call_chunked('ZADD', idx, idxArgs, 2) end
-- Each limiter key's starts go into its window kr:<key> as one member and onto its count kn:<key>
-- (trim_window); both expire a minute or two after the last start could still count, so keys
-- nobody uses any more leave no trace.
windows_write()
flow_write()
-- The running counts with this claim's jobs, in one write (the counts were read above).
local startedFields, startedArgs = {}, {}
for field in pairs(started) do startedFields[#startedFields + 1] = field end
running_read(startedFields)
for _, field in ipairs(startedFields) do
  startedArgs[#startedArgs + 1] = field
  startedArgs[#startedArgs + 1] = int(runKnown[field] + started[field])
end
if #startedArgs > 0 then call_chunked('HSET', runKey, startedArgs, 2) end

local first = redis.call('ZRANGE', sched, 0, 0, 'WITHSCORES')
if first[2] then reply[1] = int(math.max(0, tonumber(first[2]) - now)) end
-- The queue's mark in the ready index: kept while this claim took all it could (jobs are likely
-- left), else set to what the queue holds.
if READY_INDEX then
  if #activeArgs / 2 >= limit then ready_write(base, 0) else ready_refresh(base, first) end
end
if rateRoom and #activeArgs > 0 and #activeArgs / 2 >= rateRoom then reply[#reply + 1] = { rateSlotIn } end
return answer(reply)
