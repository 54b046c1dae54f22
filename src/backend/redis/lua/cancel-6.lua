--[[
  cancel: cancels one job. A waiting or scheduled job leaves its lane or the scheduled set and
  never runs. An active job is marked cancelled and keeps its lease token, so its worker's next
  heartbeat learns "cancelled" and its late settle is refused; it is kept at least until its
  lease would have expired, even with retention 0, so that heartbeat can still find it. A waiting
  job kept as a compact record (see keys.ts) leaves its bucket; kept after cancelling, it gets its
  full hash.

  KEYS[1] meta       <base>meta
  KEYS[2] sched      <base>sched
  KEYS[3] active     <base>active
  KEYS[4] cancelled  <base>cancelled
  KEYS[5] expiry     <base>expiry
  KEYS[6] idx        <base>idx
  ARGV[1] now in ms, or '' for Redis TIME
  ARGV[2] job id
  Returns 'cancelled', 'not-found' or 'already-finished'.
]]
local meta, sched, active, idx = KEYS[1], KEYS[2], KEYS[3], KEYS[6]
local base = string.sub(meta, 1, -5)
local now = now_ms(ARGV[1])
local id = ARGV[2]
local key = base .. 'j:' .. id

-- A compact job waits in its fast lane; cancelled, it gets its full hash (unless kept 0 ms).
local buckets = buckets_open(base)
local packed, bucket, field = compact_get(buckets, id)
if packed then
  local fields = compact_fields(buckets, packed, field)
  local name, seq, options = fields[2], fields[12], fields[14]
  -- Cancelling a waiting job is rare: the walk of its fast lane is fine.
  fast_lane_remove(base, name, id)
  compact_remove(buckets, bucket, field)
  buckets_close(buckets)
  -- Its queue may hold nothing claimable now: its mark in the ready index says so.
  ready_refresh(base)
  local _, retain = parse_options(options)
  log_event(base, 'cancelled', name, id, 0, now, '{"previousState":"waiting"}')
  if retain ~= 0 then
    fields[16] = 'x'
    redis.call('HSET', key, 'f', int(now), unpack(fields))
    redis.call('ZADD', idx, seq, id)
    add_finished(base, 'cancelled', id, now, retain and now + retain)
  end
  return 'cancelled'
end

local v = redis.call('HMGET', key, 'st', 'n', 'p', 'r', 's', 'o', 'a', 'w', 'sa', 'h', 'le', 'ln', 'rc', 'gk')
local state = v[1]
if not state then return 'not-found' end
if state == 'c' or state == 'd' or state == 'x' then return 'already-finished' end
local _, retain = parse_options(v[6])
log_event(base, 'cancelled', v[2], id, num(v[7], 0), now, '{"previousState":"' .. STATE_NAMES[state] .. '"}')

if state == 'a' then
  redis.call('ZREM', active, id)
  if v[13] then
    local leaving = {}
    running_note(leaving, v[2], v[14])
    running_release(base, leaving)
  end
  redis.call('HSET', key, 'st', 'x', 'f', int(now), 'h', history_with(v[10], v[7], v[8], v[9], now, 'cancelled', nil))
  redis.call('HDEL', key, 'le')
  local deadline = nil
  if retain then deadline = math.max(now + retain, num(v[11], now)) end
  add_finished(base, 'cancelled', id, now, deadline)
  flow_settled(base, id, 'cancelled', nil, nil, now)
  return 'cancelled'
end

-- A flow parent waiting for its children: they are cancelled with it (the ones not started).
if state == 'wc' then
  redis.call('ZREM', base .. 'wc', id)
  -- Cancelled first, so its children's settles below leave it alone.
  redis.call('HSET', key, 'st', 'x')
  flow_cancel_children(base, id, now)
-- Waiting (in one of its name's lanes) or scheduled (in the scheduled set, due or not).
elseif redis.call('ZREM', sched, id) == 0 then
  local member = lane_member(tonumber(v[4]), tonumber(v[5]), id)
  if redis.call('ZREM', slow_lane_key(base, v[2], v[12]), member) == 0 then
    -- Cancelling a waiting job is rare: the walk of its fast lane is fine.
    fast_lane_remove(base, v[2], id)
  end
end
-- Its queue may hold nothing claimable now: its mark in the ready index says so.
ready_refresh(base)
if retain == 0 then
  delete_job(base, id, nil)
else
  redis.call('HSET', key, 'st', 'x', 'f', int(now))
  redis.call('ZADD', idx, v[5], id)
  add_finished(base, 'cancelled', id, now, retain and now + retain)
  flow_settled(base, id, 'cancelled', nil, nil, now)
end
return 'cancelled'
