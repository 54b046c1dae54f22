--[[
  fail: records failed attempts, each only while the job is active under the exact lease token
  presented (fencing). With a retry delay the job becomes scheduled at now + delay (claim
  promotes it once due); without one it is dead, or deleted at once when kept 0 ms.

  KEYS[1] meta     <base>meta
  KEYS[2] active   <base>active
  KEYS[3] sched    <base>sched
  KEYS[4] dead     <base>dead
  KEYS[5] expiry   <base>expiry
  ARGV[1] now in ms, or '' for Redis TIME
  ARGV[2] wake-up channel, or '' for none
  ARGV[3] queue name (the wake-up message: "<queue>" when a retry is due now, "<queue> <ms>"
          when the earliest retry comes due in <ms>)
  ARGV[4..] quadruples: job id, lease token, error JSON, retry delay in ms or '' for dead
  Returns { results, nextDueIn }: results has one integer per job in input order (1 applied,
  0 stale); nextDueIn is how many ms until the earliest retry scheduled comes due, or false.
]]
local meta, active, sched = KEYS[1], KEYS[2], KEYS[3]
local base = string.sub(meta, 1, -5)
local now = now_ms(ARGV[1])
local nowText = int(now)
local results = {}
local done = {}                              -- ids leaving the active set
local retries = {}                           -- run_at, id pairs for the scheduled set
local finished = { dead = {}, expiry = {} }  -- batched ZADDs
local leaving = {}                           -- running counts to release (running_note)
local nextRunAt = false
for i = 4, #ARGV, 4 do
  local id, token, err, delay = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
  local key = base .. 'j:' .. id
  local v = redis.call('HMGET', key, 'st', 'k', 'o', 'a', 'w', 'sa', 'h', 'sl', 'n', 'rc', 'gk')
  if v[1] == 'a' and num(v[2], 0) == token then
    done[#done + 1] = id
    if v[10] then running_note(leaving, v[9], v[11]) end
    -- Any settle other than a lease expiry ends a run of expiries: stalls back to 0.
    if v[8] then redis.call('HDEL', key, 'sl') end
    if delay ~= '' then
      local runAt = now + tonumber(delay)
      redis.call('HSET', key, 'st', 's', 'r', int(runAt), 'e', err,
        'h', history_with(v[7], v[4], v[5], v[6], now, 'failed', err))
      log_event(base, 'retrying', v[9], id, v[4], now, '{"error":' .. err .. ',"runAt":' .. int(runAt) .. '}')
      retries[#retries + 1] = int(runAt)
      retries[#retries + 1] = id
      if not nextRunAt or runAt < nextRunAt then nextRunAt = runAt end
    else
      local _, _, retain = parse_options(v[3])
      log_event(base, 'dead', v[9], id, v[4], now, '{"error":' .. err .. '}')
      if retain == 0 then
        delete_job(base, id, nil)
      else
        redis.call('HSET', key, 'st', 'd', 'e', err, 'f', nowText,
          'h', history_with(v[7], v[4], v[5], v[6], now, 'dead', err))
        add_finished(base, 'dead', id, now, retain and now + retain, finished)
        flow_settled(base, id, 'dead', nil, err, now)
      end
    end
    results[#results + 1] = 1
  else
    results[#results + 1] = 0
  end
end
if #done > 0 then call_chunked('ZREM', active, done, 1) end
running_release(base, leaving)
if #retries > 0 then call_chunked('ZADD', sched, retries, 2) end
if nextRunAt then ready_mark(base, nextRunAt) end
flush_finished(base, finished)
if not nextRunAt then return { results, false } end
if nextRunAt <= now then
  wake(ARGV[2], ARGV[3])
else
  wake(ARGV[2], ARGV[3] .. ' ' .. int(nextRunAt - now))
end
return { results, int(nextRunAt - now) }
