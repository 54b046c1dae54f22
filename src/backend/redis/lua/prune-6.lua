--[[
  prune: deletes finished jobs of one queue past their retention, then the oldest ones beyond
  the per-queue counts (completed and cancelled together; dead apart). Jobs kept forever
  (retention null) are exempt from both: their scores sit at or above KEPT. Safe to run from many
  processes at once: each deletion happens once, inside this atomic step.

  KEYS[1] meta       <base>meta
  KEYS[2] completed  <base>completed
  KEYS[3] cancelled  <base>cancelled
  KEYS[4] dead       <base>dead
  KEYS[5] expiry     <base>expiry
  KEYS[6] idx        <base>idx
  ARGV[1] now in ms, or '' for Redis TIME
  ARGV[2] most completed + cancelled jobs to keep
  ARGV[3] most dead jobs to keep
  ARGV[4] most jobs to delete in this call
  Returns how many jobs were deleted.
]]
local meta, expiry = KEYS[1], KEYS[5]
local base = string.sub(meta, 1, -5)
local now = now_ms(ARGV[1])
local budget = tonumber(ARGV[4])
local deleted = 0
local setOf = { c = 'completed', x = 'cancelled', d = 'dead' }

-- By age.
local expired = redis.call('ZRANGEBYSCORE', expiry, '-inf', int(now), 'LIMIT', 0, budget)
for _, id in ipairs(expired) do
  local state = redis.call('HGET', base .. 'j:' .. id, 'st')
  if state and setOf[state] then
    delete_job(base, id, setOf[state])
    deleted = deleted + 1
  else
    -- Only finished jobs have a deadline; anything else here is a stale entry.
    redis.call('ZREM', expiry, id)
  end
end

-- By count: the oldest finite-retention members of `sets` (merged by finished_at) beyond `keep`.
local function trim(sets, keep)
  local total = 0
  for _, set in ipairs(sets) do total = total + redis.call('ZCOUNT', base .. set, '-inf', '(' .. int(KEPT)) end
  local excess = math.min(total - keep, budget - deleted)
  if excess <= 0 then return end
  local candidates = {}
  for _, set in ipairs(sets) do
    local page = redis.call('ZRANGEBYSCORE', base .. set, '-inf', '(' .. int(KEPT), 'WITHSCORES', 'LIMIT', 0, excess)
    for j = 1, #page, 2 do candidates[#candidates + 1] = { tonumber(page[j + 1]), page[j], set } end
  end
  table.sort(candidates, function(x, y)
    if x[1] ~= y[1] then return x[1] < y[1] end
    return x[2] < y[2]
  end)
  for j = 1, excess do
    local c = candidates[j]
    delete_job(base, c[2], c[3])
    deleted = deleted + 1
  end
end

if deleted < budget then trim({ 'completed', 'cancelled' }, tonumber(ARGV[2])) end
if deleted < budget then trim({ 'dead' }, tonumber(ARGV[3])) end
return deleted
