--[[
  lane-position: where a seq falls in a fast lane, for list()'s keyset cursors. Read-only.

  KEYS[1] meta     <base>meta
  KEYS[2] lane     <base>f:<name>, waiting jobs in seq order, oldest first
  ARGV[1] seq
  Returns how many of the lane's jobs have a smaller seq: a binary search by LINDEX, so a page
  deep in a long lane starts where it is instead of reading every newer job first.
]]
local base = string.sub(KEYS[1], 1, -5)
local buckets = buckets_open(base)
local target = tonumber(ARGV[1])

local function seq_at(i)
  -- The lane's entry is the id's stored form, the same as its bucket field (id_store).
  local entry = redis.call('LINDEX', KEYS[2], i)
  if not entry then return nil end
  local s = redis.call('HGET', base .. 'j:' .. id_text(entry), 's')
  if s then return tonumber(s) end
  local packed = compact_get(buckets, entry, entry)
  if packed then return tonumber(string.match(packed, '^(%w+) '), 36) end
  return nil
end

local lo, hi = 0, redis.call('LLEN', KEYS[2])
while lo < hi do
  local mid = math.floor((lo + hi) / 2)
  local s = seq_at(mid)
  -- A job that left between the reads counts as older: the search still ends, the page is a hint.
  if s == nil or s < target then lo = mid + 1 else hi = mid end
end
return lo
