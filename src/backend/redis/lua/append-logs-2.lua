--[[
  append-logs: appends lines to a running job's log, only while the job is active under the
  exact lease token presented (fencing), and keeps the newest `max` lines.

  KEYS[1] job      <base>j:<id>
  KEYS[2] log      <base>l:<id>   LIST of "<at> <attempt> <line>", oldest first
  ARGV[1] now in ms, or '' for Redis TIME
  ARGV[2] lease token
  ARGV[3] max lines kept per job
  ARGV[4..] the lines (already bounded by boundLogLines)
  Returns 1 applied, 0 stale.
]]
local v = redis.call('HMGET', KEYS[1], 'st', 'k', 'a')
if v[1] ~= 'a' or num(v[2], 0) ~= tonumber(ARGV[2]) then return 0 end
local prefix = int(now_ms(ARGV[1])) .. ' ' .. int(num(v[3], 0)) .. ' '
local entries = {}
for i = 4, #ARGV do
  entries[#entries + 1] = prefix .. ARGV[i]
  if #entries == CHUNK then
    redis.call('RPUSH', KEYS[2], unpack(entries))
    entries = {}
  end
end
if #entries > 0 then redis.call('RPUSH', KEYS[2], unpack(entries)) end
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[3]), -1)
return 1
