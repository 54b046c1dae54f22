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

-- ── Job ids in lanes, buckets and event entries (layout 6) ──────────────────────────────────
-- A job id made by Conveyor (newJobId in src/core/ids.ts: 22 characters of lower-case Crockford
-- base32, 110 bits) is kept in the places that hold one entry per waiting job (its fast lane, its
-- bucket field, its "added" event entry) in 16 bytes instead of 22, its stored form: its first
-- digit as one byte (0-31), then each run of 7 digits (35 bits) as five 7-bit bytes. Every byte is
-- ASCII, so the form passes through ioredis' string replies unchanged, and its first byte is a
-- control character, which no job id may contain (checked.ts refuses them), so it is never mistaken
-- for an id kept as it is. Any other id (one a caller chose) is kept as it is.
-- The enqueue gets each job's stored form from the backend (storedJobId in codec.ts: ~3 µs of
-- Redis' single thread per job in Lua, under 1 µs in the client); id_store makes it here for the
-- lookups by id (get, cancel, …). id_store(id_store(x)) == id_store(x).
-- ID_DIGIT_OF: for a digit's byte c, string.byte(ID_DIGIT_OF, c - 47) - 48 is its value.
local ID_DIGIT_OF = '0123456789~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~:;<=>?@A~BC~DE~FGHIJ~KLMNO'
local ID_DIGITS = '0123456789abcdefghjkmnpqrstvwxyz'

local function id_store(id)
  if #id ~= 22 or string.find(id, '[^0-9a-hjkmnp-tv-z]') then return id end
  local c = { string.byte(id, 1, 22) }
  local out = { string.byte(ID_DIGIT_OF, c[1] - 47) - 48 }
  for g = 2, 16, 7 do
    local v = 0
    for k = g, g + 6 do v = v * 32 + string.byte(ID_DIGIT_OF, c[k] - 47) - 48 end
    local n = #out
    for k = 5, 1, -1 do
      local d = v % 128
      out[n + k] = d
      v = (v - d) / 128
    end
  end
  return string.char(unpack(out))
end

-- ID_PAIRS: the 1,024 pairs of digits in order ("00", "01", … "zz"): id_text takes two digits at
-- a time from it, as one string.sub, which makes it about 4 times as fast as a digit at a time (a
-- claim from a fast lane turns every job's stored form back into its id). Checked in
-- test/backends/redis-stored-ids.test.ts.
local ID_PAIRS = '000102030405060708090a0b0c0d0e0f0g0h0j0k0m0n0p0q0r0s0t0v0w0x0y0z101112131415161718191a1b1c1d1e1f1g1h1j1k1m1n1p1q1r1s1t1v1w1x1y1z202122232425262728292a2b2c2d2e2f2g2h2j2k2m2n2p2q2r2s2t2v2w2x2y2z303132333435363738393a3b3c3d3e3f3g3h3j3k3m3n3p3q3r3s3t3v3w3x3y3z404142434445464748494a4b4c4d4e4f4g4h4j4k4m4n4p4q4r4s4t4v4w4x4y4z505152535455565758595a5b5c5d5e5f5g5h5j5k5m5n5p5q5r5s5t5v5w5x5y5z606162636465666768696a6b6c6d6e6f6g6h6j6k6m6n6p6q6r6s6t6v6w6x6y6z707172737475767778797a7b7c7d7e7f7g7h7j7k7m7n7p7q7r7s7t7v7w7x7y7z808182838485868788898a8b8c8d8e8f8g8h8j8k8m8n8p8q8r8s8t8v8w8x8y8z909192939495969798999a9b9c9d9e9f9g9h9j9k9m9n9p9q9r9s9t9v9w9x9y9za0a1a2a3a4a5a6a7a8a9aaabacadaeafagahajakamanapaqarasatavawaxayazb0b1b2b3b4b5b6b7b8b9babbbcbdbebfbgbhbjbkbmbnbpbqbrbsbtbvbwbxbybzc0c1c2c3c4c5c6c7c8c9cacbcccdcecfcgchcjckcmcncpcqcrcsctcvcwcxcyczd0d1d2d3d4d5d6d7d8d9dadbdcdddedfdgdhdjdkdmdndpdqdrdsdtdvdwdxdydze0e1e2e3e4e5e6e7e8e9eaebecedeeefegehejekemenepeqeresetevewexeyezf0f1f2f3f4f5f6f7f8f9fafbfcfdfefffgfhfjfkfmfnfpfqfrfsftfvfwfxfyfzg0g1g2g3g4g5g6g7g8g9gagbgcgdgegfggghgjgkgmgngpgqgrgsgtgvgwgxgygzh0h1h2h3h4h5h6h7h8h9hahbhchdhehfhghhhjhkhmhnhphqhrhshthvhwhxhyhzj0j1j2j3j4j5j6j7j8j9jajbjcjdjejfjgjhjjjkjmjnjpjqjrjsjtjvjwjxjyjzk0k1k2k3k4k5k6k7k8k9kakbkckdkekfkgkhkjkkkmknkpkqkrksktkvkwkxkykzm0m1m2m3m4m5m6m7m8m9mambmcmdmemfmgmhmjmkmmmnmpmqmrmsmtmvmwmxmymzn0n1n2n3n4n5n6n7n8n9nanbncndnenfngnhnjnknmnnnpnqnrnsntnvnwnxnynzp0p1p2p3p4p5p6p7p8p9papbpcpdpepfpgphpjpkpmpnpppqprpsptpvpwpxpypzq0q1q2q3q4q5q6q7q8q9qaqbqcqdqeqfqgqhqjqkqmqnqpqqqrqsqtqvqwqxqyqzr0r1r2r3r4r5r6r7r8r9rarbrcrdrerfrgrhrjrkrmrnrprqrrrsrtrvrwrxryrzs0s1s2s3s4s5s6s7s8s9sasbscsdsesfsgshsjsksmsnspsqsrssstsvswsxsyszt0t1t2t3t4t5t6t7t8t9tatbtctdtetftgthtjtktmtntptqtrtstttvtwtxtytzv0v1v2v3v4v5v6v7v8v9vavbvcvdvevfvgvhvjvkvmvnvpvqvrvsvtvvvwvxvyvzw0w1w2w3w4w5w6w7w8w9wawbwcwdwewfwgwhwjwkwmwnwpwqwrwswtwvwwwxwywzx0x1x2x3x4x5x6x7x8x9xaxbxcxdxexfxgxhxjxkxmxnxpxqxrxsxtxvxwxxxyxzy0y1y2y3y4y5y6y7y8y9yaybycydyeyfygyhyjykymynypyqyrysytyvywyxyyyzz0z1z2z3z4z5z6z7z8z9zazbzczdzezfzgzhzjzkzmznzpzqzrzsztzvzwzxzyzz'

-- The id a stored form (id_store) stands for. Each 35-bit group of 7 digits is read as three
-- pairs and one digit. The three groups are written out rather than read by a helper: a claim
-- turns every claimed job's form back, and a call per group made it 0.57 -> 0.82 µs per id.
local function id_text(stored)
  if #stored ~= 16 then return stored end
  local b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15, b16 = string.byte(stored, 1, 16)
  if b1 >= 32 then return stored end
  local sub = string.sub
  local v = (((b2 * 128 + b3) * 128 + b4) * 128 + b5) * 128 + b6
  local d1 = v % 32
  v = (v - d1) / 32
  local p13 = v % 1024
  v = (v - p13) / 1024
  local p12 = v % 1024
  local p11 = (v - p12) / 1024
  v = (((b7 * 128 + b8) * 128 + b9) * 128 + b10) * 128 + b11
  local d2 = v % 32
  v = (v - d2) / 32
  local p23 = v % 1024
  v = (v - p23) / 1024
  local p22 = v % 1024
  local p21 = (v - p22) / 1024
  v = (((b12 * 128 + b13) * 128 + b14) * 128 + b15) * 128 + b16
  local d3 = v % 32
  v = (v - d3) / 32
  local p33 = v % 1024
  v = (v - p33) / 1024
  local p32 = v % 1024
  local p31 = (v - p32) / 1024
  return sub(ID_DIGITS, b1 + 1, b1 + 1) ..
    sub(ID_PAIRS, 2 * p11 + 1, 2 * p11 + 2) .. sub(ID_PAIRS, 2 * p12 + 1, 2 * p12 + 2) ..
    sub(ID_PAIRS, 2 * p13 + 1, 2 * p13 + 2) .. sub(ID_DIGITS, d1 + 1, d1 + 1) ..
    sub(ID_PAIRS, 2 * p21 + 1, 2 * p21 + 2) .. sub(ID_PAIRS, 2 * p22 + 1, 2 * p22 + 2) ..
    sub(ID_PAIRS, 2 * p23 + 1, 2 * p23 + 2) .. sub(ID_DIGITS, d2 + 1, d2 + 1) ..
    sub(ID_PAIRS, 2 * p31 + 1, 2 * p31 + 2) .. sub(ID_PAIRS, 2 * p32 + 1, 2 * p32 + 2) ..
    sub(ID_PAIRS, 2 * p33 + 1, 2 * p33 + 2) .. sub(ID_DIGITS, d3 + 1, d3 + 1)
end

-- The time in ms an id made by newJobId carries (its first 10 digits), read from its stored form
-- (id_store); nil for any other. Digits 2-8 are the first five 7-bit bytes after the first, digits
-- 9 and 10 the top 10 bits of the next five.
local function id_time(sid)
  if #sid ~= 16 then return nil end
  local b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11 = string.byte(sid, 1, 11)
  if b1 >= 32 then return nil end
  local high = (((b2 * 128 + b3) * 128 + b4) * 128 + b5) * 128 + b6
  local low = (((b7 * 128 + b8) * 128 + b9) * 128 + b10) * 128 + b11
  return b1 * 35184372088832 + high * 1024 + math.floor(low / 33554432) -- 32^9, 32^2, 32^5
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
  if stamp and stored < LAYOUT then
    redis.call('HSET', meta, 'lv', int(LAYOUT))
    -- Compact jobs stored before layout 6 are found under their id as it is (buckets_from).
    if stored < 6 and num(redis.call('HGET', meta, 'wn'), 0) > 0 then redis.call('HSET', meta, 'wl', '1') end
  end
end

-- ── Event log ─────────────────────────────────────────────────────────────────────────────
-- Every change of a job appends one entry to its queue's stream <base>ev in the script that makes
-- the change, so an event exists exactly when its change happened (queue.events(), GET /v1/events;
-- read and pruned by event-log.ts). Entry fields (layout 6): t "<type>[ <attempt>[ <at>]]", the
-- type blank for "added" (the most common), the attempt left out when 0 and the store time in ms
-- when it is the stream id's (below); n job name; j job id, as the caller passes it: the stored
-- form (id_store) where the script has it at hand (an add, a claim from a fast lane), which saves
-- 6 bytes, else the id as it is (packing it in Lua would cost ~3 µs of Redis per event; readers
-- take either); d details JSON ('' for none, or for an "added" event the common case: see
-- added_details). So an "added" entry holds an empty t, the name, 16 bytes of id and an empty d.
-- Layouts 4 and 5 wrote the attempt and time as fields a and at (layout 4 the type in full too):
-- readers take an entry with a field a that way.
-- The time: an event at the Redis time this call read (REDIS_NOW) is written with that time as
-- its stream id (`<ms>-*`, Redis 7: STREAM_ID_TIME) and no time in t, which readers take as the
-- id's time: about 8 bytes less per entry (docs/performance-redis.md, "Session 13"). Any other
-- (an injected clock's time, Redis older than 7, or a stream whose last id is later than this
-- time, which Redis refuses: a clock set back) gets an id stamped by XADD (`*`) and `at` written
-- out in t, since XADD stamps its id when it runs, in a long script later than the time the job got.
-- Either way Redis makes ids only grow within a stream: a reader resumes after the last id it
-- saw of each queue.
-- Trimmed approximately (whole stream nodes, cheap) to about EVENT_LOG_MAX_LENGTH entries per
-- queue; pruneEvents applies the retention policy (age, count) exactly.
local EVENT_LOG_MAX_LENGTH = 100000 -- DEFAULT_MAX_EVENTS of src/core/queue-events.ts

-- EVENT_LOG is set by the line scripts.ts puts before this file: false for a prefix whose event
-- log is off (RedisBackend's eventLog option), where no stream is written at all.
-- STREAM_ID_AT: the `<ms>-*` stream id of each time this call wrote an event at, made once (a
-- batch's events share one time; formatting it per event was a measurable share of an add).
local STREAM_ID_AT = {}
local function log_event(base, kind, name, id, attempt, at, data)
  if not EVENT_LOG then return end
  local key, t = base .. 'ev', kind == 'added' and '' or kind
  local a = (attempt == nil or attempt == 0 or attempt == '0') and '0' or int(attempt)
  if STREAM_ID_TIME and at == REDIS_NOW then
    local streamId = STREAM_ID_AT[at]
    if not streamId then
      streamId = int(at) .. '-*'
      STREAM_ID_AT[at] = streamId
    end
    local written = redis.pcall('XADD', key, 'MAXLEN', '~', EVENT_LOG_MAX_LENGTH, streamId,
      't', a == '0' and t or t .. ' ' .. a, 'n', name, 'j', id, 'd', data or '')
    if type(written) == 'string' then return end
  end
  redis.call('XADD', key, 'MAXLEN', '~', EVENT_LOG_MAX_LENGTH, '*', 't', t .. ' ' .. a .. ' ' .. int(at), 'n', name, 'j', id,
    'd', data or '')
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
-- the first compact job's), which compact jobs with the same options leave out. Legacy: the
-- table may still hold fields a layout before 6 wrote, under the id as it is rather than its
-- stored form (id_store), which lookups by id then try too: meta `wl` says so, set when a queue
-- with compact jobs is first written in layout 6 (layout_guard) and cleared when its table next
-- empties; a queue still stamped with an older layout `lv` (read before any layout 6 write) may
-- too. buckets_from builds it from those five meta fields read by the caller (enqueue reads them
-- with its other meta fields in one HMGET).
local function buckets_from(base, wb, wn, options, wl, lv)
  return { base = base, n = num(wb, 1), count = num(wn, 0), options = options,
    legacy = (wl or num(lv, 0) < 6) and true or false, dirty = false, names = {}, codes = {} }
end

local function buckets_open(base)
  local v = redis.call('HMGET', base .. 'meta', 'wb', 'wn', 'do', 'wl', 'lv')
  return buckets_from(base, v[1], v[2], v[3], v[4], v[5])
end

local function buckets_close(t)
  if t.dirty then redis.call('HSET', t.base .. 'meta', 'wb', int(t.n), 'wn', int(t.count)) end
  if t.legacy and t.count == 0 then
    redis.call('HDEL', t.base .. 'meta', 'wl')
    t.legacy = false
  end
end

-- The bucket of a field, hashed as it is stored: a field of layout 6 (id_store's form) and one an
-- older layout wrote (the id as it is) each sit where their own text hashes.
local function bucket_key(t, field)
  local low = round_of(t.n)
  local h = id_hash(field)
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
-- created_at is "+<ms>" or "-<ms>" from the time in the job's id when it has one (id_time: an id
-- made by newJobId, made by the producer just before the add, a few ms at most from the store's
-- time, so 2-3 bytes instead of 8; layout 6), else in full. The payload is last and taken whole,
-- so it needs no escaping. `sid`: the job's id_store(id), its field in the bucket.
local CREATED_DELTA_MAX = 2176782336 -- 36^6 ms (25 days): a delta below it is shorter than a time in full
local function compact_pack(t, seq, created, runAt, options, name, payload, sid)
  local createdText
  local idTime = id_time(sid)
  if idTime and math.abs(created - idTime) < CREATED_DELTA_MAX then
    -- The ids of a batch are mostly made in the same ms: encode each distance once.
    if t.deltaFrom ~= idTime or t.deltaTo ~= created then
      t.deltaFrom, t.deltaTo = idTime, created
      t.deltaText = created < idTime and '-' .. base36(idTime - created) or '+' .. base36(created - idTime)
    end
    createdText = t.deltaText
  else
    -- A batch shares one created_at: encode it once.
    if t.created ~= created then t.created, t.createdText = created, base36(created) end
    createdText = t.createdText
  end
  return base36(seq) .. ' ' .. createdText .. ' ' .. (runAt == created and '' or base36(runAt)) .. ' ' ..
    (options == t.options and '' or options) .. ' ' .. name_code(t, name) .. ' ' .. payload
end

-- Where each field sits in compact_fields' list (its value's index), the same for every record.
local COMPACT_AT = { n = 2, d = 4, p = 6, r = 8, c = 10, s = 12, o = 14, st = 16 }

-- A packed record as the job hash fields it stands for (a waiting job of priority 0), as a flat
-- field, value list in the order of HSET's arguments, the order COMPACT_AT gives. `field`: its
-- field in the bucket.
local function compact_fields(t, packed, field)
  local seq, created, runAt, options, code, payload = string.match(packed, '^(%w+) (%S+) (%w*) ([^ ]*) (%w+) (.*)$')
  local sign = string.sub(created, 1, 1)
  if sign == '+' then
    created = int(id_time(field) + tonumber(string.sub(created, 2), 36))
  elseif sign == '-' then
    created = int(id_time(field) - tonumber(string.sub(created, 2), 36))
  else
    created = int(tonumber(created, 36))
  end
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

-- The packed record of a compact job, or false; and, when the table is not empty, the key of its
-- bucket and its field there (compact_remove takes both; for an id not found, where compact_add
-- would put it, to hash it once). `sid`: id_store(id), when the caller has it already (a lane
-- entry, or an id the backend checked and packed); without it, `id` came from a caller and a
-- stored form is refused: no job id has a control character, and as an id it would name the
-- form's own field, a second name for the job under which a cancel would store it.
local function compact_get(t, id, sid)
  if t.count == 0 then return false end
  if not sid then
    if (string.byte(id, 1) or 32) < 32 then return false end
    sid = id_store(id)
  end
  local key = bucket_key(t, sid)
  local packed = redis.call('HGET', key, sid)
  if packed then return packed, key, sid end
  if t.legacy and sid ~= id then
    local old = bucket_key(t, id)
    packed = redis.call('HGET', old, id)
    if packed then return packed, old, id end
  end
  return false, key, sid
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
      redis.call('HSET', t.base .. 'j:' .. id_text(entries[i]), unpack(compact_fields(t, entries[i + 1], entries[i])))
      t.count = t.count - 1
    end
  end
  if #kept > 0 then redis.call('HSET', intoKey, unpack(kept)) end
  redis.call('DEL', lastKey)
end

-- Stores a new waiting job compactly when it fits: its id and packed record within
-- hash-max-listpack-value, and its bucket below hash-max-listpack-entries. Returns false when it
-- does not fit (the caller writes its full hash instead). `sid`: the job's id_store(id); `key`:
-- its bucket, if known.
local function compact_add(t, sid, packed, key)
  if #sid > PACKED_MAX or #packed > PACKED_MAX then return false end
  key = key or bucket_key(t, sid)
  if redis.call('HLEN', key) >= BUCKET_MAX then return false end
  redis.call('HSET', key, sid, packed)
  t.count = t.count + 1
  t.dirty = true
  while t.count > t.n * BUCKET_LOAD do buckets_split(t) end
  return true
end

-- Forgets a compact job (it is being claimed, cancelled or deleted). The table shrinks with its
-- jobs: at most two merges per job once it is below a quarter of its load, and back to one
-- bucket when the last compact job leaves (every bucket is empty then, so nothing moves).
-- `key`, `field`: its bucket and field as compact_get gave them (the table has not changed since).
local function compact_remove(t, key, field)
  redis.call('HDEL', key, field)
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

-- Takes a waiting job out of its name's fast lane (a list: LREM walks it, O(position)). The lane
-- holds the id's stored form (id_store), or, put there by a layout before 6, the id as it is.
local function fast_lane_remove(base, name, id)
  local key, sid = base .. 'f:' .. name, id_store(id)
  if redis.call('LREM', key, 1, sid) == 0 and sid ~= id then redis.call('LREM', key, 1, id) end
end

-- Takes a waiting or scheduled job out of wherever it waits (its lane or the scheduled set), as a
-- full hash indexed in idx, so its run time can change. Returns its name, priority and seq, or nil
-- when the job has started, finished or is gone.
local function unlane_pending(base, id)
  local key = base .. 'j:' .. id
  local buckets = buckets_open(base)
  local packed, bucket, field = compact_get(buckets, id)
  if packed then
    local fields = compact_fields(buckets, packed, field)
    fast_lane_remove(base, fields[2], id)
    compact_remove(buckets, bucket, field)
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
      fast_lane_remove(base, v[2], id)
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
