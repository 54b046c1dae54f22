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

-- The time in ms this call last read from Redis (TIME, by now_ms or store_time_us), false while none
-- was read: an event at this time can take it as its stream id (log_event).
local REDIS_NOW = false

-- Store time in ms: the injected clock's (ARGV) when given, otherwise Redis' own.
local function now_ms(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  REDIS_NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  return REDIS_NOW
end

-- Redis' own time in µs (TIME), whatever clock the caller injected: what lease tokens are made of.
local function store_time_us()
  local t = redis.call('TIME')
  REDIS_NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A hash field read with HMGET (a string, or false when missing) as a number.
local function num(value, default)
  if value then return tonumber(value) end
  return default
end

-- The lease token (job hash field k) of a new claim: greater than the job's last one, and at least
-- Redis' time in µs (store_time_us) when the claim runs. A counter alone repeats after a failover:
-- when the promoted replica never received a claim (asynchronous replication), the next claim
-- would hand out that claim's token again, and the first holder's late acknowledgement would pass
-- under the second holder's lease. With the time in it, a lost claim's token is below every token
-- the new primary makes, as long as the new primary's clock is not behind the old one's by more
-- than the time between the lost claim and the job's next claim (which includes the whole
-- failover; docs/failover.md, "Lease tokens"). µs since 1970 stay below 2^53, so tokens are exact
-- in Lua's doubles and in JavaScript numbers, until the year 2255.
local function next_lease_token(previous, time_us)
  return math.max(num(previous, 0) + 1, time_us)
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

-- ── Layout guard ──────────────────────────────────────────────────────────────────────────
-- LAYOUT is the data layout version of the Conveyor that loaded this script (scripts.ts defines it
-- ahead of this file, so a script's SHA covers its version). A queue's meta hash keeps in field lv
-- the newest layout that has written to the queue, stamped by the same script that writes, so a
-- queue holding data of layout N always says so. A process connected before a newer Conveyor
-- upgraded the layout would otherwise keep running and lose what it cannot read (a layout 1
-- worker drops compact jobs): every script of a queue runs this first and refuses a newer stamp
-- before it reads or writes anything. One HGET of a hash the script touches anyway.
local function layout_guard(meta, stamp)
  local stored = tonumber(redis.call('HGET', meta, 'lv') or '0') or 0
  if stored > LAYOUT then
    error({ err = 'CONVEYOR_LAYOUT_TOO_NEW ' .. int(stored) .. ' ' .. int(LAYOUT) })
  end
  if stamp and stored < LAYOUT then redis.call('HSET', meta, 'lv', int(LAYOUT)) end
end

-- ── Event log ─────────────────────────────────────────────────────────────────────────────
-- Every change of a job appends one entry to its queue's stream <base>ev in the script that makes
-- the change, so an event exists exactly when its change happened (queue.events(), GET /v1/events;
-- read and pruned by event-log.ts). Entry fields: t type ('' for "added", the most common), n job
-- name, j job id, a attempt, at store time in ms, d details JSON ('' for none, or for an "added"
-- event the common case: see added_details). Layout 5; layout 4 wrote the type in full, which
-- readers still take. The blank type saves 5 of an "added" entry's ~60 bytes.
-- The time: an event at the Redis time this call read (REDIS_NOW) is written with that time as
-- its stream id (`<ms>-*`, Redis 7: STREAM_ID_TIME) and a blank `at`, which readers take as the
-- id's time: about 8 bytes less per entry (docs/performance-redis.md, "Session 13"). Any other
-- (an injected clock's time, Redis older than 7, or a stream whose last id is later than this
-- time, which Redis refuses: a clock set back) gets an id stamped by XADD (`*`) and `at` written
-- out, since XADD stamps its id when it runs, in a long script later than the time the job got.
-- Either way Redis makes ids only grow within a stream: a reader resumes after the last id it
-- saw of each queue.
-- Trimmed approximately (whole stream nodes, cheap) to about EVENT_LOG_MAX_LENGTH entries per
-- queue; pruneEvents applies the retention policy (age, count) exactly.
local EVENT_LOG_MAX_LENGTH = 100000 -- DEFAULT_MAX_EVENTS of src/core/queue-events.ts

-- EVENT_LOG is set by the line scripts.ts puts before this file: false for a prefix whose event
-- log is off (RedisBackend's eventLog option), where no stream is written at all.
local function log_event(base, kind, name, id, attempt, at, data)
  if not EVENT_LOG then return end
  local key, t, a = base .. 'ev', kind == 'added' and '' or kind, int(attempt or 0)
  if STREAM_ID_TIME and at == REDIS_NOW then
    local written = redis.pcall('XADD', key, 'MAXLEN', '~', EVENT_LOG_MAX_LENGTH, int(at) .. '-*',
      't', t, 'n', name, 'j', id, 'a', a, 'at', '', 'd', data or '')
    if type(written) == 'string' then return end
  end
  redis.call('XADD', key, 'MAXLEN', '~', EVENT_LOG_MAX_LENGTH, '*', 't', t, 'n', name, 'j', id, 'a', a, 'at', int(at), 'd', data or '')
end

-- The worker id inside a worker identity JSON, as a JSON string (the "active" event's workerId).
local function worker_id_json(worker)
  local ok, w = pcall(cjson.decode, worker or 'null')
  if ok and type(w) == 'table' and type(w.id) == 'string' then return cjson.encode(w.id) end
  return 'null'
end

-- State letters as the event details name them.
local STATE_NAMES = { w = 'waiting', s = 'scheduled', a = 'active', c = 'completed', d = 'dead', x = 'cancelled', wc = 'waiting-children' }

-- The details of an "added" event. The common case (waiting, due at once, priority 0: most of
-- any backlog) is stored as '' and read back as {"state":"waiting","runAt":at,"priority":0}
-- (event-log.ts), which halves the entry.
local function added_details(state, run_at, priority, now)
  if state == 'w' and run_at == now and priority == 0 then return '' end
  return '{"state":"' .. STATE_NAMES[state] .. '","runAt":' .. int(run_at) .. ',"priority":' .. int(priority) .. '}'
end

-- ── Ready index ───────────────────────────────────────────────────────────────────────────
-- <prefix>:ready (ZSET, one server only: READY_INDEX, set by the line scripts.ts puts before this
-- file, is false on a cluster, where the key would be outside the queue's slot): the queues that
-- may have claimable jobs, each scored with the time (ms) from which it may have one: 0 while jobs
-- wait in its lanes, else its earliest scheduled job's run_at. A claim over many queues reads it
-- (ready-1.lua) and runs claim-4.lua only on the named queues it lists, so empty queues cost
-- nothing. Every script that puts a job into a lane or the scheduled set marks the queue in the
-- same script (ready_mark): a queue is never missing while it holds such a job. A mark may stay
-- after its jobs left (claimed by a worker of other names, say): the next claim that visits the
-- queue finds it empty and takes it out (ready_refresh, at the end of claim-4.lua).
-- The queue's meta field rx holds a copy of its score (absent: no mark), written with it, so an
-- enqueue reads it with its counters and a queue already marked costs nothing more. Claims write
-- the index itself every time (one ZADD or ZREM), so an index key lost by hand is whole again once
-- claims have visited its queues (a claim over many queues visits all of them once a minute).
local READY_MARKED = {} -- base -> the queue's score as meta rx says (false: none), once read

-- The ready index's key and the queue's name, from the queue's key base. The key is READY_KEY, the
-- last key of the call (scripts.ts takes it off KEYS before the script runs): a script declares
-- every key it touches, and a cross-queue flow's parent shares the prefix, so the same key.
local function ready_of(base)
  return READY_KEY, string.match(base, '{([^{}]*)}:$')
end

-- For a script that read meta rx already (with other fields).
local function ready_known(base, rx)
  READY_MARKED[base] = tonumber(rx) or false
end

local function ready_score(base)
  local score = READY_MARKED[base]
  if score == nil then
    score = tonumber(redis.call('HGET', base .. 'meta', 'rx')) or false
    READY_MARKED[base] = score
  end
  return score
end

-- Writes the queue's mark (a time in ms, or false for none) to the index, and to meta rx when it changed.
local function ready_write(base, score)
  if not READY_INDEX then return end
  local key, queue = ready_of(base)
  local was = ready_score(base)
  if score then redis.call('ZADD', key, int(score), queue) else redis.call('ZREM', key, queue) end
  if score ~= was then
    if score then redis.call('HSET', base .. 'meta', 'rx', int(score)) else redis.call('HDEL', base .. 'meta', 'rx') end
  end
  READY_MARKED[base] = score
end

-- Marks the queue as having a claimable job from `at` (ms) on, unless it is marked earlier.
local function ready_mark(base, at)
  if not READY_INDEX then return end
  local score = ready_score(base)
  if score and score <= at then return end
  ready_write(base, at)
end

-- Sets the queue's mark to what it holds: 0 when a job waits in any lane of any name (the names set
-- lists every name that had lanes; a lane set ls:<name> may list lanes already empty, which only
-- keeps the mark), else its earliest scheduled job's run_at, else no mark. `first`: the scheduled
-- set's first entry WITHSCORES when the caller read it already.
local function ready_refresh(base, first)
  if not READY_INDEX then return end
  for _, name in ipairs(redis.call('SMEMBERS', base .. 'names')) do
    if redis.call('EXISTS', base .. 'f:' .. name, base .. 'z:' .. name, base .. 'ls:' .. name) > 0 then
      ready_write(base, 0)
      return
    end
  end
  first = first or redis.call('ZRANGE', base .. 'sched', 0, 0, 'WITHSCORES')
  ready_write(base, first[2] and tonumber(first[2]) or false)
end

-- The slow lane a waiting job of `name` waits in: its name's, or, for a job with a group or a
-- limiter key (flow control; hash field 'ln', its lane: laneOf in src/core/job-flow.ts), that
-- lane's own of its name, L:<name>\n<lane> (names hold no newline), listed in ls:<name>.
local function slow_lane_key(base, name, lane)
  if lane then return base .. 'L:' .. name .. '\n' .. lane end
  return base .. 'z:' .. name
end

-- Puts a waiting job into its slow lane. `lane`: the job's flow lane, false for none, or nil to
-- read it from the job's hash.
local function to_slow_lane(base, id, name, priority, run_at, seq, lane)
  if lane == nil then lane = redis.call('HGET', base .. 'j:' .. id, 'ln') end
  redis.call('ZADD', slow_lane_key(base, name, lane), priority, lane_member(run_at, seq, id))
  ready_mark(base, 0)
  -- The lane set lists lanes with waiting jobs; a claim that finds one empty takes it out.
  if lane then redis.call('ZADD', base .. 'ls:' .. name, 0, lane) end
end

-- ── Running counts (flow control) ─────────────────────────────────────────────────────────
-- A queue whose claims need running counts (per-name caps, flow field pn; or keyed jobs, ln) keeps
-- them in <base>run instead of reading every active job's hash on every claim: field n:<name>, and
-- g:<group key> (also the group's lane name), each the number of its active jobs, a field at 0
-- removed. Counting is on while flow field rc is set: the first claim that needs the counts sets
-- it, counting every active job then (claim-4.lua). A job claimed or counted while counting is on
-- carries field rc = 1, so a script that moves a job out of active (complete, fail, release,
-- rescue, cancel) knows to take it off the counts without asking the flow hash for other jobs.
-- A marked job is counted exactly while counting is on: every active job is counted from the
-- moment rc is set, and flow-set removes rc and the counts together.

-- Adds a job leaving active to `counts` (field -> how many jobs leave), by name and group.
local function running_note(counts, name, group)
  counts['n:' .. name] = (counts['n:' .. name] or 0) + 1
  if group then counts['g:' .. group] = (counts['g:' .. group] or 0) + 1 end
end

-- Takes the jobs noted in `counts` off the queue's running counts, when it counts (flow rc).
local function running_release(base, counts)
  local fields = {}
  for field in pairs(counts) do fields[#fields + 1] = field end
  if #fields == 0 or not redis.call('HGET', base .. 'flow', 'rc') then return end
  local runKey = base .. 'run'
  for i = 1, #fields, CHUNK do
    local slice = { unpack(fields, i, math.min(i + CHUNK - 1, #fields)) }
    local was = redis.call('HMGET', runKey, unpack(slice))
    local keep, gone = {}, {}
    for j, field in ipairs(slice) do
      local left = num(was[j], 0) - counts[field]
      if left > 0 then
        keep[#keep + 1] = field
        keep[#keep + 1] = int(left)
      else
        gone[#gone + 1] = field
      end
    end
    if #keep > 0 then redis.call('HSET', runKey, unpack(keep)) end
    if #gone > 0 then redis.call('HDEL', runKey, unpack(gone)) end
  end
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
  -- fc:<id>: a flow parent's outcome records of its children (see Flows below); l:<id>: its ctx.log lines. Gone with it.
  redis.call('DEL', base .. 'j:' .. id, base .. 'fc:' .. id, base .. 'l:' .. id)
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
    local v = redis.call('HMGET', key, 'n', 'p', 'r', 's', 'a')
    if v[1] then
      to_slow_lane(base, id, v[1], v[2], tonumber(v[3]), tonumber(v[4]))
      redis.call('HSET', key, 'st', 'w')
      log_event(base, 'waiting', v[1], id, num(v[5], 0), now, nil)
    end
  end
  if #due > 0 then call_chunked('ZREM', sched, due, 1) end
  return #due
end

-- ── Compact waiting jobs ──────────────────────────────────────────────────────────────────
-- A job enqueue appends to a fast lane is kept, while it waits, as one field of a bucket hash
-- (<base>w:<b>: job id -> packed record) instead of a hash of its own: a key costs ~100 bytes
-- before it holds anything, a field in a listpack-encoded hash costs its bytes plus ~3. Its full
-- hash (j:<id>) is written when it leaves the fast lane: claimed, cancelled, or (rarely) when a
-- shrinking table has no room for it. A job that does not fit (see compact_add) gets its full
-- hash at once. Every script that looks a job up by id asks both places (a job is in exactly one).
--
-- Buckets form a linear hash table (Litwin) that grows and shrinks one bucket at a time with the
-- number of compact jobs, so buckets hold about BUCKET_LOAD jobs at any depth and stay far below
-- Redis' listpack limits; meta holds its size (wb, absent = 1) and its job count (wn, absent = 0).

-- Mean jobs per bucket the table grows to keep. Buckets not yet split in the current round hold up
-- to twice that; BUCKET_MAX is then about five standard deviations away.
local BUCKET_LOAD = 40
-- Redis keeps a hash listpack-encoded up to hash-max-listpack-entries fields (128 by default) each
-- at most hash-max-listpack-value bytes (64): a job that would cross either limit is not compacted,
-- so no bucket is ever converted to the (far larger) hashtable encoding.
local BUCKET_MAX = 128
local PACKED_MAX = 64

local B36 = '0123456789abcdefghijklmnopqrstuvwxyz'
local function base36(n)
  local out = ''
  repeat
    local d = n % 36
    out = string.sub(B36, d + 1, d + 1) .. out
    n = (n - d) / 36
  until n == 0
  return out
end

-- Largest power of two <= n (n >= 1): the table's current round.
local function round_of(n)
  local low = 1
  while low * 2 <= n do low = low * 2 end
  return low
end

local function id_hash(id)
  return tonumber(string.sub(redis.sha1hex(id), 1, 8), 16)
end

-- The bucket table of the queue at `base`, read from meta; scripts that change it call
-- buckets_close before they return. `options` is the queue's default options text (meta `do`:
-- the first compact job's), which compact jobs with the same options leave out.
-- buckets_from builds it from those three meta fields read by the caller (enqueue reads them
-- with its other meta fields in one HMGET).
local function buckets_from(base, wb, wn, options)
  return { base = base, n = num(wb, 1), count = num(wn, 0), options = options, dirty = false, names = {}, codes = {} }
end

local function buckets_open(base)
  local v = redis.call('HMGET', base .. 'meta', 'wb', 'wn', 'do')
  return buckets_from(base, v[1], v[2], v[3])
end

local function buckets_close(t)
  if t.dirty then redis.call('HSET', t.base .. 'meta', 'wb', int(t.n), 'wn', int(t.count)) end
end

local function bucket_key(t, id)
  local low = round_of(t.n)
  local h = id_hash(id)
  local b = h % low
  if b < t.n - low then b = h % (low * 2) end
  return t.base .. 'w:' .. b
end

-- Job names are stored in compact records as short codes: <base>codes maps name -> code and
-- '#<code>' -> name ('#' holds the last code given; names never start with '#').
local function name_code(t, name)
  local code = t.codes[name]
  if code then return code end
  local key = t.base .. 'codes'
  code = redis.call('HGET', key, name)
  if not code then
    code = base36(redis.call('HINCRBY', key, '#', 1))
    redis.call('HSET', key, name, code, '#' .. code, name)
  end
  t.codes[name] = code
  return code
end

local function name_of(t, code)
  local name = t.names[code]
  if name then return name end
  name = redis.call('HGET', t.base .. 'codes', '#' .. code)
  t.names[code] = name
  return name
end

-- Packed record: "<seq> <created_at> <run_at> <options> <name code> <payload>", numbers in base
-- 36; run_at is empty when it equals created_at and options when they equal the queue default.
-- The payload is last and taken whole, so it needs no escaping.
local function compact_pack(t, seq, created, runAt, options, name, payload)
  -- A batch shares one created_at: encode it once.
  if t.created ~= created then t.created, t.createdText = created, base36(created) end
  return base36(seq) .. ' ' .. t.createdText .. ' ' .. (runAt == created and '' or base36(runAt)) .. ' ' ..
    (options == t.options and '' or options) .. ' ' .. name_code(t, name) .. ' ' .. payload
end

-- A packed record as the job hash fields it stands for (a waiting job of priority 0), as a flat
-- field, value list in the order of HSET's arguments.
local function compact_fields(t, packed)
  local seq, created, runAt, options, code, payload = string.match(packed, '^(%w+) (%w+) (%w*) ([^ ]*) (%w+) (.*)$')
  created = int(tonumber(created, 36))
  return {
    'n', name_of(t, code),
    'd', payload,
    'p', '0',
    'r', runAt == '' and created or int(tonumber(runAt, 36)),
    'c', created,
    's', int(tonumber(seq, 36)),
    'o', options == '' and t.options or options,
    'st', 'w',
  }
end

-- The packed record of a compact job, or false; and, when the table is not empty, the key of the
-- bucket the id belongs in (compact_add takes it, to hash the id once).
local function compact_get(t, id)
  if t.count == 0 then return false end
  local key = bucket_key(t, id)
  return redis.call('HGET', key, id), key
end

-- Splits the next bucket of the round: its jobs whose hash says so move to a new last bucket.
local function buckets_split(t)
  local low = round_of(t.n)
  local from = t.n - low
  local to = from + low
  local fromKey = t.base .. 'w:' .. from
  local entries = redis.call('HGETALL', fromKey)
  local moved, ids = {}, {}
  for i = 1, #entries, 2 do
    if id_hash(entries[i]) % (low * 2) == to then
      moved[#moved + 1] = entries[i]
      moved[#moved + 1] = entries[i + 1]
      ids[#ids + 1] = entries[i]
    end
  end
  if #ids > 0 then
    redis.call('HSET', t.base .. 'w:' .. to, unpack(moved))
    redis.call('HDEL', fromKey, unpack(ids))
  end
  t.n = t.n + 1
  t.dirty = true
end

-- Folds the last bucket back into the one it was split from. Jobs the target has no room for get
-- their full hash (still waiting in their fast lane).
local function buckets_merge(t)
  local last = t.n - 1
  t.n = last
  t.dirty = true
  local lastKey = t.base .. 'w:' .. last
  local entries = redis.call('HGETALL', lastKey)
  if #entries == 0 then return end
  local intoKey = t.base .. 'w:' .. (last - round_of(last))
  local room = BUCKET_MAX - redis.call('HLEN', intoKey)
  local kept = {}
  for i = 1, #entries, 2 do
    if room > 0 then
      kept[#kept + 1] = entries[i]
      kept[#kept + 1] = entries[i + 1]
      room = room - 1
    else
      redis.call('HSET', t.base .. 'j:' .. entries[i], unpack(compact_fields(t, entries[i + 1])))
      t.count = t.count - 1
    end
  end
  if #kept > 0 then redis.call('HSET', intoKey, unpack(kept)) end
  redis.call('DEL', lastKey)
end

-- Stores a new waiting job compactly when it fits: its id and packed record within
-- hash-max-listpack-value, and its bucket below hash-max-listpack-entries. Returns false when it
-- does not fit (the caller writes its full hash instead). `key`: its bucket, if known.
local function compact_add(t, id, packed, key)
  if #id > PACKED_MAX or #packed > PACKED_MAX then return false end
  key = key or bucket_key(t, id)
  if redis.call('HLEN', key) >= BUCKET_MAX then return false end
  redis.call('HSET', key, id, packed)
  t.count = t.count + 1
  t.dirty = true
  while t.count > t.n * BUCKET_LOAD do buckets_split(t) end
  return true
end

-- Forgets a compact job (it is being claimed, cancelled or deleted). The table shrinks with its
-- jobs: at most two merges per job once it is below a quarter of its load, and back to one
-- bucket when the last compact job leaves (every bucket is empty then, so nothing moves).
-- `key`: its bucket as compact_get gave it (the table has not changed since).
local function compact_remove(t, id, key)
  redis.call('HDEL', key, id)
  t.count = t.count - 1
  t.dirty = true
  if t.count <= 0 then
    t.count = 0
    t.n = 1
    return
  end
  for _ = 1, 2 do
    if t.n > 1 and t.count * 4 < t.n * BUCKET_LOAD then buckets_merge(t) end
  end
end

-- ── Adds sent twice ───────────────────────────────────────────────────────────────────────
-- A connection that resends a command whose reply was lost with it (ioredis' Cluster after a
-- master dies, or a client with autoResendUnfulfilledCommands) runs an add a second time when the
-- first ran: that run would find its own jobs and answer "duplicate" for ids nobody else used. Such
-- an add names an attempt key (<base>added:<token>, one token per call): its first run keeps its
-- reply there, for ADD_ATTEMPT_MEMORY_MS (prepended by scripts.ts), and a resend answers that reply
-- without doing anything else. `key` nil: a connection that never resends, nothing is kept.
local function attempt_replay(key)
  if not key then return nil end
  local kept = redis.call('GET', key)
  if kept then return cjson.decode(kept) end
  return nil
end

local function attempt_keep(key, reply)
  if key then redis.call('SET', key, cjson.encode(reply), 'PX', ADD_ATTEMPT_MEMORY_MS) end
  return reply
end

-- Tells subscribed workers that `queue` has claimable jobs (channel '' = wake-ups disabled).
local function wake(channel, queue)
  if channel ~= '' then redis.call('PUBLISH', channel, queue) end
end

-- ── Dedup windows ─────────────────────────────────────────────────────────────────────────
-- Rules: src/backend/dedup.ts. Per queue, <base>dw (HASH dedup key -> the window's job id) and
-- <base>dx (ZSET dedup key by the window's end, ms): an ended window is as good as none, and the
-- enqueue that looks at windows first deletes a few ended ones, so the two stay as small as the
-- windows in use.

-- Takes a waiting or scheduled job out of wherever it waits (its lane or the scheduled set), as a
-- full hash indexed in idx, so its run time can change. Returns its name, priority and seq, or nil
-- when the job has started, finished or is gone.
local function unlane_pending(base, id)
  local key = base .. 'j:' .. id
  local buckets = buckets_open(base)
  local packed, bucket = compact_get(buckets, id)
  if packed then
    local fields = compact_fields(buckets, packed)
    redis.call('LREM', base .. 'f:' .. fields[2], 1, id)
    compact_remove(buckets, id, bucket)
    buckets_close(buckets)
    redis.call('HSET', key, unpack(fields))
    redis.call('ZADD', base .. 'idx', fields[12], id)
    return fields[2], tonumber(fields[6]), tonumber(fields[12])
  end
  local v = redis.call('HMGET', key, 'st', 'n', 'p', 'r', 's', 'ln')
  if v[1] == 's' then
    redis.call('ZREM', base .. 'sched', id)
  elseif v[1] == 'w' then
    if redis.call('ZREM', slow_lane_key(base, v[2], v[6]), lane_member(tonumber(v[4]), tonumber(v[5]), id)) == 0 then
      -- The fast lane is a list: LREM walks it, O(position). Only debounced jobs get here.
      redis.call('LREM', base .. 'f:' .. v[2], 1, id)
      redis.call('ZADD', base .. 'idx', v[5], id)
    end
  else
    return nil
  end
  return v[2], tonumber(v[3]), tonumber(v[5])
end

-- Decides the jobs of an enqueue that carry a dedup window. `entries[from..to]` holds 4 values
-- per such job (its position among the script's jobs counting from 1, dedup key, ttl ms, mode);
-- `job(i)` gives the job's id, payload, run_at (or '') and delay. Returns position -> reply
-- ("<outcome> <window's job id>") for the jobs an open window took in; the others had their window
-- opened for them and are stored as usual. Sets `woken` when a replaced job is due now.
local function dedup_decide(base, now, entries, from, to, job)
  local dw, dx = base .. 'dw', base .. 'dx'
  local ended = redis.call('ZRANGEBYSCORE', dx, '-inf', int(now), 'LIMIT', 0, 20)
  if #ended > 0 then
    redis.call('HDEL', dw, unpack(ended))
    redis.call('ZREM', dx, unpack(ended))
  end
  local taken, woken = {}, false
  for e = from, to, 4 do
    local pos, dkey, ttl, mode = tonumber(entries[e]), entries[e + 1], tonumber(entries[e + 2]), entries[e + 3]
    local id, payload, runAtArg, delay = job(pos)
    local ends = int(now + ttl)
    local owner = redis.call('HGET', dw, dkey)
    local open = owner and tonumber(redis.call('ZSCORE', dx, dkey)) > now
    if open and mode == 'drop' then
      taken[pos] = 'dropped ' .. owner
    elseif open and mode == 'extend' then
      redis.call('ZADD', dx, ends, dkey)
      taken[pos] = 'extended ' .. owner
    elseif open then
      local name, priority, seq = unlane_pending(base, owner)
      if name then
        local runAt = runAtArg ~= '' and tonumber(runAtArg) or now + tonumber(delay)
        local key = base .. 'j:' .. owner
        -- A replacement that moves the job between scheduled and waiting is logged as the SQL
        -- stores log it: "waiting" (a change of state that is not a settle).
        local was = redis.call('HMGET', key, 'st', 'a')
        if was[1] ~= (runAt > now and 's' or 'w') then log_event(base, 'waiting', name, owner, num(was[2], 0), now, nil) end
        if runAt > now then
          redis.call('HSET', key, 'd', payload, 'r', int(runAt), 'st', 's')
          redis.call('ZADD', base .. 'sched', int(runAt), owner)
          ready_mark(base, runAt)
        else
          redis.call('HSET', key, 'd', payload, 'r', int(runAt), 'st', 'w')
          to_slow_lane(base, owner, name, priority, runAt, seq)
          woken = true
        end
        redis.call('ZADD', dx, ends, dkey)
        taken[pos] = 'replaced ' .. owner
      end
    end
    if not taken[pos] then
      redis.call('HSET', dw, dkey, id)
      redis.call('ZADD', dx, ends, dkey)
    end
  end
  return taken, woken
end

-- ── Flows ─────────────────────────────────────────────────────────────────────────────────
-- Rules: src/backend/flows.ts. A child's hash names its parent: pi (id), pq (queue), pb (the
-- parent queue's key base) and pp (its position among the flow's jobs). A parent waits in state
-- 'wc' (in <base>wc, by seq, for stats), counting its unsettled children in pc, with its policy in
-- pf ('fail' | 'continue'). <pbase>fc:<parent id> holds one field per child, "<position>" ->
-- "<queue>\n<id>\n<name>", and once the child settled "o<position>" -> its outcome JSON
-- {"s": state, "r": result, "e": error}. A child in another queue means keys of two slots: only on
-- a single Redis server (capabilities.flows "across-queues"); on a cluster a flow stays in one queue.

-- The wake-up channel of the prefix a key base belongs to ("<prefix>:{<queue>}:" -> "<prefix>:wake").
local function channel_of(base)
  return string.match(base, '^(.*):{[^{}]*}:$') .. ':wake'
end

-- Records a job's final settle (completed, dead or cancelled) with its flow parent, and releases
-- or fails the parent, in the script that settles the job. Only the first settle of a child counts
-- for its parent (a replayed child settles again: its outcome is overwritten, the parent left
-- alone). `result` and `err` are JSON text or nil. A job outside any flow costs one HGET.
local function flow_settled(base, id, state, result, err, now)
  local key = base .. 'j:' .. id
  local f = redis.call('HMGET', key, 'pi', 'pq', 'pb', 'pp', 'n')
  if not f[1] then return end
  local pid, pq, pb, pos = f[1], f[2], f[3], f[4]
  local pkey = pb .. 'j:' .. pid
  local p = redis.call('HMGET', pkey, 'st', 'pc', 'pf', 'r', 'o', 'n', 'a')
  -- A parent deleted already (removed after it died) took its records with it: nothing to keep.
  if not p[1] then return end
  local fc = pb .. 'fc:' .. pid
  local first = redis.call('HEXISTS', fc, 'o' .. pos) == 0
  redis.call('HSET', fc, 'o' .. pos, '{"s":"' .. state .. '","r":' .. (result or 'null') .. ',"e":' .. (err or 'null') .. '}')
  if not first or p[1] ~= 'wc' then return end
  local pending = tonumber(p[2]) - 1
  if state ~= 'completed' and p[3] == 'fail' then
    local queue = string.match(base, '{([^{}]*)}:$')
    local perr = cjson.encode({
      name = 'ChildFailedError',
      message = 'child ' .. id .. ' (' .. f[5] .. ' in queue ' .. queue .. ') ended ' .. state .. '; the flow\'s policy is "fail"',
      stack = cjson.null,
    })
    redis.call('HSET', pkey, 'st', 'd', 'pc', int(pending), 'e', perr, 'f', int(now))
    log_event(pb, 'dead', p[6], pid, num(p[7], 0), now, '{"error":' .. perr .. '}')
    redis.call('ZREM', pb .. 'wc', pid)
    local _, _, retain = parse_options(p[5])
    add_finished(pb, 'dead', pid, now, retain and now + retain)
    -- A parent that is itself a child settles in turn (nested flows; depth bounded by the flow's).
    flow_settled(pb, pid, 'dead', nil, perr, now)
  elseif pending <= 0 then
    -- Released at its own run_at: the claim promotes it once due.
    local runAt = tonumber(p[4])
    redis.call('HSET', pkey, 'st', 's', 'pc', '0')
    log_event(pb, 'waiting', p[6], pid, num(p[7], 0), now, nil)
    redis.call('ZREM', pb .. 'wc', pid)
    redis.call('ZADD', pb .. 'sched', int(runAt), pid)
    ready_mark(pb, runAt)
    if runAt <= now then wake(channel_of(pb), pq) else wake(channel_of(pb), pq .. ' ' .. int(runAt - now)) end
  else
    redis.call('HSET', pkey, 'pc', int(pending))
  end
end

-- Cancels the unsettled children of a parent being cancelled that have not started (and theirs:
-- an explicit stack, not recursion), each recorded with its parent as cancelled.
local function flow_cancel_children(base, id, now)
  local stack = { { base, id } }
  while #stack > 0 do
    local top = table.remove(stack)
    local pb, pid = top[1], top[2]
    local entries = redis.call('HGETALL', pb .. 'fc:' .. pid)
    local settled = {}
    for i = 1, #entries, 2 do
      if string.sub(entries[i], 1, 1) == 'o' then settled[string.sub(entries[i], 2)] = true end
    end
    for i = 1, #entries, 2 do
      local pos = entries[i]
      if string.sub(pos, 1, 1) ~= 'o' and not settled[pos] then
        local queue, cid = string.match(entries[i + 1], '^([^\n]*)\n([^\n]*)\n')
        local cbase = string.match(pb, '^(.*:){[^{}]*}:$') .. '{' .. queue .. '}:'
        local ckey = cbase .. 'j:' .. cid
        local v = redis.call('HMGET', ckey, 'st', 'o', 's', 'n', 'a')
        local cancel = false
        if v[1] == 'wc' then
          redis.call('ZREM', cbase .. 'wc', cid)
          stack[#stack + 1] = { cbase, cid }
          cancel = true
        elseif v[1] == 'w' or v[1] == 's' then
          cancel = unlane_pending(cbase, cid) ~= nil
        end
        if cancel then
          log_event(cbase, 'cancelled', v[4], cid, num(v[5], 0), now, '{"previousState":"' .. STATE_NAMES[v[1]] .. '"}')
          local _, retain = parse_options(v[2])
          redis.call('HSET', ckey, 'st', 'x', 'f', int(now))
          redis.call('ZADD', cbase .. 'idx', v[3], cid)
          add_finished(cbase, 'cancelled', cid, now, retain and now + retain)
          flow_settled(cbase, cid, 'cancelled', nil, nil, now)
        end
      end
    end
  end
end
