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
  local v = redis.call('HMGET', key, 'st', 'k', 'o', 'a', 'w', 'sa', 'h', 'e', 'sl', 'n', 'rc', 'gk', 'pi')
  if v[1] == 'a' and num(v[2], 0) == token then
    local _, retain = parse_options(v[3])
    done[#done + 1] = id
    if v[11] then running_note(leaving, v[10], v[12]) end
    log_event(base, 'completed', v[10], id, v[4], now, '{"result":' .. ARGV[i + 2] .. '}')
    if retain == 0 then
      delete_job(base, id, nil)
    else
      redis.call('HSET', key, 'st', 'c', 'rs', ARGV[i + 2], 'f', nowText,
        'h', history_with(v[7], v[4], v[5], v[6], now, 'completed', nil))
      -- A completed job shows no error (earlier attempts' errors stay in its history) and no
      -- stalls: only expiries in a row count. Its lease expiry (le) stays as a record of the last
      -- lease; nothing reads it once the job is not active.
      if v[8] or v[9] then redis.call('HDEL', key, 'e', 'sl') end
      add_finished(base, 'completed', id, now, retain and now + retain, finished)
      -- Only a flow's child (pi: its parent) has a parent to tell.
      if v[13] then flow_settled(base, id, 'completed', ARGV[i + 2], nil, now) end
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
