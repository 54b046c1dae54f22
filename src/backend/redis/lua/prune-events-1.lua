--[[
  prune-events: deletes the oldest events of one queue's event log (the stream <base>ev, see
  log_event in _common.lua): those beyond the newest `maxEvents`, and those recorded before
  `minAt`, at most `limit`. Entries are appended in the order of their changes, so the old ones
  sit at the front: the scan stops at the first entry it keeps and reads about as many entries as
  it deletes.

  KEYS[1] stream   <base>ev
  ARGV[1] minAt, ms: events recorded earlier go
  ARGV[2] maxEvents: the newest this many are kept (unless too old)
  ARGV[3] limit: most entries deleted by this call
  Returns how many entries were deleted.
]]
local key = KEYS[1]
local minAt, maxEvents, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local byCount = math.max(0, redis.call('XLEN', key) - maxEvents)
local doomed = {}
local start = '-'
local scanning = true
while scanning and #doomed < limit do
  local batch = redis.call('XRANGE', key, start, '+', 'COUNT', math.min(CHUNK, limit - #doomed))
  if #batch == 0 then break end
  for _, entry in ipairs(batch) do
    -- The time written out: third word of t (layout 6), or field at (layouts 4 and 5).
    local at = nil
    local fields = entry[2]
    for i = 1, #fields, 2 do
      if fields[i] == 'at' then at = tonumber(fields[i + 1]) end
      if fields[i] == 't' then at = at or tonumber(string.match(fields[i + 1], '^%S* %d+ (%d+)$') or '') end
    end
    -- No time written out: the stream id's (log_event in _common.lua).
    at = at or tonumber(string.match(entry[1], '^(%d+)'))
    if #doomed < byCount or (at and at < minAt) then
      doomed[#doomed + 1] = entry[1]
    else
      scanning = false
      break
    end
  end
  -- The next batch starts right after the last entry read (XRANGE's "(" needs Redis 6.2).
  local ms, seq = string.match(batch[#batch][1], '^(%d+)-(%d+)$')
  start = ms .. '-' .. int(tonumber(seq) + 1)
end
if #doomed > 0 then call_chunked('XDEL', key, doomed, 1) end
return #doomed
