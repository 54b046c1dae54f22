--[[
  progress: stores the latest progress report of a running job, only while it is active under
  the exact lease token presented (fencing). A report that changes the stored progress is logged
  as a "progress" event; repeating the same report logs nothing.

  KEYS[1] job      <base>j:<id>
  ARGV[1] lease token
  ARGV[2] progress JSON
  ARGV[3] now in ms, or '' for Redis TIME
  ARGV[4] job id
  Returns 1 applied, 0 stale.
]]
local v = redis.call('HMGET', KEYS[1], 'st', 'k', 'pg', 'n', 'a')
if v[1] == 'a' and num(v[2], 0) == tonumber(ARGV[1]) then
  if v[3] ~= ARGV[2] then
    redis.call('HSET', KEYS[1], 'pg', ARGV[2])
    local id = ARGV[4]
    local base = string.sub(KEYS[1], 1, #KEYS[1] - #id - 2)
    log_event(base, 'progress', v[4], id, num(v[5], 0), now_ms(ARGV[3]), '{"progress":' .. ARGV[2] .. '}')
  end
  return 1
end
return 0
