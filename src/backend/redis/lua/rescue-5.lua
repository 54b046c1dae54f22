--[[
  rescue: fails the attempts of active jobs whose lease expired (the worker crashed, stalled or
  was cut off), earliest expiry first. Each such job goes back to waiting with run_at = now, or
  to dead when its attempts are used up or its lease expired `maxStalls` times in a row
  (quarantine: it keeps killing its workers). An expiry counts toward the stalls only when the
  job had started (it was not held unstarted in a prefetch buffer: field xt, mark-buffered) and
  was the only started job of its worker in this queue: a worker that died running several does
  not say which one killed it. Such a worker's other active jobs are excused here too (xt), so
  those whose leases expire later are not blamed once they are the last ones left. Safe to run
  from many processes at once: a job leaves the active set in the same step that rescues it.

  KEYS[1] meta     <base>meta
  KEYS[2] active   <base>active
  KEYS[3] dead     <base>dead
  KEYS[4] expiry   <base>expiry
  KEYS[5] idx      <base>idx
  ARGV[1] now in ms, or '' for Redis TIME
  ARGV[2] wake-up channel, or '' for none
  ARGV[3] queue name (the wake-up message)
  ARGV[4] maxStalls
  ARGV[5] most jobs to rescue
  ARGV[6] the "lease expired" error JSON
  ARGV[7] the quarantine error JSON, with __STALLS__ where the number of expiries goes
  Returns a flat array of 5 values per rescued job: id, name, 'waiting' or 'dead', attempt,
  worker JSON.
]]
local meta, active = KEYS[1], KEYS[2]
local base = string.sub(meta, 1, -5)
local now = now_ms(ARGV[1])
local maxStalls = tonumber(ARGV[4])
local expiredError = ARGV[6]
local ids = redis.call('ZRANGEBYSCORE', active, '-inf', int(now), 'LIMIT', 0, tonumber(ARGV[5]))
local out = {}
local requeued = false
-- Started (unexcused) active jobs per worker, and every active job per worker, read before any
-- of them changes (only when something expired).
local perWorker = {}
local heldBy = {}
if #ids > 0 then
  for _, other in ipairs(redis.call('ZRANGE', active, 0, -1)) do
    local o = redis.call('HMGET', base .. 'j:' .. other, 'w', 'k', 'xt')
    local w = o[1]
    if w then
      if o[3] ~= (o[2] or '0') then perWorker[w] = (perWorker[w] or 0) + 1 end
      heldBy[w] = heldBy[w] or {}
      table.insert(heldBy[w], other)
    end
  end
end
local excusedWorkers = {}
local leaving = {} -- running counts to release (running_note)
for _, id in ipairs(ids) do
  local key = base .. 'j:' .. id
  redis.call('ZREM', active, id)
  local v = redis.call('HMGET', key, 'st', 'n', 'a', 'o', 'sl', 'w', 'sa', 'h', 'p', 's', 'k', 'xt', 'rc', 'gk')
  if v[1] == 'a' then
    if v[13] then running_note(leaving, v[2], v[14]) end
    local attempt = num(v[3], 0)
    local stall = 1
    if v[12] == (v[11] or '0') then stall = 0 end
    if v[6] and (perWorker[v[6]] or 0) > 1 then
      stall = 0
      if not excusedWorkers[v[6]] then
        excusedWorkers[v[6]] = true
        for _, other in ipairs(heldBy[v[6]]) do
          local okey = base .. 'j:' .. other
          local o = redis.call('HMGET', okey, 'st', 'k')
          if o[1] == 'a' then redis.call('HSET', okey, 'xt', o[2] or '0') end
        end
      end
    end
    local stalls = num(v[5], 0) + stall
    local maxAttempts, _, retainDead = parse_options(v[4])
    local quarantined = stall == 1 and stalls >= maxStalls
    local history = history_with(v[8], v[3], v[6], v[7], now, 'lease-expired', expiredError)
    local state = 'waiting'
    if not quarantined and attempt < maxAttempts then
      log_event(base, 'stalled', v[2], id, attempt, now, nil)
      redis.call('HSET', key, 'st', 'w', 'r', int(now), 'e', expiredError, 'sl', int(stalls), 'h', history)
      redis.call('HDEL', key, 'le')
      to_slow_lane(base, id, v[2], v[9], now, tonumber(v[10]))
      requeued = true
    else
      state = 'dead'
      local err = expiredError
      if quarantined then err = string.gsub(ARGV[7], '__STALLS__', int(stalls)) end
      log_event(base, 'dead', v[2], id, attempt, now, '{"error":' .. err .. '}')
      if retainDead == 0 then
        delete_job(base, id, nil)
      else
        redis.call('HSET', key, 'st', 'd', 'e', err, 'f', int(now), 'sl', int(stalls), 'h', history)
        redis.call('HDEL', key, 'le')
        add_finished(base, 'dead', id, now, retainDead and now + retainDead)
        flow_settled(base, id, 'dead', nil, err, now)
      end
    end
    out[#out + 1] = id
    out[#out + 1] = v[2]
    out[#out + 1] = state
    out[#out + 1] = int(attempt)
    out[#out + 1] = v[6]
  end
end
running_release(base, leaving)
if requeued then wake(ARGV[2], ARGV[3]) end
return out
