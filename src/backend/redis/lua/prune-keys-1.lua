--[[
  prune-keys: deletes idempotency keys past their deadline on the injected clock (see once).

  KEYS[1] index    {<prefix>:idem}:exp
  ARGV[1] now in ms (the injected clock)
  ARGV[2] most keys to delete
  Returns how many keys were deleted.
]]
local keys = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', int(tonumber(ARGV[1])), 'LIMIT', 0, tonumber(ARGV[2]))
local deleted = 0
for _, key in ipairs(keys) do
  local deadline = num(redis.call('GET', key), nil)
  if deadline and deadline <= tonumber(ARGV[1]) then
    deleted = deleted + redis.call('DEL', key)
  end
  -- A newer once() re-added the key with a later deadline (kept), or it is gone already.
  if not deadline or deadline <= tonumber(ARGV[1]) then redis.call('ZREM', KEYS[1], key) end
end
return deleted
