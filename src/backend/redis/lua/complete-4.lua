--[[
  complete: marks jobs completed with their results, each only while it is active under the
  exact lease token presented (fencing). A job kept 0 ms after completion is deleted at once.

  KEYS[1] meta       <base>meta
  KEYS[2] active     <base>active
  KEYS[3] completed  <base>completed
  KEYS[4] expiry     <base>expiry
  ARGV[1] now in ms, or '' for Redis TIME
  ARGV[2..] triples: job id, lease token, result JSON
  Returns one integer per job, in input order: 1 applied, 0 stale.

  The completed attempt is not appended to the job's history (h): every field of its record (the
  attempt, the worker, started and finished at, no error) is in the hash already, and the backend
  adds the record when it reads a completed job (withCompletedAttempt, src/backend/history.ts), as
  PostgreSQL's complete.sql does. Building and storing that JSON text cost about a fifth of this
  script's time per job, more where it turned a small job's hash from a listpack into a hash table
  (docs/performance-redis.md, "Session 24").
]]
local meta, active = KEYS[1], KEYS[2]
local base = string.sub(meta, 1, -5)
local now = now_ms(ARGV[1])
local nowText = int(now)
local result = {}
local done = {}                                   -- ids leaving the active set
local finished = { completed = {}, expiry = {} }  -- batched ZADDs
local leaving = {}                                -- running counts to release (running_note)
for i = 2, #ARGV, 3 do
  local id, token = ARGV[i], tonumber(ARGV[i + 1])
  local key = base .. 'j:' .. id
  local v = redis.call('HMGET', key, 'st', 'k', 'o', 'a', 'e', 'sl', 'n', 'rc', 'gk', 'pi')
  if v[1] == 'a' and num(v[2], 0) == token then
    local _, retain = parse_options(v[3])
    done[#done + 1] = id
    if v[8] then running_note(leaving, v[7], v[9]) end
    log_event(base, 'completed', v[7], id, v[4], now, '{"result":' .. ARGV[i + 2] .. '}')
    if retain == 0 then
      delete_job(base, id, nil)
    else
      -- The worker (w) and start (sa) stay: with f they are the completed attempt's record.
      redis.call('HSET', key, 'st', 'c', 'rs', ARGV[i + 2], 'f', nowText)
      -- A completed job shows no error (earlier attempts' errors stay in its history) and no
      -- stalls: only expiries in a row count. Its lease expiry (le) stays as a record of the last
      -- lease; nothing reads it once the job is not active.
      if v[5] or v[6] then redis.call('HDEL', key, 'e', 'sl') end
      add_finished(base, 'completed', id, now, retain and now + retain, finished)
      -- Only a flow's child (pi: its parent) has a parent to tell.
      if v[10] then flow_settled(base, id, 'completed', ARGV[i + 2], nil, now) end
    end
    result[#result + 1] = 1
  else
    result[#result + 1] = 0
  end
end
if #done > 0 then call_chunked('ZREM', active, done, 1) end
running_release(base, leaving)
flush_finished(base, finished)
return result
