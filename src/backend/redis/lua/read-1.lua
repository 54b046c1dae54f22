--[[
  read: jobs of one queue by id, wherever each is stored (its own hash, or a compact record in a
  bucket while it waits in a fast lane), in one snapshot. Read-only.

  KEYS[1] meta     <base>meta
  ARGV[1], ARGV[2], ... job ids
  Returns one value per id, in input order: the job's hash as one string, field and value
  alternating, separated by NUL bytes (as claim returns it), or false when the queue has no such
  job.
]]
local base = string.sub(KEYS[1], 1, -5)
local buckets = buckets_open(base)
local out = {}
for i, id in ipairs(ARGV) do
  local fields = redis.call('HGETALL', base .. 'j:' .. id)
  if #fields == 0 then
    local packed, _, field = compact_get(buckets, id)
    if packed then fields = compact_fields(buckets, packed, field) end
  end
  out[i] = #fields > 0 and table.concat(fields, '\0') or false
end
return out
